"""Figures 2-4 of Negrel et al. 2014 from training histories, as PNG and PDF.

A history is what :func:`ndir.pipeline.train_sparse_projector` writes: one row per
iteration with ``objective`` and, every few steps, ``{train,test}_map_{dot,l2}``.
Each figure takes a list of ``(signature, R, tau, history)`` tuples.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402 (the backend must be chosen first)

#: Scoring shown in the figures: the similarity the projectors are trained for.
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
    """Fig. 4: training and test mAP (%) against iteration, one colour per R."""
    fig, ax = plt.subplots(figsize=(6, 4.5), constrained_layout=True)
    for run in sorted(runs, key=lambda r: r[1]):
        _, R, tau, history = run
        measured = history.dropna(subset=[f"test_map_{SCORING}"])
        (line,) = ax.plot(measured["iteration"], 100 * measured[f"train_map_{SCORING}"], label=f"train, R = {R}")
        ax.plot(
            measured["iteration"],
            100 * measured[f"test_map_{SCORING}"],
            linestyle="--",
            color=line.get_color(),
            label=f"test, R = {R}",
        )
    ax.set(
        xlabel="iteration",
        ylabel="mAP (%)",
        title=f"{signature.upper()}, τ = {100 * runs[0][2]:g} %: training and test sets",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", ncol=2)
    _save(fig, stem)
