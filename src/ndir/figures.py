"""Figures 2-4 of Negrel et al. 2014 from training histories, as PNG and PDF.

A history is what :func:`ndir.stages.sparse.train_sparse_projector` writes: one row per
iteration with ``objective`` and, every few steps, ``{train,test}_map_{dot,l2}``.
Each figure takes a list of ``(signature, R, tau, history)`` tuples.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402 (the backend must be chosen first)

#: Scoring of Figures 2b and 3b: the similarity the projectors are trained for.
SCORING = "dot"


def _label(run, vary):
    _, R, tau, _ = run
    return f"R = {R}" if vary == "R" else f"τ = {100 * tau:g} %"


def _save(fig, stem):
    for ext in ("png", "pdf"):
        # A fixed creation date keeps the PDF byte-identical between runs.
        metadata = {"CreationDate": None} if ext == "pdf" else {"Software": None}
        fig.savefig(f"{stem}.{ext}", dpi=150, metadata=metadata)
    plt.close(fig)


def convergence_figure(runs, vary, signature, stem):
    """Fig. 2 (``vary="R"``, tau = 0) or Fig. 3 (``vary="tau"``, fixed R).

    (a) objective (Eq. 13) against iteration, log scale; (b) training mAP (%).
    """
    fig, (objective, train) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for run in sorted(runs, key=lambda r: r[1] if vary == "R" else r[2]):
        history = run[3]
        objective.semilogy(history["iteration"], history["objective"].clip(lower=1e-16), label=_label(run, vary))
        measured = history.dropna(subset=[f"train_map_{SCORING}"])
        train.plot(measured["iteration"], 100 * measured[f"train_map_{SCORING}"], label=_label(run, vary))
    objective.set(xlabel="iteration", ylabel="objective (Eq. 13)", title="(a) Objective function evolution")
    train.set(xlabel="iteration", ylabel="training mAP (%)", title="(b) mAP evolution")
    for ax in (objective, train):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{signature.upper()}: training set")
    _save(fig, stem)


def generalisation_figure(runs, signature, stem):
    """Fig. 4: training and test mAP (%) against iteration, one colour per R.

    (a) reductions scored by the dot product the loss is written for; (b) scored
    L2-normalised, as Tables I and II.
    """
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), constrained_layout=True, sharey=True)
    for ax, scoring, title in zip(axes, ("dot", "l2"), ("(a) dot product", "(b) L2-normalised")):
        for run in sorted(runs, key=lambda r: r[1]):
            _, R, tau, history = run
            measured = history.dropna(subset=[f"test_map_{scoring}"])
            (line,) = ax.plot(measured["iteration"], 100 * measured[f"train_map_{scoring}"], label=f"train, R = {R}")
            ax.plot(
                measured["iteration"],
                100 * measured[f"test_map_{scoring}"],
                linestyle="--",
                color=line.get_color(),
                label=f"test, R = {R}",
            )
        ax.set(xlabel="iteration", ylabel="mAP (%)", title=title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small", ncol=2)
    fig.suptitle(f"{signature.upper()}, τ = {100 * runs[0][2]:g} %: training and test sets")
    _save(fig, stem)


def seeds_comparison_figure(records, stem):
    """Test mAP (%) against bytes stored (log scale), one marker per method family.

    ``records``: the comparison's rows (see :mod:`ndir.comparison`); points of one
    family and input (e.g. PCA on FV-256 at each R) are joined by a line, colours
    tell the inputs apart.
    """
    from .report import method_family

    records = records.assign(family=records["method"].map(method_family))
    markers = dict(zip(sorted(records["family"].unique()), "osD^v<>pPX*h"))
    colours = dict(zip(sorted(records["signature"].unique()), plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    fig, ax = plt.subplots(figsize=(8, 5.5), constrained_layout=True)
    for (family, signature), rows in records.groupby(["family", "signature"], sort=True):
        rows = rows.sort_values("model_bytes")
        ax.plot(
            rows["model_bytes"],
            100 * rows["test_map"],
            marker=markers[family],
            color=colours[signature],
            linestyle="-" if len(rows) > 1 else "none",
            label=f"{family} ({'tf-idf' if signature == 'tfidf' else signature.upper()})",
        )
    ax.set_xscale("log")
    ax.set(xlabel="bytes stored for the learned model (log scale)", ylabel="test mAP (%)")
    ax.set_title("Sparse similarity learners: accuracy against storage")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="x-small", ncol=2, loc="best")
    _save(fig, stem)
