"""The ranking problem learned by the sparse rank projectors (Negrel et al. 2014, §IV-1).

What depends only on the training set and the scores ``d_U(x_q, x_a) = y_q^T y_a``
(Eq. 2, ``Y = X U``), not on how U is stored or updated:

- :class:`RankingProblem`: for each training query its positives ``P_q`` (the other
  images of its group), its pivot ``p_q`` (the negative that the original signatures
  score highest) and its other negatives ``N_q``, the sets of the constraints of Eq. 6;
  the Gram matrix ``K = X X^T``; and the loss ``f_q`` of Eq. 7 with the weights
  ``alpha_q``, ``beta_q`` of Eq. 8-9 (:func:`_losses`, :func:`_inverse_count`), with
  its derivatives with respect to the scores;
- :func:`gradient`: the selected queries' gradient (Eq. 14) in the factored form
  ``G = X^T B`` that the descent applies without forming G;
- :func:`select_queries`: the P queries of a step (the P // 2 of largest loss and the
  others at random, §IV-1);
- :func:`check_queries`: the training queries given to ``fit``, validated.

The hinges are positive when a constraint is violated and the update is
``U <- U - mu G``: ``ndir.projection.sparse_rank``'s module docstring explains how this
reads Eq. 7, 10, 14 and 15 as printed.
"""

import numpy as np

from ndir.projection.product import float64_inner


class RankingProblem:
    """Queries, positives, pivots and negatives of a training set (Eq. 6), and Eq. 7.

    X : (N, D) float32 training signatures; groups : (N,) labels; query_rows : (Q,) int.
    Holds ``gram`` (N, N) float64 = X X^T (summed in float64, so that the pivots and
    ``X G = K B`` do not depend on the BLAS kernel), ``pivots`` (Q,) column of each query's pivot,
    boolean (Q, N) masks ``positive`` (own group but not the query) and ``negative``
    (other groups but not the pivot).
    """

    def __init__(self, X, groups, query_rows, margin):
        self.gram = float64_inner(X)
        self.query_rows = query_rows
        self.margin = margin
        n_queries = query_rows.size
        same = groups[query_rows][:, None] == groups[None, :]
        self.positive = same.copy()
        self.positive[np.arange(n_queries), query_rows] = False
        self.negative = ~same
        # §IV-1: the pivot is the negative that the original signatures score highest.
        original = np.where(self.negative, self.gram[query_rows], -np.inf)
        self.pivots = np.argmax(original, axis=1)
        self.negative[np.arange(n_queries), self.pivots] = False

    def losses(self, Y):
        """f_q of every query (Eq. 7) for the projections Y (N, R) of the images."""
        return self.losses_of_scores(Y[self.query_rows] @ Y.T)

    def losses_of_scores(self, scores, selected=slice(None), weights=None, with_derivatives=False):
        """:func:`_losses` of the queries ``selected`` given their (P, N) scores."""
        return _losses(
            scores,
            self.pivots[selected],
            self.positive[selected],
            self.negative[selected],
            self.margin,
            weights,
            with_derivatives,
        )


def gradient(problem, Y, selected):
    """Gradient of the selected queries' objective (Eq. 14), as ``G = X^T B``.

    ``d_U(x_q, x_a) = x_q^T U U^T x_a`` has gradient ``(x_q x_a^T + x_a x_q^T) U``, so with
    ``dF[q, a] = d f_q / d d_U(x_q, x_a)``,
    ``G = sum_q x_q (dF[q] Y)^T + (X^T dF[q]) y_q^T = X^T B``, ``B = E_S Z + dF^T Y_S``,
    ``Z = dF Y``.

    Parameters
    ----------
    problem : RankingProblem
    Y : (N, R) float64
        X U.
    selected : (P,) int
        Indices of the queries (into ``problem.query_rows``).

    Returns
    -------
    scores (P, N), losses (P,), dF (P, N), Z (P, R), B (N, R), all float64, and the
    weights (alpha, beta) of Eq. 8-9 at U, two (P,) float64.
    """
    rows = problem.query_rows[selected]
    scores = Y[rows] @ Y.T
    losses, dF, weights = problem.losses_of_scores(scores, selected, with_derivatives=True)
    Z = dF @ Y
    B = dF.T @ Y[rows]
    B[rows] += Z
    return scores, losses, dF, Z, B, weights


