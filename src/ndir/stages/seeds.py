"""Stages of ``workflow/rules/seeds.smk``: the bag of visual words, the seeds' learners
(tf-idf, SOML, the sparse similarity matrix) and their comparison with PCA, the
sparse rank projectors and JCF (:mod:`ndir.stages.jcf`), by test mAP and Recall@1, and
on UKBench (the stages' ``ns_score`` flag) by the N-S score.
"""

import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ndir import bovw, comparison, names, report
from ndir.atomic import atomic_output, write_csv, write_json
from ndir.baselines import mean_over_seeds
from ndir.errors import ConfigError, ResultFileError, rebuild_advice
from ndir.model_files import read_result, read_result_arrays
from ndir.projection import PCAProjection, load_projector, projection_cost
from ndir.report import NS_NOTE, table_stem
from ndir.similarity_matrix import SparseSimilarityMatrix
from ndir.soml import SOMLDualAveraging, SOMLTruncatedGradient
from ndir.stages.common import (
    check_shard_order,
    read_image_table,
    split_rows,
    split_signatures,
    split_together,
)
from ndir.stages.sparse import final_maps

logger = logging.getLogger(__name__)


def fit_visual_vocabulary(sample, vocabulary, n_words, n_iter, nprobe, seed):
    """Fit the visual vocabulary (k-means, faiss) of the bag of visual words."""
    model = bovw.fit_visual_vocabulary(read_result(sample), n_words, seed=seed, n_iter=n_iter, nprobe=nprobe)
    with atomic_output(vocabulary) as tmp:
        model.save(tmp)


def gather_bovw(images, shards, counts):
    """Stack the word-count shards into one (n_images, n_words) CSR ``.npz`` (scipy)."""
    parts, ids = [], []
    for path in shards:
        npz = read_result_arrays(path, ["data", "indices", "indptr", "shape", "image_id"])
        parts.append(sp.csr_array((npz["data"], npz["indices"], npz["indptr"]), shape=tuple(npz["shape"])))
        ids.append(npz["image_id"])
    check_shard_order(images, ids, "word-count", "encode_shard")
    with atomic_output(counts) as tmp:
        sp.save_npz(tmp, sp.csr_matrix(sp.vstack(parts, format="csr")))


def _bovw_splits(images, counts):
    """Word counts by split: ``{split: (counts CSR, groups, is_query)}``."""
    return split_rows(images, read_result(counts, sp.load_npz).tocsr(), counts)


def _tfidf_splits(images, counts):
    """tf-idf vectors by split, the idf from the training split's counts."""
    splits = _bovw_splits(images, counts)
    idf = bovw.inverse_document_frequency(splits["train"][0])
    return {name: (bovw.tfidf(C, idf), groups, is_query) for name, (C, groups, is_query) in splits.items()}


def _learning_splits(images, signatures, name):
    """Splits of the learners' input ``name``: tf-idf for :data:`ndir.names.TFIDF` (``signatures``
    are then the word counts), else the VLAD/FV signatures of that name."""
    if name == names.TFIDF:
        return _tfidf_splits(images, signatures)
    return split_signatures(images, signatures)


def _test_quality_and_queries(score_pairs, X, groups, is_query, ns_score):
    """The test scores of a model's ``score_pairs`` (:func:`ndir.comparison.record_quality`
    of its (n_test, n_test) similarities: Holidays mAP, Recall@k, with ``ns_score`` the
    N-S score), and the queries' rows ``Q`` of ``X``."""
    quality = comparison.record_quality(score_pairs(X, X), groups, is_query, "precomputed", ns_score)
    return quality, X[np.flatnonzero(is_query)]


def _dot_scores(A, B):
    """Dense dot products of the sparse rows of ``A`` and ``B`` (tf-idf cosine)."""
    return (A @ B.T).toarray()


