"""Mean average precision of near-duplicate retrieval (INRIA Holidays protocol).

Every query ranks all the other images of its set by similarity; its positives are the
other images of its group. Average precision follows the reference evaluation shipped
with INRIA Holidays (``holidays_map.py`` by H. Jégou, ``score_ap_from_ranks_1``): the
area under the precision-recall curve by the trapezoid rule, the query's own image
removed from its result list. The paper (Negrel et al. 2014, §V-A) uses this protocol
on the Holidays train and test halves.
"""

import numpy as np


def average_precision(positive_ranks, n_positives):
    """Average precision of one query from the ranks of its positives.

    The area under the precision-recall plot by the trapezoid rule, exactly as
    ``score_ap_from_ranks_1`` of the Holidays reference evaluation. Each positive adds a
    trapezoid of width ``1 / n_positives`` whose left height is the precision just
    before it (taken as 1 at rank 0) and right height the precision just after it::

        AP = sum_t (p0_t + p1_t) / (2 n_positives),
        p0_t = t / r_t  (1 when r_t = 0),   p1_t = (t + 1) / (r_t + 1),

    where ``r_t`` is the rank of the ``t``-th positive found (t = 0, 1, ...).

    Parameters
    ----------
    positive_ranks : (n_found,) int array-like
        Strictly increasing 0-based ranks of the positives in the result list, the
        query itself excluded from that list.
    n_positives : int
        Number of positives of the query in the data set (>= n_found): positives never
        returned contribute nothing.

    Returns
    -------
    float
        Average precision in [0, 1].
    """
    ranks = np.asarray(positive_ranks, dtype=np.float64).ravel()
    if n_positives < 1:
        raise ValueError(f"n_positives must be >= 1, got {n_positives}")
    if ranks.size > n_positives:
        raise ValueError(
            f"{ranks.size} positive ranks given for only {n_positives} positives"
        )
    if ranks.size and (ranks[0] < 0 or np.any(np.diff(ranks) <= 0)):
        raise ValueError("positive_ranks must be non-negative and strictly increasing")
    n_before = np.arange(ranks.size, dtype=np.float64)
    return float(_trapezoid_heights(ranks, n_before).sum() / n_positives)


def _trapezoid_heights(ranks, n_before):
    """Mean height (p0 + p1) / 2 of the trapezoid of each positive.

    ranks, n_before : float64 arrays of the same shape: 0-based rank of a positive and
    the number of positives ranked before it.
    """
    precision_0 = np.divide(n_before, ranks, out=np.ones_like(ranks), where=ranks > 0)
    precision_1 = (n_before + 1.0) / (ranks + 1.0)
    return (precision_0 + precision_1) / 2.0


def map_from_scores(scores, query_rows, groups, return_per_query=False):
    """Mean average precision from a query-by-image similarity matrix.

    For query ``i`` (row ``query_rows[i]`` of the image set) the other images are sorted
    by decreasing ``scores[i]``. Ties are broken pessimistically: among images of
    equal score the negatives rank first, so the result depends neither on the image
    order nor on the sorting algorithm, and a scorer cannot gain from ties (sparse
    scores such as tf-idf or SOML-DA's have many exact ones; the Holidays reference
    evaluation ranks whatever list it is given and does not settle this). The query's
    own column is removed from its list, whatever its score. Positives are the other
    images of its group.

    Parameters
    ----------
    scores : (n_queries, n_images) float array
        Similarity of each query to each image (higher is more similar); finite.
    query_rows : (n_queries,) int array
        Row of each query among the images (its column in ``scores``).
    groups : (n_images,) int array
        Group label of each image.
    return_per_query : bool
        Also return the average precision of every query.

    Returns
    -------
    float or (float, (n_queries,) float64 array)
        mAP in [0, 1], and the per-query AP when ``return_per_query``.
    """
    scores = np.asarray(scores)
    query_rows = np.asarray(query_rows, dtype=np.intp).ravel()
    groups = np.asarray(groups).ravel()
    n_queries, n_images = query_rows.size, groups.size
    if n_queries == 0:
        raise ValueError("no query to evaluate")
    if scores.shape != (n_queries, n_images):
        raise ValueError(
            f"scores has shape {scores.shape}; expected (n_queries, n_images) = "
            f"({n_queries}, {n_images})"
        )
    if not np.all(np.isfinite(scores)):
        raise ValueError("scores contain NaN or infinite values")
    query_groups = groups[query_rows]
    n_positives = np.sum(groups[None, :] == query_groups[:, None], axis=1) - 1
    if np.any(n_positives < 1):
        lonely = np.unique(query_groups[n_positives < 1]).tolist()
        raise ValueError(
            f"groups {lonely} have no image besides their query; every group "
            "needs at least one positive"
        )

    # -inf sends the query's own column strictly last (other scores are finite),
    # so dropping the last column of the ranking removes it.
    masked = np.array(scores, dtype=np.float64)
    masked[np.arange(n_queries), query_rows] = -np.inf
    positive_columns = groups[None, :] == query_groups[:, None]
    # Sorted by decreasing score, then negatives (False) before positives (True).
    order = np.lexsort((positive_columns, -masked), axis=1)[:, :-1]
    is_positive = np.take_along_axis(positive_columns, order, axis=1)

    ranks = np.broadcast_to(np.arange(n_images - 1, dtype=np.float64), order.shape)
    # At a positive, the running count minus itself is the positives ranked before.
    n_before = np.cumsum(is_positive, axis=1, dtype=np.float64) - 1.0
    heights = _trapezoid_heights(ranks, n_before)
    ap = np.where(is_positive, heights, 0.0).sum(axis=1) / n_positives

    mean_ap = float(ap.mean())
    if return_per_query:
        return mean_ap, ap
    return mean_ap


def holidays_map(X, groups, is_query, return_per_query=False):
    """Holidays mAP of signatures compared by dot product.

    Each query row is compared with every row of ``X`` by dot product (one matrix
    product for all queries; for L2-normalised rows this is the cosine similarity
    used in the paper) and scored by :func:`map_from_scores`.

    Parameters
    ----------
    X : (n_images, D) float32 array
        One signature per image (e.g. power- and L2-normalised VLAD/FV, or their
        projections).
    groups : (n_images,) int array
        Group label of each image (a query and its near duplicates).
    is_query : (n_images,) bool array
        True for the query image of each group.
    return_per_query : bool
        Also return the AP of each query, in the order of ``np.flatnonzero(is_query)``.

    Returns
    -------
    float or (float, (n_queries,) float64 array)
        mAP in [0, 1], and the per-query AP when ``return_per_query``.
    """
    X = np.asarray(X)
    groups = np.asarray(groups).ravel()
    is_query = np.asarray(is_query, dtype=bool).ravel()
    if X.ndim != 2 or X.shape[0] != groups.size or is_query.size != groups.size:
        raise ValueError(
            f"X {X.shape}, groups ({groups.size},) and is_query ({is_query.size},) "
            "must describe the same images, X being 2-D"
        )
    query_rows = np.flatnonzero(is_query)
    scores = X[query_rows] @ X.T
    return map_from_scores(scores, query_rows, groups, return_per_query)
