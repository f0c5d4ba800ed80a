"""Stages of ``workflow/rules/sparse.smk``: sparse rank projectors, Table II, their costs and Figures 2-4."""

import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ndir import names, report
from ndir.atomic import atomic_output, write_csv
from ndir.baselines import mean_over_seeds
from ndir.encoding import l2_normalise_rows
from ndir.errors import ResultFileError, rebuild_advice
from ndir.evaluation import INTERVAL_MAX_QUERIES, bootstrap_interval, holidays_map
from ndir.evaluation import ns_score as ns_score_of
from ndir.model_files import read_result
from ndir.projection import (
    SparseRankProjector,
    fit_pca,
    load_projector,
    projection_cost,
    projection_latency,
    save_projector,
)
from ndir.projection.product import TransposedBlocks
from ndir.projection.sparse_rank import CONFIG_GRID, CONFIG_PARAMETERS, projector_params
from ndir.report import NS_NOTE, interval_note, is_inria_holidays, n_test_queries, table_caption, table_stem
from ndir.stages.common import split_signatures

logger = logging.getLogger(__name__)

#: How reduced signatures are scored in the history and tables: ``dot`` is the
#: similarity the projector is trained for, ``y_q^T y_j`` (Eq. 2); ``l2`` first
#: L2-normalises the reduced signatures, as the PCA baseline of Table I does.
SCORINGS = ("dot", "l2")
#: Training mAP that moves by at most this much (a fraction: 0.1 point) over the
#: evaluations of ``flat_map_evaluations`` counts as flat.
FLAT_MAP_TOLERANCE = 1e-3
#: The workflow's own stops of a training, on its training mAP (:func:`map_stop`).
MAP_STOP_KEYS = ("flat_map_evaluations", "stop_at_perfect_map")
#: The keys of the config's ``sparse`` section that a training reads: the estimator's
#: (:data:`ndir.projection.sparse_rank.CONFIG_PARAMETERS` but the grid of cells, which
#: reaches a training as its R and tau) and those of :data:`MAP_STOP_KEYS`.
TRAINING_KEYS = (*(key for key in CONFIG_PARAMETERS if key not in CONFIG_GRID), *MAP_STOP_KEYS)


def training_settings(section):
    """The keys of :data:`TRAINING_KEYS` of the config's ``sparse`` section: the
    ``settings`` of :func:`train_sparse_projector` (and rule train_sparse_projector's,
    which reruns a training when one of them changes, not when the grid grows)."""
    return {key: section[key] for key in TRAINING_KEYS}


def map_is_flat(maps, n_evaluations, tolerance=FLAT_MAP_TOLERANCE):
    """Whether the last ``n_evaluations + 1`` values of ``maps`` (a training's mAP at its
    successive evaluations) lie within ``tolerance`` of each other; False while there
    are fewer."""
    if len(maps) <= n_evaluations:
        return False
    window = maps[-(n_evaluations + 1) :]
    return max(window) - min(window) <= tolerance


def map_stop(maps, flat_map_evaluations, stop_at_perfect_map, tolerance=FLAT_MAP_TOLERANCE):
    """Why a training whose training mAP (dot) was ``maps`` at its evaluations so far
    stops at the last one, or None: "perfect" (``stop_at_perfect_map`` and a training mAP
    of 1: every training query ranks all its near duplicates first, and the mAP cannot
    rise any more), "flat" (:func:`map_is_flat` over ``flat_map_evaluations`` within
    ``tolerance``; None: never)."""
    if stop_at_perfect_map and maps[-1] >= 1.0:
        return "perfect"
    if flat_map_evaluations is not None and map_is_flat(maps, flat_map_evaluations, tolerance):
        return "flat"
    return None


def reduced_aps(projector, X, groups, is_query):
    """Per-query AP (n_queries,) of ``X U`` under each scoring of :data:`SCORINGS` (raw
    dot product; L2-normalised reductions), as a dict keyed by scoring.

    ``X`` is (n, D), an array or its ``TransposedBlocks``; ``projector`` a
    ``SparseRankProjector`` without ``normalize``, whose ``transform`` gives ``X U``
    through the sparse U where that is faster (4x dense BLAS at tau = 0.99,
    D = 81,920: this runs every ``eval_every`` steps of a training).
    """
    Y = projector.transform(X)
    return {
        "dot": holidays_map(Y, groups, is_query, return_per_query=True)[1],
        "l2": holidays_map(l2_normalise_rows(Y), groups, is_query, return_per_query=True)[1],
    }


