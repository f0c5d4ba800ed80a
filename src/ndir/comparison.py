"""Quality and cost at query time of the sparse similarity learners, side by side.

Every method of the comparison (tf-idf, SOML-TG/DA, the sparse similarity matrix,
PCA, the sparse rank projectors, JCF with its second-order baselines, and the
reductions of :mod:`ndir.baselines`: whitened and thresholded PCA, random projections,
product quantisation) is summarised by one *record*: a dict with

``method``, ``signature``
    What was learned, on which input (``"tfidf"``, ``"fv-256"``...).
``query_dims``
    Dimensions (dense) or mean non-zeros (sparse) of a query once mapped into the
    space where it is compared with the database.
``model_bytes``
    Bytes to store the learned model: float32 values, int32 indices. Codebooks and
    the visual vocabulary, which every method of a signature needs alike, are not
    counted.
``db_bytes_per_image``
    Bytes stored per database image in the space queries are compared in: 4 per
    dimension for dense vectors, 8 per non-zero (value and index) for sparse ones.
``madds_per_query``
    Multiply-adds to score one query against the test database (mean over the test
    queries): mapping the query, then one dot product per database image, sparse dot
    products costing the size of the overlap of the two supports (an inverted file).
``test_map``
    Holidays mAP in [0, 1] on the test split.
``recall_at_1``
    Recall@1 in [0, 1] on the test split, every test image a query
    (:func:`ndir.evaluation.recall_at_k`, the measure of the JCF poster); records
    also carry ``recall_at_2``, ``recall_at_4`` and ``recall_at_8`` (:func:`recalls`).
``train_s``
    Wall time of the fit, in seconds.

On UKBench (``dataset.kind: ukbench``, the stages' ``ns_score`` flag) every record also
carries ``test_ns``, the N-S score out of 4 on the test split
(:func:`ndir.evaluation.ns_score`, every test image a query); elsewhere the key is
absent, never NaN, so that a record's JSON stays standard and a table shows an N-S
column exactly when its records have the key. :func:`record_quality` computes the test
scores of every record but the sparse rank projectors', whose mAP and N-S their
training history holds.
"""

import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ndir.errors import ResultFileError, rebuild_advice
from ndir.evaluation import holidays_map, map_from_scores, ns_from_scores, ns_score, recall_at_k

RECORD_KEYS = (
    "method",
    "signature",
    "query_dims",
    "model_bytes",
    "db_bytes_per_image",
    "madds_per_query",
    "test_map",
    "recall_at_1",
    "train_s",
)

#: The k of the Recall@k every record carries (``recall_at_<k>``).
RECALL_KS = (1, 2, 4, 8)

#: The key of UKBench's N-S score (out of 4), in a record only on UKBench.
NS_KEY = "test_ns"


def recalls(X, groups, metric="dot"):
    """``{"recall_at_1": ..., "recall_at_8": ...}`` of the test split (:data:`RECALL_KS`).

    ``X`` and ``metric`` as for :func:`ndir.evaluation.recall_at_k`: the test images'
    signatures compared by dot product, by cosine (``"cosine"``: rows L2-normalised,
    as Tables I and II score reductions), or their (n_test, n_test) similarities
    (``"precomputed"``); every test image is a query, its own score ignored.
    """
    return {f"recall_at_{k}": value for k, value in recall_at_k(X, groups, RECALL_KS, metric).items()}


def record_quality(X, groups, is_query, metric="dot", ns=False):
    """The test scores of a record: ``test_map`` (Holidays mAP over the queries
    ``is_query``), its :func:`recalls` (every test image a query) and, with ``ns`` (on
    UKBench), ``test_ns`` (:func:`ndir.evaluation.ns_score`, over the same queries).

    ``X`` holds the (n_test, D) test signatures compared by dot product
    (``metric="dot"``), or their (n_test, n_test) similarities (``"precomputed"``, for
    the models that score pairs).
    """
    if metric == "dot":
        quality = {"test_map": float(holidays_map(X, groups, is_query))}
        if ns:
            quality[NS_KEY] = ns_score(X, groups, is_query)
    elif metric == "precomputed":
        query_rows = np.flatnonzero(is_query)
        scores = np.asarray(X, dtype=np.float64)[query_rows]
        quality = {"test_map": float(map_from_scores(scores, query_rows, groups))}
        if ns:
            quality[NS_KEY] = ns_from_scores(scores, query_rows, groups)
    else:
        raise ValueError(f"metric must be 'dot' or 'precomputed', got {metric!r}")
    return {**quality, **recalls(X, groups, metric)}


def support(X):
    """The 0/1 pattern of the non-zeros of ``X`` as a float64 CSR matrix."""
    X = sp.csr_matrix(X)
    X.eliminate_zeros()
    return sp.csr_matrix((np.ones(X.nnz), X.indices, X.indptr), shape=X.shape)


def sparse_dot_madds(Q, X):
    """Multiply-adds of the sparse dot products of each row of ``Q`` with every row of ``X``.

    Parameters
    ----------
    Q : (n_queries, m) sparse or dense
    X : (n_database, m) sparse or dense

    Returns
    -------
    (n_queries,) float64 array: ``sum_b |supp(q) & supp(x_b)|`` per query.
    """
    if sp.issparse(Q) or sp.issparse(X):
        return np.asarray((support(Q) @ support(X).T).sum(axis=1)).ravel()
    # Dense rows (an FV is 99 % non-zero) need no sparse copy of their support:
    # sum_b |supp(q) & supp(x_b)| = sum_j [q_j != 0] nnz(X[:, j]), counted in int64
    # and exact in float64 below 2^53, as the sums of the sparse path are.
    column_nonzeros = np.count_nonzero(X, axis=0).astype(np.int64)
    return ((np.asarray(Q) != 0) @ column_nonzeros).astype(np.float64)