def evaluate_tfidf(images, counts, record, ns_score):
    """Record of the tf-idf baseline: cosine of tf-idf vectors, no learning; with
    ``ns_score`` (on UKBench) it carries the N-S score (:mod:`ndir.comparison`)."""
    splits = _bovw_splits(images, counts)
    start = time.perf_counter()
    idf = bovw.inverse_document_frequency(splits["train"][0])
    train_s = time.perf_counter() - start
    C_test, groups, is_query = splits["test"]
    X_test = bovw.tfidf(C_test, idf)
    quality, Q = _test_quality_and_queries(_dot_scores, X_test, groups, is_query, ns_score)
    madds = comparison.mean_nonzeros(Q) + comparison.sparse_dot_madds(Q, X_test).mean()
    result = {
        "method": "tf-idf",
        "signature": "tfidf",
        "query_dims": comparison.mean_nonzeros(Q),
        "model_bytes": 4 * len(idf),
        "db_bytes_per_image": comparison.database_bytes(X_test, sparse=True),
        "madds_per_query": float(madds),
        **quality,
        "train_s": train_s,
        "n_words": len(idf),
    }
    write_json(comparison.check_record(result), record)
    logger.info("tf-idf: %s", result)


#: The SOML variants the workflow runs: estimator and the method's name in the
#: comparison ("da-algorithm2" is SOML-DA's literal Algorithm 2 update, an option of
#: the same estimator; :func:`soml_options` passes it).
SOML_VARIANTS = {
    "tg": (SOMLTruncatedGradient, "SOML-TG"),
    "da": (SOMLDualAveraging, "SOML-DA"),
    "da-algorithm2": (SOMLDualAveraging, "SOML-DA (Alg. 2)"),
}


def soml_options(section, variant):
    """The estimator options of SOML ``variant`` from the config's ``seeds.soml``
    ``section``: the literal Algorithm 2 variant shares SOML-DA's."""
    if variant == "da-algorithm2":
        return dict(section["da"], update="algorithm2")
    return dict(section[variant])


def train_soml(
    images, signatures, model, record, signature, variant, options, negatives_per_pair, epochs, seed, ns_score
):
    """Learn a SOML diagonal metric (Gao et al. 2014) on the training split; record its test mAP.

    ``variant`` ``"tg"`` (truncated gradient), ``"da"`` or ``"da-algorithm2"`` (dual
    averaging, the two readings of ``SOMLDualAveraging.update``) with the ``options``
    of its estimator, on the input ``signature``: :data:`ndir.names.TFIDF` (``signatures``
    are the word counts) or a signature name. Writes the weights (``.npz``) and a
    comparison record (with the N-S score when ``ns_score``, on UKBench).
    """
    if variant not in SOML_VARIANTS:
        raise ConfigError(f"seeds.soml: variant {variant!r} is none of {sorted(SOML_VARIANTS)}")
    estimator_class, method = SOML_VARIANTS[variant]
    splits = _learning_splits(images, signatures, signature)
    X_train, groups_train, _ = splits["train"]
    estimator = estimator_class(**options, negatives_per_pair=negatives_per_pair, n_epochs=epochs, random_state=seed)
    start = time.perf_counter()
    estimator.fit(X_train, groups_train)
    train_s = time.perf_counter() - start
    X_test, groups, is_query = splits["test"]
    quality, Q = _test_quality_and_queries(estimator.score_pairs, X_test, groups, is_query, ns_score)
    mapped = estimator.transform(Q)
    result = {
        "method": method,
        "signature": signature,
        "query_dims": comparison.mean_nonzeros(mapped),
        "model_bytes": int(estimator.model_bytes_),
        # The database keeps each signature on the support of w: sparse tf-idf stays
        # sparse, a dense FV keeps its nnz(w) weighted dimensions.
        "db_bytes_per_image": comparison.database_bytes(estimator.transform(X_test), sparse=sp.issparse(X_test)),
        "madds_per_query": float(comparison.mean_nonzeros(Q) + comparison.sparse_dot_madds(mapped, X_test).mean()),
        **quality,
        "train_s": train_s,
        "sparsity": float(estimator.sparsity_),
        "n_nonzero": int(estimator.n_nonzero_),
        "n_triplets": int(estimator.n_triplets_),
        "n_active": int(estimator.n_active_),
    }
    with atomic_output(model) as tmp:
        np.savez(tmp, coef=estimator.coef_, variant=np.asarray(variant), signature=np.asarray(signature))
    write_json(comparison.check_record(result), record)
    logger.info("SOML-%s on %s: %s", variant.upper(), signature, result)