def train_sparse_projector(
    images,
    signatures,
    projector,
    history,
    encoding,
    codebook_size,
    n_components,
    sparsity,
    settings,
    seed,
    ns_score,
):
    """Learn a sparse rank projector (Algorithm 1) on the training split.

    ``signatures`` are the ``encoding`` signatures with a codebook of ``codebook_size``
    words; ``n_components`` is R, ``sparsity`` tau. ``settings`` holds the config's
    ``sparse`` keys of :data:`TRAINING_KEYS` (:func:`training_settings`), which reach
    the estimator under the names of :data:`ndir.projection.sparse_rank.CONFIG_PARAMETERS`;
    ``seed`` is its random state. Writes the projector (``.npz``, see
    :mod:`ndir.projection.storage`; its meta records the signature name, R and tau) and
    its history (CSV): one row per iteration with the run's parameters
    (:data:`HISTORY_RUN_COLUMNS`), the objective (Eq. 13), the objective
    before that step's l0 projection and the step size, and every
    ``settings["eval_every"]`` steps the train and test mAP under both scorings
    (``{train,test}_map_{dot,l2}``, in [0, 1]); with fewer than
    :data:`~ndir.evaluation.INTERVAL_MAX_QUERIES` test queries also their 95 % bootstrap
    intervals (``test_map_{dot,l2}_{low,high}``). Iteration 0 is the initial PCA
    projectors after the l0 projection: the "thresholded PCA, no learning" ablation.

    With ``ns_score`` (on UKBench), each evaluation also records the test split's N-S
    score under both scorings (``test_ns_{dot,l2}``, out of 4;
    :func:`ndir.evaluation.ns_score`).

    With ``settings["flat_map_evaluations"]`` k (None: never), the training also stops at the
    evaluation where its training mAP (dot) has moved by at most
    :data:`FLAT_MAP_TOLERANCE` over the last k evaluations (:func:`map_is_flat`); with
    ``settings["stop_at_perfect_map"]``, at the first evaluation where it is 1
    (:func:`map_stop`).
    """
    train_sparse_projectors(
        images, signatures, [projector], [history], encoding, codebook_size, [n_components], sparsity, settings, seed,
        ns_score,
    )  # fmt: skip


def train_sparse_projectors(
    images,
    signatures,
    projectors,
    histories,
    encoding,
    codebook_size,
    dims,
    sparsity,
    settings,
    seed,
    ns_score,
):
    """The trainings of :func:`train_sparse_projector` at every R of ``dims`` and the one
    tau ``sparsity``, one after the other on signatures loaded once: ``projectors`` and
    ``histories`` in the order of ``dims``. Each is the one that
    :func:`train_sparse_projector` writes for its cell (its own seed, the same files);
    what the cells share is this job's start-up, about 1.5 s a training (interpreter,
    imports, loading and laying out the signatures), and the PCA they start from
    (:func:`~ndir.projection.pca.fit_pca`)."""
    if not len(projectors) == len(histories) == len(dims):
        raise ValueError(f"{len(dims)} dims for {len(projectors)} projectors and {len(histories)} histories")
    splits, blocked = training_data(images, signatures)
    pca = fit_pca(splits["train"][0], dims)
    for n_components, projector, history in zip(dims, projectors, histories):
        initial = pca[n_components].components_
        train_cell(
            splits, blocked, initial, projector, history, encoding, codebook_size, sparsity, settings, seed, ns_score
        )


def training_data(images, signatures):
    """The splits of :func:`~ndir.stages.common.split_signatures` and, for each, its
    signatures laid out once (``TransposedBlocks``) for the history's many projections
    through the sparse U and the training's own sparse products: one copy of X_train^T
    instead of two, shared by the trainings of a job, which read it only."""
    splits = split_signatures(images, signatures)
    return splits, {name: TransposedBlocks(X) for name, (X, _, _) in splits.items()}


