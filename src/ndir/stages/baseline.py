"""Stages of ``workflow/rules/baseline.smk``: full signatures and their PCA reductions (Table I)."""

import logging

import pandas as pd

from ndir import names, report
from ndir.atomic import write_csv
from ndir.baselines import baseline_grid, evaluate_baselines
from ndir.evaluation import INTERVAL_MAX_QUERIES, bootstrap_interval, holidays_map
from ndir.evaluation import ns_score as ns_score_of
from ndir.projection import fit_pca
from ndir.report import NS_NOTE, interval_note, is_inria_holidays, table_caption, table_stem
from ndir.stages.common import split_signatures

logger = logging.getLogger(__name__)


def evaluate_pca_baseline(images, signatures, results, encoding, codebook_size, dims, ns_score):
    """Test-split mAP of full signatures (the ``encoding`` signatures with a codebook of
    ``codebook_size`` words) and of PCA-R reductions fitted on train.

    Writes a CSV with columns ``signature, encoding, K, dim, R, map, n_queries,
    map_low, map_high, ns`` (R = 0 for the full signature, mAP in [0, 1]; the 95 %
    bootstrap interval over queries, :func:`ndir.evaluation.bootstrap_interval`) —
    the rows of the paper's Table I. ``ns`` is UKBench's N-S score
    (:func:`ndir.evaluation.ns_score`, out of 4) when ``ns_score`` (on UKBench), NaN
    otherwise.
    """
    name = names.signature_name(encoding, codebook_size)
    splits = split_signatures(images, signatures)
    X_train, _, _ = splits["train"]
    X_test, groups, is_query = splits["test"]

    def row(R, X):
        mean_ap, ap = holidays_map(X, groups, is_query, return_per_query=True)
        low, high = bootstrap_interval(ap)
        ns = ns_score_of(X, groups, is_query) if ns_score else float("nan")
        return {"R": R, "map": mean_ap, "n_queries": ap.size, "map_low": low, "map_high": high, "ns": ns}

    rows = [row(0, X_test)]
    pca = fit_pca(X_train, dims)
    for R in dims:
        rows.append(row(R, pca[R].transform(X_test)))
    out = pd.DataFrame(rows)
    out.insert(0, "dim", X_test.shape[1])
    out.insert(0, "K", int(codebook_size))
    out.insert(0, "encoding", encoding)
    out.insert(0, "signature", name)
    write_csv(out, results)
    logger.info("%s: %s", name, out.to_dict("records"))


def evaluate_reduction_baselines(
    images,
    signatures,
    results,
    signature,
    dims,
    sparsity,
    random_seeds,
    pq_bytes,
    pq_nbits,
    pq_subvector_dims,
    seed,
    ns_score,
):
    """Test-split records of the reductions a user would pick instead of a learned
    sparse projector (:mod:`ndir.baselines`), fitted on the training split: whitened
    PCA, thresholded PCA and the random projections at each R of ``dims`` (and tau of
    ``sparsity``; one record per seed of ``random_seeds``), PQ codes of ``pq_bytes``
    and of 4 R bytes (``pq_nbits`` bits per index, k-means seeded by ``seed``).

    Writes a CSV of :mod:`ndir.comparison` records with the columns of
    :data:`ndir.baselines.GRID_KEYS`, and with ``ns_score`` (on UKBench) the N-S
    score ``test_ns``.
    """
    splits = split_signatures(images, signatures)
    X_train = splits["train"][0]
    max_components = min(len(X_train) - 1, X_train.shape[1])
    grid = baseline_grid(
        dims, sparsity, random_seeds, pq_bytes, pq_nbits, pq_subvector_dims, max_components, pq_seed=seed
    )
    write_csv(evaluate_baselines(splits, signature, grid, nbits=pq_nbits, ns_score=ns_score), results)


def table1(results, data_report, table):
    """Assemble Table I (mAP in % on the test split) in CSV, Markdown and LaTeX, with
    the paper's values beside ours on INRIA Holidays (:func:`is_inria_holidays`)."""
    rows = pd.concat([pd.read_csv(path) for path in results], ignore_index=True)
    paper = report.load_paper_table1() if is_inria_holidays(data_report) else None
    frame = report.table1(rows, paper=paper)
    title = "Table I: mAP (%) of VLAD and FV signatures and of their PCA reductions to R dims"
    caption = table_caption(title, data_report)
    intervals = None
    n_queries = int(rows["n_queries"].min())
    if n_queries < INTERVAL_MAX_QUERIES:
        intervals = tuple(report.table1(rows.assign(map=rows[bound])) for bound in ("map_low", "map_high"))
        caption += interval_note(n_queries)
    if "ns" in rows and rows["ns"].notna().all():
        frame = report.with_ns_columns(frame, report.table1(rows.assign(map=rows["ns"] / 100)))
        caption += NS_NOTE
    report.write_table(frame, table_stem(table), caption=caption, intervals=intervals)