def _losses(scores, pivots, positive, negative, margin, weights=None, with_derivatives=False):
    """Loss of Eq. 7 for each query, and optionally its derivatives w.r.t. the scores.

    Parameters
    ----------
    scores : (n, N) float64
        ``d_U(x_q, x_a)`` of each query (row) with every image (column).
    pivots : (n,) int
        Column of each query's pivot.
    positive, negative : (n, N) bool
        Positives of each query; negatives other than its pivot.
    margin : float
        epsilon of Eq. 7.
    weights : None or pair of (n,) float64
        (alpha_q, beta_q) to use instead of Eq. 8-9 at these scores.
    with_derivatives : bool
        Also return ``dF[q, a] = d f_q / d scores[q, a]`` with alpha_q and beta_q held
        constant (they are piecewise constant), and the weights used.

    Returns
    -------
    losses (n,) float64; with derivatives, also dF (n, N) float64 and (alpha, beta).
    """
    rows = np.arange(scores.shape[0])
    pivot_scores = scores[rows, pivots][:, None]
    positive_violation = np.where(positive, margin + pivot_scores - scores, 0.0)
    negative_violation = np.where(negative, scores - pivot_scores, 0.0)
    np.maximum(positive_violation, 0.0, out=positive_violation)
    np.maximum(negative_violation, 0.0, out=negative_violation)
    if weights is None:
        weights = _inverse_count(positive_violation), _inverse_count(negative_violation)
    alpha, beta = weights
    losses = alpha * np.einsum("ij,ij->i", positive_violation, positive_violation)
    losses += beta * np.einsum("ij,ij->i", negative_violation, negative_violation)
    if not with_derivatives:
        return losses
    derivatives = 2.0 * (beta[:, None] * negative_violation - alpha[:, None] * positive_violation)
    derivatives[rows, pivots] = 2.0 * (alpha * positive_violation.sum(axis=1) - beta * negative_violation.sum(axis=1))
    return losses, derivatives, weights


def _inverse_count(violations):
    """alpha_q / beta_q of Eq. 8-9: 1 / (number of violated constraints), 0 if none."""
    count = np.count_nonzero(violations, axis=1).astype(np.float64)
    return np.divide(1.0, count, out=np.zeros_like(count), where=count > 0)


def select_queries(losses, n_select, rng):
    """Indices of the P queries of a step (§IV-1): the P // 2 of largest loss, and the
    others drawn uniformly without replacement from the rest."""
    if n_select >= losses.size:
        return np.arange(losses.size)
    n_active = n_select // 2
    order = np.argsort(-losses, kind="stable")
    rest = np.sort(order[n_active:])
    drawn = rng.choice(rest, size=n_select - n_active, replace=False)
    return np.concatenate([order[:n_active], drawn])


def check_queries(group_codes, queries):
    """Validated query rows (Q,) int: given, or the first row of each group."""
    n_images = group_codes.size
    if queries is None:
        rows = np.sort(np.unique(group_codes, return_index=True)[1])
    else:
        queries = np.asarray(queries)
        if queries.size == 0:
            raise ValueError("no training query: queries is empty")
        if queries.dtype == bool and queries.shape == (n_images,):
            rows = np.flatnonzero(queries)
        elif np.issubdtype(queries.dtype, np.integer) and queries.ndim == 1:
            rows = np.unique(queries)
            if rows.size and (rows[0] < 0 or rows[-1] >= n_images):
                raise ValueError(f"query rows must lie in [0, {n_images})")
        else:
            raise ValueError(
                "queries must be None, a boolean mask over the rows of X or an "
                f"array of row indices; got dtype {queries.dtype}, shape {queries.shape}"
            )
    if rows.size == 0:
        raise ValueError("no training query")
    group_sizes = np.bincount(group_codes)
    lonely = np.flatnonzero(group_sizes[group_codes[rows]] < 2)
    if lonely.size:
        raise ValueError(
            f"query rows {rows[lonely].tolist()} are alone in their group: every "
            "query needs a near duplicate (drop single-image groups)"
        )
    if group_sizes.size < 2:
        raise ValueError("all images are in one group: the queries have no negatives")
    return rows