def train_similarity_matrix(images, counts, vocabulary, model, record, options, seed, ns_score):
    """Learn Yan & Yu's sparse similarity matrix on the training split; record its test mAP.

    The hold-out that picks the iteration keeps the images of one source photograph
    (the image table's ``together``) on one side.

    Writes the matrix M^s (scipy ``.npz``, CSR) and a comparison record (with the N-S
    score when ``ns_score``, on UKBench).
    """
    splits = _bovw_splits(images, counts)
    C_train, groups_train, _ = splits["train"]
    words = bovw.VisualVocabulary.load(vocabulary).centroids_
    estimator = SparseSimilarityMatrix(**options, random_state=seed)
    start = time.perf_counter()
    estimator.fit(C_train, groups_train, words, together=split_together(images, "train"))
    train_s = time.perf_counter() - start
    C_test, groups, is_query = splits["test"]
    quality, Q = _test_quality_and_queries(estimator.score_pairs, C_test, groups, is_query, ns_score)
    # A query is mapped to q M (a sparse row of M per query word), then compared
    # with the database's counts; the database norms sqrt(x^T M x) are precomputed.
    M = sp.csr_matrix(estimator.metric_)
    row_nnz = np.diff(M.indptr).astype(np.float64)
    mapped = comparison.support(Q) @ comparison.support(M)
    result = {
        "method": "sparse similarity matrix",
        "signature": "tfidf",
        "query_dims": comparison.mean_nonzeros(mapped),
        "model_bytes": int(estimator.model_bytes_),
        # The database keeps its word frequencies and one norm sqrt(x^T M x) per image.
        "db_bytes_per_image": comparison.database_bytes(C_test, sparse=True) + 4,
        "madds_per_query": float(
            (comparison.support(Q) @ row_nnz).mean() + comparison.sparse_dot_madds(mapped, C_test).mean()
        ),
        **quality,
        "train_s": train_s,
        "n_parameters": int(sp.triu(M).nnz),
        "holdout_map": float(estimator.holdout_map_),
        "best_iteration": int(estimator.best_iteration_),
        "n_hard_triplets": int(estimator.n_hard_triplets_),
        "n_random_triplets": int(estimator.n_random_triplets_),
    }
    with atomic_output(model) as tmp:
        sp.save_npz(tmp, M)
    write_json(comparison.check_record(result), record)
    logger.info("sparse similarity matrix: %s", result)