def train_cell(
    splits, blocked, initial, projector, history, encoding, codebook_size, sparsity, settings, seed, ns_score
):
    """One training of :func:`train_sparse_projector` on loaded ``splits`` and their
    ``blocked`` layout (:func:`training_data`), from the PCA axes ``initial`` (D, R): the
    estimator's ``init="pca"``, fitted by the caller."""
    n_components = initial.shape[1]
    params = {**projector_params(settings, n_components, sparsity, seed), "init": initial}
    stops = [settings[key] for key in MAP_STOP_KEYS]
    X_train, groups_train, is_query_train = splits["train"]
    if params["n_queries_per_step"] >= is_query_train.sum():
        logger.info(
            "sparse.queries_per_step %d >= the %d training queries: every step uses them all",
            params["n_queries_per_step"],
            is_query_train.sum(),
        )
    measured = []
    evaluation_seconds = []

    def record(iteration, model):
        start = time.perf_counter()
        row = {"iteration": iteration}
        for name, (_, groups, is_query) in splits.items():
            for scoring, ap in reduced_aps(model, blocked[name], groups, is_query).items():
                row[f"{name}_map_{scoring}"] = float(ap.mean())
                if name == "test" and ap.size < INTERVAL_MAX_QUERIES:
                    row[f"test_map_{scoring}_low"], row[f"test_map_{scoring}_high"] = bootstrap_interval(ap)
        if ns_score:
            Y = model.transform(blocked["test"])
            _, groups, is_query = splits["test"]
            row["test_ns_dot"] = ns_score_of(Y, groups, is_query)
            row["test_ns_l2"] = ns_score_of(l2_normalise_rows(Y), groups, is_query)
        measured.append(row)
        logger.info("iteration %d: %s", iteration, row)
        evaluation_seconds.append(time.perf_counter() - start)
        stop = map_stop([r["train_map_dot"] for r in measured], *stops)
        if stop:
            logger.info("iteration %d: training mAP %s, stopping", iteration, stop)
        return stop is not None

    # n_jobs: the rule's threads, 1; trainings run side by side, one per core.
    model = SparseRankProjector(**params, callback=record, n_jobs=1)
    start = time.perf_counter()
    model.fit(X_train, groups_train, queries=is_query_train, transposed=blocked["train"])
    # The fit's own time: the mAP measurements of the callback are not training.
    fit_seconds = time.perf_counter() - start - sum(evaluation_seconds)
    # Row t: the state after t steps; the objective at U_{t-1} - mu G before its l0
    # projection, and the step mu that led there.
    curve = pd.DataFrame(
        {
            "iteration": np.arange(len(model.objective_)),
            "objective": model.objective_,
            "objective_before_projection": np.concatenate([[np.nan], model.objective_unprojected_]),
            "step_size": np.concatenate([[np.nan], model.step_sizes_]),
        }
    )
    curve = curve.merge(pd.DataFrame(measured), on="iteration", how="left")
    signature = names.signature_name(encoding, codebook_size)
    run = {
        "signature": signature,
        "encoding": encoding,
        "K": int(codebook_size),
        "R": int(n_components),
        "tau": float(sparsity),
        # Why the curve ends where it does (a figure's legend says it).
        "stopped_by": model.stop_reason_,
    }
    # The run's parameters first, in every row: the history says whose it is.
    curve = pd.concat([pd.DataFrame(run, index=curve.index), curve], axis=1)
    with atomic_output(projector) as tmp:
        save_projector(
            tmp,
            model.components_,
            signature=signature,
            n_features=int(X_train.shape[1]),
            n_components=int(n_components),
            sparsity=float(sparsity),
            n_nonzero=int(model.n_nonzero_),
            n_iter=int(model.n_iter_),
            margin=float(params["margin"]),
            renormalize=bool(params["renormalize"]),
            line_search=str(params["line_search"]),
            seed=int(seed),
            fit_seconds=round(fit_seconds, 3),
        )
    write_csv(curve, history)


#: The columns of a training history that record its run, the same in every row.
HISTORY_RUN_COLUMNS = ("signature", "encoding", "K", "R", "tau")


def read_history(path):
    """A training history and its run's (signature, R, tau), which the history records
    in its columns :data:`HISTORY_RUN_COLUMNS` (a file's path says nothing)."""
    curve = pd.read_csv(path)
    missing = [column for column in HISTORY_RUN_COLUMNS if column not in curve]
    if missing:
        raise ResultFileError(
            f"{path}: a training history without its run's {', '.join(missing)} "
            f"(written before histories recorded them); {rebuild_advice(path)}"
        )
    run = curve.iloc[0]
    return run["signature"], int(run["R"]), float(run["tau"]), curve


