"""The triplet margin loss with the hardest negative of each anchor, and its gradient."""

import numpy as np


def hardest_negative_triplet_loss(Y, groups, margin):
    """Triplet margin loss with the hardest negative of each anchor, and its gradient.

    For every ordered pair ``(a, p)`` of distinct images of one group (anchor,
    positive) whose anchor has a negative ``l`` (another group) in ``Y``,
    with ``n(a) = argmax_l <y_a, y_l>`` the anchor's hardest negative::

        L = mean_(a, p) [margin - <y_a, y_p> + <y_a, y_n(a)>]_+

    The gradient takes ``n(a)`` fixed (a sub-gradient where two negatives tie, the
    lowest row winning) and the hinge's derivative as 0 at 0.

    Parameters
    ----------
    Y : (n, R) float array, the (normalised) signatures of a batch.
    groups : (n,) labels.
    margin : float > 0.

    Returns
    -------
    loss : float; grad : (n, R) float64 dL/dY; n_active : int, triplets with a
    positive hinge; n_triplets : int.
    """
    Y = np.asarray(Y, dtype=np.float64)
    groups = np.asarray(groups)
    S = Y @ Y.T
    same = groups[:, None] == groups[None, :]
    positive = same.copy()
    np.fill_diagonal(positive, False)
    has_negative = (~same).any(axis=1)
    positive &= has_negative[:, None]
    anchors, positives = np.nonzero(positive)
    if anchors.size == 0:
        return 0.0, np.zeros_like(Y), 0, 0
    hardest = np.where(same, -np.inf, S).argmax(axis=1)
    negatives = hardest[anchors]
    hinge = margin - S[anchors, positives] + S[anchors, negatives]
    active = hinge > 0
    loss = float(hinge[active].sum() / anchors.size)
    D = np.zeros_like(S)
    weight = 1.0 / anchors.size
    np.add.at(D, (anchors[active], positives[active]), -weight)
    np.add.at(D, (anchors[active], negatives[active]), weight)
    return loss, (D + D.T) @ Y, int(active.sum()), int(anchors.size)
