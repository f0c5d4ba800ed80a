"""Training triplets (query, match, non-match) from group labels.

Shared by the triplet-based metric learners (:mod:`ndir.soml`,
:mod:`ndir.similarity_matrix`): a triplet ``(i, j, l)`` says that image ``i`` should
be more similar to ``j`` (same group, a near duplicate) than to ``l`` (another group).
"""

import numpy as np
from sklearn.utils import check_random_state


def positive_pairs(groups):
    """Every ordered pair of distinct images of the same group.

    Parameters
    ----------
    groups : (n_images,) array of group labels.

    Returns
    -------
    (n_pairs, 2) int64 array of row indices ``(i, j)``, ``i != j``, sorted by ``i``
    then ``j``.
    """
    groups = np.asarray(groups).ravel()
    same = groups[:, None] == groups[None, :]
    np.fill_diagonal(same, False)
    return np.argwhere(same).astype(np.int64)


def sample_triplets(groups, negatives_per_pair, random_state=None):
    """Triplets from every positive pair and random non-matching images.

    Each ordered positive pair ``(i, j)`` of :func:`positive_pairs` is combined with
    ``negatives_per_pair`` images ``l`` drawn uniformly (with replacement) from the
    other groups, and the triplets are returned in random order — the stream an
    online learner sees.

    Parameters
    ----------
    groups : (n_images,) array of group labels.
    negatives_per_pair : int >= 1.
    random_state : int, RandomState or None.

    Returns
    -------
    (n_pairs * negatives_per_pair, 3) int64 array of ``(i, j, l)`` row indices.
    """
    groups = np.asarray(groups).ravel()
    if negatives_per_pair < 1:
        raise ValueError(f"negatives_per_pair must be >= 1, got {negatives_per_pair}")
    pairs = positive_pairs(groups)
    if len(pairs) == 0:
        raise ValueError("no group has two images: no positive pair to build triplets from")
    if np.unique(groups).size < 2:
        raise ValueError("a single group: no non-matching image to build triplets from")
    rng = check_random_state(random_state)
    pairs = np.repeat(pairs, negatives_per_pair, axis=0)
    triplets = np.column_stack([pairs, draw_negatives(groups, pairs[:, 0], rng)])
    return triplets[rng.permutation(len(triplets))]


def draw_negatives(groups, anchors, rng):
    """One image outside each anchor's group, drawn uniformly (with replacement).

    groups : (n_images,) labels, at least two distinct; anchors : (m,) row indices;
    rng : ``numpy.random.RandomState``. Rejection sampling: all m drawn at once, then
    those that landed in their anchor's own group drawn again, until none does.
    Returns (m,) int row indices.
    """
    negatives = rng.randint(len(groups), size=len(anchors))
    while (clash := np.flatnonzero(groups[negatives] == groups[anchors])).size:
        negatives[clash] = rng.randint(len(groups), size=clash.size)
    return negatives