def final_maps(histories, split="test", scoring="l2", metric="map"):
    """Long table ``signature, encoding, K, R, tau, initial, final`` (mAP in [0, 1]).

    ``initial`` is the thresholded PCA projector (iteration 0), ``final`` the learned
    one at the last iterate; ``scoring`` is one of :data:`SCORINGS`. When the history
    has bootstrap intervals (few test queries), ``final_low`` and ``final_high`` too.
    ``metric="ns"``: the N-S score instead (out of 4; histories of UKBench runs).
    """
    rows = []
    for path in histories:
        signature, R, tau, curve = read_history(path)
        column = f"{split}_{metric}_{scoring}"
        maps = curve[column].dropna() if column in curve else []
        if len(maps) == 0:
            raise ResultFileError(
                f"{path}: no {column} measured (an older or interrupted history); {rebuild_advice(path)}"
            )
        rows.append(
            {
                "signature": signature,
                "encoding": curve["encoding"].iloc[0],
                "K": int(curve["K"].iloc[0]),
                "R": R,
                "tau": tau,
                "initial": maps.iloc[0],
                "final": maps.iloc[-1],
                **{
                    f"final_{bound}": curve[f"{split}_map_{scoring}_{bound}"].dropna().iloc[-1]
                    for bound in ("low", "high")
                    if f"{split}_map_{scoring}_{bound}" in curve
                },
            }
        )
    return pd.DataFrame(rows)


def table2(histories, baselines, data_report, table, table_dot, ablation):
    """Table II (test mAP of the sparse projectors), scored like Table I (L2-normalised
    reductions) and by the raw dot product, and the ablation against thresholded PCA
    and the ``baselines`` records of :func:`ndir.stages.baseline.evaluate_reduction_baselines`
    (random sparse at the same tau, whitened PCA, Gaussian RP); the paper's values
    beside ours on INRIA Holidays (:func:`is_inria_holidays`)."""
    maps = {scoring: final_maps(histories, scoring=scoring) for scoring in SCORINGS}
    paper = report.load_paper_table2() if is_inria_holidays(data_report) else None
    titles = {
        "l2": "Table II: mAP (%) of signatures reduced by sparse rank projectors (L2-normalised, as Table I)",
        "dot": "Table II scored by the raw dot product y_q.y_j the projectors are trained for: mAP (%)",
    }
    # Histories of a UKBench run record the N-S score too (train_sparse_projector's ns_score).
    with_ns = all("test_ns_l2" in read_history(path)[3] for path in histories)
    for scoring, files in (("l2", table), ("dot", table_dot)):
        caption = table_caption(titles[scoring], data_report)
        intervals = None
        if "final_low" in maps[scoring]:
            intervals = tuple(
                report.table2(maps[scoring].assign(final=maps[scoring][f"final_{bound}"])) for bound in ("low", "high")
            )
            caption += interval_note(n_test_queries(data_report))
        frame = report.table2(maps[scoring], paper=paper)
        if with_ns:
            scores = final_maps(histories, scoring=scoring, metric="ns")
            frame = report.with_ns_columns(frame, report.table2(scores.assign(final=scores["final"] / 100)))
            caption += NS_NOTE
        report.write_table(frame, table_stem(files), caption=caption, intervals=intervals)
    title = (
        "mAP (%) of sparse rank projectors against PCA hard-thresholded to the same sparsity, "
        "random sparse projections of the same density (mean and s.d. over seeds), whitened PCA and Gaussian RP"
    )
    records = mean_over_seeds(pd.concat([read_result(path, pd.read_csv) for path in baselines], ignore_index=True))
    ablation_table = report.table2_ablation(
        maps["l2"], maps["dot"], final_maps(histories, "train", "dot"), baselines=records
    )
    report.write_table(
        ablation_table, table_stem(ablation), caption=table_caption(title, data_report, paper_table=False)
    )


def cost_table(images, signatures, projectors, histories, table, signature):
    """Storage and projection cost of each (R, tau) projector of the ``signature``
    signatures (its name), with its test mAP."""
    X_test = split_signatures(images, signatures)["test"][0]
    maps = final_maps(histories).set_index(["R", "tau"])["final"]
    rows = []
    for path in projectors:
        U, meta = load_projector(path)
        row = {"R": meta["n_components"], "tau": meta["sparsity"]}
        row.update(projection_cost(U))
        row.update(projection_latency(U, X_test))
        row["test_map"] = maps.loc[(row["R"], row["tau"])]
        rows.append(row)
    report.write_table(report.cost_table(pd.DataFrame(rows), signature=signature), table_stem(table))


def convergence_figures(fig2, fig3, fig4, figures, signature):
    """Figures 2-4 of the paper from training histories, as PNG and PDF."""
    from ndir import figures as plots  # matplotlib, only for the stages that draw

    out = {Path(path).stem: Path(path).with_suffix("") for path in figures}
    plots.convergence_figure([read_history(p) for p in fig2], vary="R", signature=signature, stem=out["fig2"])
    plots.convergence_figure([read_history(p) for p in fig3], vary="tau", signature=signature, stem=out["fig3"])
    plots.generalisation_figure([read_history(p) for p in fig4], signature=signature, stem=out["fig4"])