def seeds_comparison(
    images,
    records,
    signatures,
    projectors,
    histories,
    baselines,
    table,
    figure,
    records_csv,
    signature_names,
    dims,
    ns_score,
):
    """The comparison table and figure: the seeds' learners, PCA, the sparse projectors
    and the reductions a user would pick instead.

    ``records`` are the JSON records of the tf-idf baseline, the seeds' learners and
    the JCF runs (:mod:`ndir.stages.jcf`); PCA is fitted here for each of ``dims`` on
    each of ``signatures`` (named ``signature_names``, in their order); the sparse rank
    projectors (``projectors``, with their ``histories``) were trained by
    :func:`ndir.stages.sparse.train_sparse_projector`; ``baselines`` are the records of
    :func:`ndir.stages.baseline.evaluate_reduction_baselines` on ``signatures``, the
    random projections' averaged over their seeds (:func:`ndir.baselines.mean_over_seeds`).
    Every record is also written to ``records_csv`` (the units of :mod:`ndir.comparison`).
    Every row carries its test mAP and Recall@1 (every test image a query; PCA and
    the projectors' reductions L2-normalised, as Tables I and II score them) and, with
    ``ns_score`` (on UKBench), its N-S score, which the table then shows beside the
    mAP; a record or baseline file without one is refused, naming the file. See
    :mod:`ndir.comparison` for the columns. Rows without stored bytes (second-order
    pooling learns nothing) are left out of the figure, whose axis is logarithmic.
    """
    from ndir import figures as plots  # matplotlib, only for the stages that draw

    ns_keys = (comparison.NS_KEY,) if ns_score else ()
    rows = [comparison.read_record(path, ns_keys) for path in records]
    test_splits = {}
    for path, name in zip(signatures, signature_names, strict=True):
        splits = split_signatures(images, path)
        X_train = splits["train"][0]
        X_test, groups, is_query = test_splits[name] = splits["test"]
        for R in dims:
            start = time.perf_counter()
            pca = PCAProjection(n_components=R).fit(X_train)
            train_s = time.perf_counter() - start
            quality = comparison.record_quality(pca.transform(X_test), groups, is_query, ns=ns_score)
            rows.append(
                comparison.dense_projection_record(
                    f"PCA R={R}", name, X_test.shape[1], R, len(X_test), quality, train_s
                )
            )
    n_test = int((read_image_table(images)["split"] == "test").sum())
    # The projectors' test mAP and N-S are those their training measured last.
    final = {
        metric: final_maps(histories, metric=metric).set_index(["signature", "R", "tau"])["final"]
        for metric in ("map", *(("ns",) if ns_score else ()))
    }
    for path in projectors:
        U, meta = load_projector(path)
        R, tau, name = meta["n_components"], meta["sparsity"], meta["signature"]
        if name not in test_splits:
            raise ResultFileError(
                f"{path}: a projector of {name}, whose signatures are not among the comparison's inputs"
            )
        X_test, groups, _ = test_splits[name]
        quality = {
            "test_map": final["map"].loc[(name, R, tau)],
            **comparison.recalls(X_test @ U.toarray(), groups, "cosine"),
            **({comparison.NS_KEY: final["ns"].loc[(name, R, tau)]} if ns_score else {}),
        }
        rows.append(
            comparison.sparse_projection_record(
                f"sparse rank R={R} τ={tau:g}", name, projection_cost(U), n_test, quality, meta["fit_seconds"]
            )
        )
    for path in baselines:
        averaged = mean_over_seeds(read_result(path, pd.read_csv))
        missing = [key for key in ns_keys if key not in averaged or averaged[key].isna().any()]
        if missing:
            raise ResultFileError(
                f"{path}: baselines without {missing} (written by an older ndir); {rebuild_advice(path)}"
            )
        rows += averaged.drop(columns=["family", "n_seeds"]).to_dict("records")
    frame = pd.DataFrame([comparison.check_record(row) for row in rows])
    write_csv(frame, records_csv)
    report.write_table(
        report.seeds_comparison_table(frame),
        table_stem(table),
        caption="The seeds' learners, PCA and the sparse rank projectors on the same split: "
        "size and cost at query time, test mAP and Recall@1 (%)" + (NS_NOTE if ns_score else ""),
    )
    plots.seeds_comparison_figure(frame[frame["model_bytes"] > 0], stem=Path(figure[0]).with_suffix(""))


#: The frontier's costs: record column and how the caption names its unit.
FRONTIER_COSTS = {"madds_per_query": "multiply-adds per query", "db_bytes_per_image": "bytes per database image"}


def frontier(records, table, figure):
    """The accuracy-cost frontier of the comparison's ``records`` (its CSV).

    Draws test mAP against multiply-adds per query and against bytes per database
    image (log scales), every method and setting a marker, the Pareto front of each
    panel (:func:`ndir.comparison.pareto_front`) drawn as a step line, and the
    sentence of :func:`ndir.report.frontier_summary` for each under the panels. The
    table lists the points on either front with both sentences as its caption.
    """
    from ndir import figures as plots  # matplotlib, only for the stages that draw

    frame = read_result(records, pd.read_csv)
    fronts, summaries = {}, {}
    for cost, unit in FRONTIER_COSTS.items():
        fronts[cost] = comparison.pareto_front(frame[cost], frame["test_map"])
        summaries[cost] = report.frontier_summary(frame.assign(front=fronts[cost]), cost, unit)
        logger.info("front by %s: %s", unit, summaries[cost])
    caption = " ".join(f"On the front by {unit}: {summaries[cost]}." for cost, unit in FRONTIER_COSTS.items())
    plots.frontier_figure(frame, fronts, summaries, FRONTIER_COSTS, stem=Path(figure[0]).with_suffix(""))
    report.write_table(report.frontier_table(frame, fronts, FRONTIER_COSTS), table_stem(table), caption=caption)