def mean_nonzeros(X):
    """Mean number of non-zeros per row of ``X`` (n, m), sparse or dense."""
    if sp.issparse(X):
        return float(support(X).sum(axis=1).mean())
    return float(np.count_nonzero(X, axis=1).mean())


def database_bytes(X, sparse):
    """Mean bytes per row of ``X`` stored sparse (8 per non-zero) or dense on its support (4 each)."""
    return (8.0 if sparse else 4.0) * mean_nonzeros(X)


def dense_projection_record(method, signature, n_features, n_components, n_database, quality, train_s, centred=True):
    """Record of a dense D x R projection (PCA, whitening folded into its axes; a
    Gaussian random projection with ``centred=False``): storage 4 D R, plus the 4 D
    mean when ``centred``; ``quality`` the :func:`record_quality` of its test signatures."""
    return {
        **quality,
        "method": method,
        "signature": signature,
        "query_dims": n_components,
        "model_bytes": 4 * n_features * (n_components + int(centred)),
        "db_bytes_per_image": 4 * n_components,
        "madds_per_query": n_features * n_components + n_components * n_database,
        "train_s": train_s,
    }


def sparse_projection_record(method, signature, cost, n_database, quality, train_s):
    """Record of a sparse projector from its :func:`ndir.projection.projection_cost`;
    ``quality`` the test scores of its reductions (as :func:`record_quality` gives them)."""
    R = cost["n_components"]
    return {
        **quality,
        "method": method,
        "signature": signature,
        "query_dims": R,
        "model_bytes": cost["bytes_sparse"],
        "db_bytes_per_image": 4 * R,
        "madds_per_query": cost["nnz"] + R * n_database,
        "train_s": train_s,
    }


def product_quantizer_record(
    method, signature, n_features, n_components, n_subquantizers, nbits, n_database, quality, train_s
):
    """Record of a product-quantised PCA-R code scored by asymmetric distances (ADC).

    Storage: the PCA (4 D (R + 1)) and the codebooks (``2**nbits`` centroids of
    ``R / M`` float32 per sub-quantiser: 4 R 2**nbits bytes). A database image keeps
    its code, ``ceil(M nbits / 8)`` bytes. A query costs its projection (D R), the
    ADC tables (one multiply-add per centroid coordinate: R 2**nbits) and M table
    look-ups added per database image. ``quality``: the :func:`record_quality` of its
    ADC scores.
    """
    return {
        **quality,
        "method": method,
        "signature": signature,
        "query_dims": n_components,
        "model_bytes": 4 * n_features * (n_components + 1) + 4 * n_components * 2**nbits,
        "db_bytes_per_image": -(-n_subquantizers * nbits // 8),
        "madds_per_query": n_features * n_components + n_components * 2**nbits + n_subquantizers * n_database,
        "train_s": train_s,
    }


def pareto_front(costs, maps):
    """Which points no other point beats: a boolean mask, True where no point has a
    cost at most this one's and a mAP at least this one's, one of them strictly.

    Parameters
    ----------
    costs, maps : (n,) array-likes
        Cost (lower is better: multiply-adds, bytes) and mAP (higher is better).
    """
    costs = np.asarray(costs, dtype=float)
    maps = np.asarray(maps, dtype=float)
    no_worse = (costs[None, :] <= costs[:, None]) & (maps[None, :] >= maps[:, None])
    better = (costs[None, :] < costs[:, None]) | (maps[None, :] > maps[:, None])
    return ~(no_worse & better).any(axis=1)


def check_record(record):
    """Raise ValueError unless ``record`` has every key of :data:`RECORD_KEYS`, a mAP
    and Recall@1 in [0, 1] and, where it has one, an N-S score in [1, 4]."""
    missing = [key for key in RECORD_KEYS if key not in record]
    if missing:
        raise ValueError(f"comparison record {record.get('method')!r} lacks {missing}")
    for key in ("test_map", "recall_at_1"):
        if not 0.0 <= record[key] <= 1.0:
            raise ValueError(f"comparison record {record['method']!r}: {key} must be in [0, 1]")
    if NS_KEY in record and not 1.0 <= record[NS_KEY] <= 4.0:
        raise ValueError(f"comparison record {record['method']!r}: {NS_KEY} must be in [1, 4] (out of 4)")
    return record


def read_record(path, extra_keys=()):
    """A record written as JSON by a rule, checked by :func:`check_record` and for
    ``extra_keys``; refused naming the file (one an older ndir wrote lacks keys)."""
    record = json.loads(Path(path).read_text())
    missing = [key for key in (*RECORD_KEYS, *extra_keys) if key not in record]
    if missing:
        raise ResultFileError(f"{path}: record without {missing} (written by an older ndir); {rebuild_advice(path)}")
    try:
        return check_record(record)
    except ValueError as error:
        raise ResultFileError(f"{path}: {error}; {rebuild_advice(path)}") from error
