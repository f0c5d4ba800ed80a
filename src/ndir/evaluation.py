"""Mean average precision of near-duplicate retrieval (INRIA Holidays protocol).

Every query ranks all the other images of its set by similarity; its positives are the
other images of its group. Average precision follows the reference evaluation shipped
with INRIA Holidays (``holidays_map.py`` by H. Jégou, ``score_ap_from_ranks_1``): the
area under the precision-recall curve by the trapezoid rule, the query's own image
removed from its result list. The paper (Negrel et al. 2014, §V-A) uses this protocol
on the Holidays train and test halves. Recall@k (the JCF poster's measure), bootstrap
intervals of an mAP, and the top-k lists the retrievals figure draws are here too.
"""

import numpy as np

from ndir.encoding import l2_normalise_rows
from ndir.projection.product import float64_inner


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
        raise ValueError(f"{ranks.size} positive ranks given for only {n_positives} positives")
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


#: Scores compared at once by :func:`map_from_scores` (32 MB of float64): positives
#: are taken in chunks of this many scores over their query's list.
_COMPARED_SCORES_MAX = 2**22


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
        raise ValueError(f"scores has shape {scores.shape}; expected (n_queries, n_images) = ({n_queries}, {n_images})")
    if not np.all(np.isfinite(scores)):
        raise ValueError("scores contain NaN or infinite values")
    query_groups = groups[query_rows]
    positive = groups[None, :] == query_groups[:, None]
    positive[np.arange(n_queries), query_rows] = False
    n_positives = np.count_nonzero(positive, axis=1)
    if np.any(n_positives < 1):
        lonely = np.unique(query_groups[n_positives < 1]).tolist()
        raise ValueError(f"groups {lonely} have no image besides their query; every group needs at least one positive")

    # Only the positives' ranks matter: a positive's 0-based rank in the query's list
    # is the number of positives before it (higher score, or equal score and lower
    # column: lexicographic order is stable) plus the negatives scoring at least as
    # high (ties: negatives first). Counting these reads n_positives x n_images
    # values where sorting every list (np.lexsort) cost 5-7x more at Holidays size.
    query_of, column = np.nonzero(positive)  # by query, then increasing column
    positive_scores = np.asarray(scores[query_of, column], dtype=np.float64)
    slot = np.arange(query_of.size) - (np.cumsum(n_positives) - n_positives)[query_of]
    same_query = np.full((n_queries, int(n_positives.max())), -np.inf)
    same_query[query_of, slot] = positive_scores
    rivals = same_query[query_of]
    earlier = np.arange(rivals.shape[1])[None, :] < slot[:, None]
    n_before = np.count_nonzero(
        (rivals > positive_scores[:, None]) | ((rivals == positive_scores[:, None]) & earlier), axis=1
    )
    ranks = n_before.copy()
    chunk = max(1, _COMPARED_SCORES_MAX // n_images)
    for start in range(0, query_of.size, chunk):
        stop = min(start + chunk, query_of.size)
        queries = query_of[start:stop]
        negative = ~positive[queries]
        negative[np.arange(stop - start), query_rows[queries]] = False
        higher = np.asarray(scores[queries], dtype=np.float64) >= positive_scores[start:stop, None]
        ranks[start:stop] += np.count_nonzero(higher & negative, axis=1)
    heights = _trapezoid_heights(ranks.astype(np.float64), n_before.astype(np.float64))
    # Summed along each query's whole list (zeros at its negatives), in the order and
    # with numpy's pairwise summation of a full ranking, so the APs do not depend on
    # this shortcut down to the last bit.
    list_heights = np.zeros((n_queries, n_images - 1))
    list_heights[query_of, ranks] = heights
    ap = list_heights.sum(axis=1) / n_positives

    mean_ap = float(ap.mean())
    if return_per_query:
        return mean_ap, ap
    return mean_ap


def holidays_map(X, groups, is_query, return_per_query=False):
    """Holidays mAP of signatures compared by dot product.

    Each query row is compared with every row of ``X`` by dot product (one matrix
    product for all queries, summed in float64 by
    :func:`ndir.projection.product.float64_inner`, so that near ties do not rank
    otherwise with the BLAS kernel; for L2-normalised rows this is the cosine
    similarity used in the paper) and scored by :func:`map_from_scores`.

    Parameters
    ----------
    X : (n_images, D) float32 array
        One signature per image (e.g. power- and L2-normalised VLAD/FV, or their
        projections).
    groups : (n_images,) int array
        Group label of each image (a query and its near duplicates).
    is_query : (n_images,) bool array
        True for the queries: the first image of each group in Holidays, every image
        in UKBench.
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
    scores = float64_inner(X[query_rows], X)
    return map_from_scores(scores, query_rows, groups, return_per_query)


def ns_score(X, groups, is_query, depth=4, return_per_query=False):
    """UKBench's N-S score (Nistér & Stewénius, CVPR 2006): the number of images of the
    query's group among the first ``depth`` = 4 of its ranking, the query itself
    counted, averaged over the queries; out of 4 on UKBench's groups of 4.

    The signatures are compared by dot product, in float64 as in :func:`holidays_map`;
    :func:`ns_from_scores` ranks them.

    Parameters
    ----------
    X : (n_images, D) array, one signature per image.
    groups : (n_images,) group labels.
    is_query : (n_images,) bool; on UKBench every image is a query.
    depth : int >= 1, places counted.
    return_per_query : also return each query's count, in ``np.flatnonzero(is_query)`` order.

    Returns
    -------
    float in [1, depth] (the mean count), and the (n_queries,) int counts when
    ``return_per_query``.
    """
    X = np.asarray(X)
    query_rows = np.flatnonzero(np.asarray(is_query, dtype=bool).ravel())
    return ns_from_scores(float64_inner(X[query_rows], X), query_rows, groups, depth, return_per_query)


def ns_from_scores(scores, query_rows, groups, depth=4, return_per_query=False):
    """UKBench's N-S score (:func:`ns_score`) from a query-by-image similarity matrix,
    for the models that score pairs rather than compare signatures by dot product.

    The query is counted as its own first result, as when it is searched for in a
    database that holds it and matches itself best (always so for L2-normalised
    signatures); the other ``depth - 1`` places go to the other images by decreasing
    score, ties broken with negatives first as in :func:`map_from_scores`, so the score
    cannot gain from ties either.

    Parameters
    ----------
    scores : (n_queries, n_images) float array, higher is more similar (not modified).
    query_rows : (n_queries,) row of each query among the images.
    groups : (n_images,) group labels.
    depth, return_per_query : as for :func:`ns_score`.
    """
    groups = np.asarray(groups).ravel()
    query_rows = np.asarray(query_rows, dtype=np.intp).ravel()
    scores = np.array(scores, dtype=np.float64)
    scores[np.arange(query_rows.size), query_rows] = -np.inf
    positive = groups[None, :] == groups[query_rows][:, None]
    top = np.lexsort((positive, -scores), axis=1)[:, : depth - 1]
    counts = 1 + np.take_along_axis(positive, top, axis=1).sum(axis=1)
    score = float(counts.mean())
    return (score, counts) if return_per_query else score


def recall_at_k(X, groups, ks=(1, 2, 4, 8), metric="dot"):
    """Recall@k of near-duplicate retrieval, every image being a query.

    Query ``i`` ranks the other images by decreasing similarity; it scores a hit at
    ``k`` when at least one of its near duplicates (another image of its group) is
    among the first ``k``. Recall@k is the share of queries with a hit (the
    deep-metric-learning protocol of the JCF poster, Jacob et al.). Ties are broken
    pessimistically, as in :func:`map_from_scores`: among images of equal score the
    negatives rank first. The best positive of a query (score ``s*``) therefore sits at
    0-based rank ``#{negatives with score >= s*}``, and the query hits at ``k`` iff that
    rank is below ``k``. The query's own column is ignored, whatever its score.

    Parameters
    ----------
    X : (n_images, D) signatures compared by dot product (``metric="dot"``), or by
        cosine (``"cosine"``: rows L2-normalised first; a zero row scores 0 with
        everything), or an (n_images, n_images) similarity matrix (``"precomputed"``,
        higher is more similar); finite.
    groups : (n_images,) group labels; every group needs at least two images.
    ks : iterable of int >= 1; a ``k`` of at least ``n_images - 1`` always hits.
    metric : ``"dot"``, ``"cosine"`` or ``"precomputed"``.

    Returns
    -------
    dict ``{k: recall}``, recall in [0, 1], in the order of ``ks``.
    """
    X = np.asarray(X, dtype=np.float64)
    groups = np.asarray(groups).ravel()
    ks = [int(k) for k in np.atleast_1d(ks)]
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must hold integers >= 1, got {ks}")
    if metric not in ("dot", "cosine", "precomputed"):
        raise ValueError(f"metric must be 'dot', 'cosine' or 'precomputed', got {metric!r}")
    n = groups.size
    if X.ndim != 2 or X.shape[0] != n or (metric == "precomputed" and X.shape[1] != n):
        expected = "(n_images, n_images)" if metric == "precomputed" else "(n_images, D)"
        raise ValueError(f"X has shape {X.shape}; expected {expected} with n_images = {n} (the length of groups)")
    if n == 0:
        raise ValueError("no query to evaluate")
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or infinite values")
    same = groups[:, None] == groups[None, :]
    np.fill_diagonal(same, False)
    lonely = ~same.any(axis=1)
    if lonely.any():
        raise ValueError(
            f"groups {np.unique(groups[lonely]).tolist()} have a single image: its query has no "
            "near duplicate to retrieve; every group needs at least two images"
        )
    if metric == "cosine":
        X = l2_normalise_rows(X)
    scores = X if metric == "precomputed" else X @ X.T
    best_positive = np.where(same, scores, -np.inf).max(axis=1)
    negative = ~same
    np.fill_diagonal(negative, False)
    rank = np.sum(negative & (scores >= best_positive[:, None]), axis=1)
    return {k: float(np.mean(rank < k)) for k in ks}


#: Below this many queries the tables print a bootstrap interval beside each mAP:
#: with 15 queries one query moves mAP by 6.7 points.
INTERVAL_MAX_QUERIES = 100


def bootstrap_interval(ap, level=0.95, n_resamples=2000, seed=0):
    """Percentile bootstrap interval of the mean of per-query APs.

    The queries are resampled with replacement ``n_resamples`` times (seeded); the
    interval holds the central ``level`` share of the resampled means. It says how
    much the mAP of this many queries would move on another draw of queries like
    them; it does not cover the choice of the training split.

    Parameters
    ----------
    ap : (n_queries,) array of average precisions.
    level : float in (0, 1).
    n_resamples : int >= 1.
    seed : int, seed of ``numpy.random.default_rng``.

    Returns
    -------
    (low, high) : floats, in the unit of ``ap``.
    """
    ap = np.asarray(ap, dtype=np.float64).ravel()
    if ap.size == 0:
        raise ValueError("no query to resample")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    means = ap[rng.integers(0, ap.size, size=(n_resamples, ap.size))].mean(axis=1)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def top_k(Y, query_rows, groups, k):
    """Top ``k`` of each query and its average precision, signatures ``Y`` compared by
    dot product as :func:`holidays_map` does.

    The query's own row is left out; ties are broken as in
    :func:`map_from_scores` (negatives first), so the list shown is
    the head of the list the AP is computed on.

    Returns
    -------
    top : (n_queries, k) int, rows of ``Y`` best first.
    ap : (n_queries,) float64 in [0, 1].
    """
    query_rows = np.asarray(query_rows, dtype=np.intp)
    groups = np.asarray(groups)
    scores = np.asarray(Y[query_rows] @ Y.T, dtype=np.float64)
    _, ap = map_from_scores(scores, query_rows, groups, return_per_query=True)
    scores[np.arange(query_rows.size), query_rows] = -np.inf
    positive = groups[None, :] == groups[query_rows][:, None]
    top = np.lexsort((positive, -scores), axis=1)[:, :k]
    return top, ap


def misses_near_duplicates(top, query_rows, groups):
    """Whether each query's top list misses near duplicates: it holds fewer of them
    than it has room for, ``min(k, n_positives)``."""
    groups = np.asarray(groups)
    query_groups = groups[np.asarray(query_rows)]
    hits = (groups[top] == query_groups[:, None]).sum(axis=1)
    n_positives = (groups[None, :] == query_groups[:, None]).sum(axis=1) - 1
    return hits < np.minimum(top.shape[1], n_positives)
