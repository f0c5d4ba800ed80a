"""Rank-optimised sparse projectors (Negrel, Picard & Gosselin, ICPR 2014, §IV).

The projector is a matrix ``U`` (D x R) learned so that, after the projection
``y = U^T x`` (Eq. 3), each training query's near duplicates score above its other
images under the dot product ``d_U(x_q, x_j) = y_q^T y_j`` (Eq. 2), with
``M = round((1 - tau) D)`` non-zero entries per column (Eq. 16-19).

Learning problem (§IV-1). For a query ``q`` with positives ``P_q`` (the other images of
its group) and negatives ``N_q`` (every image of another group), the pivot ``p_q`` is the
negative that scores highest under the original signatures. The constraints of Eq. 6
are ``d(q, i) > d(q, p_q)`` for every positive ``i`` and ``d(q, p_q) >= d(q, j)`` for every
other negative ``j``. Each query's loss is Eq. 7,

    f_q(U) = alpha_q sum_i [eps + d(q, p_q) - d(q, i)]_+^2
           + beta_q  sum_j [d(q, j) - d(q, p_q)]_+^2,

where ``alpha_q`` (``beta_q``) is one over the number of violated positive (negative)
constraints (Eq. 8-9, with h(0) = 0), so each term is a mean squared violation. Eq. 7 is
printed with ``Delta d(q, i, p_q)`` and ``Delta d(q, p_q, j)`` in the hinges, which by
Eq. 10 are positive when the constraints *hold*; the hinges here are positive when the
constraints are violated, as the text describes and as Eq. 14's ``A_qi`` (built on
``x_{p_q} - x_i``) differentiates in its first term. The gradient (Eq. 14, ``alpha_q`` and
``beta_q`` held constant since the Heaviside makes them piecewise constant, and with the
factor 2 of the square) and the descent update ``U <- U - mu G`` (Eq. 15 is printed with
a "+", which would climb) are checked against finite differences in the tests.

Algorithm 1: initialise ``U`` with the unsupervised (PCA) projectors, project it on the
l0 constraint, then repeat: pick P queries (the P // 2 of largest ``f_q``, the others
drawn at random from the rest), compute their gradient, find the step by golden-section
search on their objective, update, and keep the M largest ``|u_ki|`` of each column
(Eq. 17); stop when the objective over all queries is below ``tol`` or after ``max_iter``
steps.

Choices the paper leaves open (see docs/method.md, "Deviations from the paper"): the
golden-section search minimises the selected queries' objective with alpha_q and beta_q
frozen at U_t, like the gradient (recounted, the objective jumps up each time a
violated constraint gets satisfied and the search stalls); by default every column of U
is rescaled to unit norm after each update (``renormalize``), since the scores, unlike
the margin, scale with U.

Cost of a step (N training images, P queries, R outputs, D input dimensions). With
``Y = X U`` kept up to date, the selected queries' gradient is ``G = X^T B`` with
``B = E_S Z + dF^T Y_S`` (``dF``: P x N derivatives of the losses with respect to the
scores, ``Z = dF Y``, ``E_S`` the query indicator columns); it is applied in low-rank
form ``X_S^T Z + (dF X)^T Y_S`` by one in-place GEMM, O(P N D + P D R). ``X G = K B``
follows from the Gram matrix ``K = X X^T`` computed once, so the scores along the search
line, ``(y_q - mu h_q)^T (y_j - mu h_j)``, are a quadratic in ``mu`` whose three P x N
coefficient matrices are formed once per step: a golden-section evaluation costs O(P N).
The l0 projection is a per-column selection (no sort), and ``Y`` is then recomputed
from the sparse U in O(N nnz(U)), or by dense BLAS when U is dense enough for that to be
faster. Without the sparsity constraint ``Y - mu K B`` is exact and ``Y`` is recomputed
from U only every ``_REFRESH_EVERY`` steps against float32 drift.
"""

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from scipy.linalg.blas import sgemm
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data
from threadpoolctl import ThreadpoolController

from .pca import PCAProjection

logger = logging.getLogger(__name__)

#: Values of ``SparseRankProjector(line_search=...)``.
LINE_SEARCHES = ("projected", "dense")

_GOLDEN = (1.0 + 5.0**0.5) / 2.0
# Line search: at most this many bracket expansions (or contractions), then golden-
# section steps until the bracket is narrower than _SEARCH_RTOL times its right end.
_MAX_BRACKET_STEPS = 60
_MAX_SECTION_STEPS = 40
_SEARCH_RTOL = 1e-3
# The projected search's objective is piecewise (entries switch in and out of the
# support) and each trial costs a product with the moved entries: a coarser bracket.
_PROJECTED_RTOL = 3e-2
# Its first trial, as a fraction of the largest step it tries (|U|_F / 2).
_PROJECTED_FIRST_STEP = 1.0 / _GOLDEN
# Entries first considered to enter each column's support in the projected search
# (widened when a trial admits them all), and the sample that sets their threshold.
_ENTERING_CANDIDATES = 64
_THRESHOLD_SAMPLE = 4096
# Without sparsity (or with the projected search) Y is updated from the step rather
# than recomputed; recompute it as X U this often so that it cannot drift away from
# the float32 U by rounding.
_REFRESH_EVERY = 100
# dF X gathers the rows of X that the violated constraints involve when they are at
# most this fraction of the training set, and multiplies the whole X otherwise.
_GATHER_ROWS_MAX = 0.25
# Fraction of non-zeros of U above which dense BLAS computes X U faster than the
# threaded sparse product (measured on 2 cores at D = 81,920, N = 745, R = 256: dense
# 0.19 s whatever the sparsity, sparse 0.16 s at 10 % and 0.03 s at 1 % of non-zeros;
# benchmarks/bench_sparse_rank.py).
_SPARSE_DENSITY_MAX = 0.12
# Images per block of X^T in the sparse X U: the block of Y^T a thread accumulates into,
# (R / n_jobs) x 256 float32, then stays in a 512 KiB L2 cache for R = 256 on 2 threads
# (0.13 s instead of 0.16 s for all 745 images at once, tau = 0.9, D = 81,920).
_SPARSE_IMAGES = 256
# transform() sends at most this many rows through the sparse U^T (when its density is
# at most _SPARSE_DENSITY_MAX): one signature then costs nnz(U) multiply-adds instead of
# a read of the whole dense matrix, while batches are faster with dense BLAS
# (ndir.projection.cost measures both: at D = 81,920, R = 256, tau = 0.99, one signature
# takes 0.3 ms sparse against 6-16 ms dense).
_SPARSE_ROWS_MAX = 16


class SparseRankProjector(TransformerMixin, BaseEstimator):
    """Projection learned to rank near duplicates first, with M non-zeros per column.

    Algorithm 1 of Negrel et al. 2014 (Eq. 6-19); the module docstring gives the loss,
    its sign conventions and the cost of a step.

    Parameters
    ----------
    n_components : int
        Output dimension R (32 to 256 in the paper).
    sparsity : float in [0, 1), default 0.99
        Rate tau of zero entries (Eq. 18-19): each column keeps
        ``M = max(1, round((1 - tau) D))`` non-zeros. 0 disables the l0 projection.
    max_iter : int, default 2000
        Maximum number of gradient steps.
    n_queries_per_step : int, default 20
        P, the queries of one step: the ``P // 2`` of largest loss (active part) and
        ``P - P // 2`` drawn at random from the others (stochastic part).
    margin : float, default 1e-2
        epsilon of Eq. 7: positives must beat the pivot by this much. The paper's
        example is 1e-6, but with unit-norm columns (``renormalize``) and signatures
        the scores lie in [-1, 1] and so small a margin asks for no separation:
        1e-2 generalises better on held-out training groups
        (``benchmarks/select_margin.py``).
    tol : float, default 1e-12
        Stop as soon as the objective over all queries (Eq. 13) is below ``tol`` (or
        zero).
    init : {"pca", "random"} or (D, R) array, default "pca"
        Projectors before the first l0 projection: the principal axes of the training
        signatures (the unsupervised projectors of the paper's ref. [9],
        ``PCAProjection.components_``), unit-norm Gaussian columns (the random
        initialisation of Bai et al.), or a given matrix.
    renormalize : bool, default True
        Rescale every column of U to unit L2 norm after each update and l0 projection.
        The scores ``y_q^T y_j`` scale with the square of U while the margin does not,
        so shrinking U alone lowers the loss, and the l0 projection shrinks the columns
        it thresholds; fixing the column norms leaves only the ranking to learn.
        False follows the paper to the letter.
    line_search : {"projected", "dense"}, default "projected"
        How mu_t of "compute the optimal learning rate, perform the update, project"
        (Algorithm 1) is chosen when ``sparsity > 0``. "projected": golden-section
        search on the selected queries' objective at the point the step actually
        lands on, ``P_M(U - mu G)`` (l0 projection and, with ``renormalize``, unit
        columns; alpha_q and beta_q recounted there). "dense": search on the
        objective at ``U - mu G`` before the projection, alpha_q and beta_q frozen
        at U, then project: the literal reading, which hardly learns at high
        sparsity since the projection discards most of the step it chose. Without
        sparsity the projection is the identity and both are the dense search.
    normalize : bool, default False
        L2-normalise the rows returned by :meth:`transform`. False returns
        ``U^T x`` (Eq. 3), whose dot products are the similarity U was trained for
        (Eq. 2).
    callback : callable or None, default None
        ``callback(iteration, projector)``, called after the initial l0 projection
        (iteration 0), every ``callback_every`` steps and after the last step, with
        ``components_``, ``objective_``, ``step_sizes_`` and ``n_iter_`` describing the
        current state so that it can, e.g., measure mAP through :meth:`transform`.
    callback_every : int, default 1
        Steps between two callback calls.
    n_jobs : int or None, default None
        Threads of the training loop, which splits its large products, the l0
        projection and the sparse ``X U`` into that many blocks (BLAS itself runs
        single-threaded there). None or -1 uses every CPU available to the process.
    random_state : int, RandomState instance or None, default None
        Seeds the stochastic half of the query selection and ``init="random"``.

    Attributes
    ----------
    components_ : scipy.sparse.csc_array, (D, R) float32
        The projectors U, exactly ``n_nonzero_`` stored entries per column.
    n_nonzero_ : int
        M, the entries kept per column.
    objective_ : (n_iter_ + 1,) float64
        Objective over all training queries (Eq. 13) before each step and after the
        last one.
    objective_unprojected_ : (n_iter_,) float64
        Objective over all training queries at ``U_t - mu_t G_t``, the point each
        step reached before its l0 projection (and renormalisation): comparing it
        with ``objective_[1:]`` shows what the projection undid.
    step_sizes_ : (n_iter_,) float64
        Learning rate mu_t of each step, for the gradient G of Eq. 14 (0 when no step
        along the gradient lowered the selected queries' objective).
    n_iter_ : int
        Gradient steps taken.
    query_rows_ : (n_queries,) int
        Training rows used as queries.
    pivots_ : (n_queries,) int
        Training row of each query's pivot p_q.
    n_features_in_ : int
        D.
    """

    def __init__(
        self,
        n_components,
        sparsity=0.99,
        max_iter=2000,
        n_queries_per_step=20,
        margin=1e-2,
        tol=1e-12,
        init="pca",
        renormalize=True,
        line_search="projected",
        normalize=False,
        callback=None,
        callback_every=1,
        n_jobs=None,
        random_state=None,
    ):
        self.n_components = n_components
        self.sparsity = sparsity
        self.max_iter = max_iter
        self.n_queries_per_step = n_queries_per_step
        self.margin = margin
        self.tol = tol
        self.init = init
        self.renormalize = renormalize
        self.line_search = line_search
        self.normalize = normalize
        self.callback = callback
        self.callback_every = callback_every
        self.n_jobs = n_jobs
        self.random_state = random_state

    def fit(self, X, y, queries=None):
        """Learn the projectors from training signatures and their groups.

        Parameters
        ----------
        X : (N, D) float32 array
            Training signatures, one per row (power- and L2-normalised in the paper).
        y : (N,) array
            Group label of each image; the images of a group are near duplicates.
            (Named ``y`` as scikit-learn requires for pipelines.)
        queries : None, (N,) bool array or int array of rows
            The training queries. None takes the first row of each group, as in
            Holidays. Every query's group needs another image, and some other group
            must exist.

        Returns
        -------
        self
        """
        self._check_params()
        X, groups = validate_data(self, X, y, dtype=np.float32, ensure_min_samples=2)
        n_images, n_features = X.shape
        if self.n_components > n_features:
            raise ValueError(
                f"n_components={self.n_components} exceeds the signature dimension "
                f"D={n_features}"
            )
        group_codes = np.unique(groups, return_inverse=True)[1]
        query_rows = _query_rows(group_codes, queries)
        problem = _RankingProblem(X, group_codes, query_rows, self.margin)
        n_keep = max(1, int(round((1.0 - self.sparsity) * n_features)))
        rng = check_random_state(self.random_state)
        n_jobs = (
            len(os.sched_getaffinity(0)) if self.n_jobs in (None, -1) else self.n_jobs
        )

        self.n_nonzero_ = n_keep
        self.query_rows_ = query_rows
        self.pivots_ = problem.pivots
        objective, unprojected, step_sizes = [], [], []
        with ThreadPoolExecutor(n_jobs) as pool:
            descent = _Descent(
                X,
                problem.gram,
                self._initial_components(X, rng),
                n_keep,
                self.renormalize,
                self.line_search,
                pool,
                n_jobs,
            )
            for step in range(self.max_iter + 1):
                losses = problem.losses(descent.Y)
                objective.append(float(losses.sum()))
                # A zero objective has a zero gradient: nothing more would change.
                done = objective[-1] < self.tol or objective[-1] == 0.0
                done = done or step == self.max_iter
                if self.callback is not None and (
                    done or step % self.callback_every == 0
                ):
                    self._set_state(descent, objective, unprojected, step_sizes)
                    self.callback(step, self)
                if done:
                    break
                selected = _select_queries(losses, self.n_queries_per_step, rng)
                mu, before_projection = descent.step(problem, selected)
                step_sizes.append(mu)
                unprojected.append(before_projection)
        self._set_state(descent, objective, unprojected, step_sizes)
        logger.info(
            "%d steps, objective %.3g -> %.3g",
            self.n_iter_,
            objective[0],
            objective[-1],
        )
        return self

    def transform(self, X):
        """Project signatures: ``Y = X U`` (Eq. 3).

        Up to ``_SPARSE_ROWS_MAX`` rows go through the sparse U (nnz multiply-adds per
        row) when U is sparse enough; larger batches through dense BLAS, which is
        faster for them.

        Parameters
        ----------
        X : (n, D) float32 array

        Returns
        -------
        (n, R) float32 array
            ``X U``; rows scaled to unit L2 norm when ``normalize`` (zero rows stay
            zero).
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float32, reset=False)
        density = self.n_nonzero_ / X.shape[1]
        if X.shape[0] <= _SPARSE_ROWS_MAX and density <= _SPARSE_DENSITY_MAX:
            Y = np.asarray((self.components_.T @ X.T).T, dtype=np.float32)
        else:
            Y = X @ self.components_.toarray()
        if self.normalize:
            norms = np.linalg.norm(Y, axis=1, keepdims=True)
            Y = np.divide(Y, norms, out=np.zeros_like(Y), where=norms > 0)
        return Y

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.transformer_tags.preserves_dtype = ["float32"]
        return tags

    def _check_params(self):
        checks = [
            ("n_components", _is_int(self.n_components) and self.n_components >= 1),
            ("sparsity", _is_real(self.sparsity) and 0.0 <= self.sparsity < 1.0),
            ("max_iter", _is_int(self.max_iter) and self.max_iter >= 0),
            (
                "n_queries_per_step",
                _is_int(self.n_queries_per_step) and self.n_queries_per_step >= 1,
            ),
            ("margin", _is_real(self.margin) and self.margin >= 0.0),
            ("tol", _is_real(self.tol) and self.tol >= 0.0),
            ("callback", self.callback is None or callable(self.callback)),
            (
                "callback_every",
                _is_int(self.callback_every) and self.callback_every >= 1,
            ),
            (
                "n_jobs",
                self.n_jobs is None
                or (_is_int(self.n_jobs) and (self.n_jobs >= 1 or self.n_jobs == -1)),
            ),
            (
                "init",
                not isinstance(self.init, str) or self.init in ("pca", "random"),
            ),
            ("line_search", self.line_search in LINE_SEARCHES),
        ]
        for name, valid in checks:
            if not valid:
                raise ValueError(
                    f"invalid {name}={getattr(self, name)!r}; see the "
                    "SparseRankProjector docstring for the accepted values"
                )

    def _initial_components(self, X, rng):
        """(D, R) float32 projectors to start from (Algorithm 1, first line)."""
        n_images, n_features = X.shape
        if isinstance(self.init, str) and self.init == "pca":
            if self.n_components > n_images - 1:
                raise ValueError(
                    f"init='pca' gives at most N - 1 = {n_images - 1} axes for "
                    f"n_components={self.n_components}; use init='random' or more images"
                )
            return PCAProjection(self.n_components).fit(X).components_
        if isinstance(self.init, str):
            U = rng.standard_normal((n_features, self.n_components)).astype(np.float32)
            return U / np.linalg.norm(U, axis=0)
        U = np.asarray(self.init, dtype=np.float32)
        if U.shape != (n_features, self.n_components) or not np.all(np.isfinite(U)):
            raise ValueError(
                f"init array has shape {U.shape}; expected finite values of shape "
                f"(D, n_components) = ({n_features}, {self.n_components})"
            )
        return U

    def _set_state(self, descent, objective, unprojected, step_sizes):
        self.components_ = descent.components()
        self.objective_ = np.asarray(objective)
        self.objective_unprojected_ = np.asarray(unprojected)
        self.step_sizes_ = np.asarray(step_sizes)
        self.n_iter_ = len(step_sizes)


class _RankingProblem:
    """Queries, positives, pivots and negatives of a training set (Eq. 6), and Eq. 7.

    X : (N, D) float32 training signatures; groups : (N,) labels; query_rows : (Q,) int.
    Holds ``gram`` (N, N) float64 = X X^T, ``pivots`` (Q,) column of each query's pivot,
    boolean (Q, N) masks ``positive`` (own group but not the query) and ``negative``
    (other groups but not the pivot).
    """

    def __init__(self, X, groups, query_rows, margin):
        self.gram = (X @ X.T).astype(np.float64)
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

    def losses_of_scores(
        self, scores, selected=slice(None), weights=None, with_derivatives=False
    ):
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


def _gradient(problem, Y, selected):
    """Gradient of the selected queries' objective (Eq. 14), as ``G = X^T B``.

    ``d_U(x_q, x_a) = x_q^T U U^T x_a`` has gradient ``(x_q x_a^T + x_a x_q^T) U``, so with
    ``dF[q, a] = d f_q / d d_U(x_q, x_a)``,
    ``G = sum_q x_q (dF[q] Y)^T + (X^T dF[q]) y_q^T = X^T B``, ``B = E_S Z + dF^T Y_S``,
    ``Z = dF Y``.

    Parameters
    ----------
    problem : _RankingProblem
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
    losses, dF, weights = problem.losses_of_scores(
        scores, selected, with_derivatives=True
    )
    Z = dF @ Y
    B = dF.T @ Y[rows]
    B[rows] += Z
    return scores, losses, dF, Z, B, weights


def _line_objective(problem, selected, scores, Y, H, weights):
    """The selected queries' objective at ``U - mu G`` as a function of ``mu``.

    With ``H = X G``, the scores become ``(y_q - mu h_q)^T (y_a - mu h_a)``
    ``= scores - mu (h_q^T y_a + y_q^T h_a) + mu^2 h_q^T h_a``: the three (P, N)
    coefficients are formed once, then each evaluation costs O(P N).

    alpha_q and beta_q stay at their values at U (``weights``), as in the gradient:
    recounted along the line they would make the objective jump up whenever a violated
    constraint gets satisfied (the mean of fewer squared violations can be larger),
    and the search would stall on those jumps; frozen, the objective is continuously
    differentiable in ``mu`` with slope ``-|G|^2`` at 0.
    """
    rows = problem.query_rows[selected]
    linear = -(H[rows] @ Y.T + Y[rows] @ H.T)
    quadratic = H[rows] @ H.T

    def objective(mu):
        moved = scores + mu * (linear + mu * quadratic)
        return problem.losses_of_scores(moved, selected, weights).sum()

    return objective


def _losses(
    scores, pivots, positive, negative, margin, weights=None, with_derivatives=False
):
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
    derivatives = 2.0 * (
        beta[:, None] * negative_violation - alpha[:, None] * positive_violation
    )
    derivatives[rows, pivots] = 2.0 * (
        alpha * positive_violation.sum(axis=1) - beta * negative_violation.sum(axis=1)
    )
    return losses, derivatives, weights


def _inverse_count(violations):
    """alpha_q / beta_q of Eq. 8-9: 1 / (number of violated constraints), 0 if none."""
    count = np.count_nonzero(violations, axis=1).astype(np.float64)
    return np.divide(1.0, count, out=np.zeros_like(count), where=count > 0)


class _Descent:
    """State of Algorithm 1: the projectors and their projection of the training set.

    X : (N, D) float32; gram : (N, N) float64 = X X^T; U : (D, R) float32 initial
    projectors; n_keep : M; renormalize : unit columns after each update;
    line_search : "projected" or "dense" (see :class:`SparseRankProjector`).
    ``UT`` (R, D) float32 holds U transposed, zeros included (a column of U per
    contiguous row, for the per-column selection and the in-place update); ``Y``
    (N, R) float64 is X U; when sparse, ``kept`` and ``values`` (R, M) are the row
    indices and values of the entries of each column of U.

    BLAS runs single-threaded inside (``threadpoolctl``): the many small products of a
    step are slowed down, not sped up, by BLAS threads, and the large ones are split
    by hand into ``n_jobs`` blocks run on ``pool``, which also spreads the l0
    projection and the sparse product.
    """

    def __init__(self, X, gram, U, n_keep, renormalize, line_search, pool, n_jobs):
        self.X, self.gram = X, gram
        self.UT = np.ascontiguousarray(U.T, dtype=np.float32)
        self.n_keep, self.renormalize = n_keep, renormalize
        self.pool, self.n_jobs = pool, n_jobs
        self.blas = ThreadpoolController()
        n_outputs, n_features = self.UT.shape
        self.sparse = n_keep < n_features
        self.projected = self.sparse and line_search == "projected"
        self.sparse_product = self.sparse and n_keep / n_features <= _SPARSE_DENSITY_MAX
        self.n_steps = 0
        with self.blas.limit(limits=1, user_api="blas"):
            if self.sparse:
                # The sparse X U reads X^T one row per stored entry of U, in blocks of
                # images (contiguous copies) so that the rows of Y^T it accumulates
                # into stay in cache; the projected search reads the rows of X^T of
                # the entries that its trial steps move in or out of the support.
                if self.sparse_product or self.projected:
                    self.XT_blocks = [
                        np.ascontiguousarray(X[start : start + _SPARSE_IMAGES].T)
                        for start in range(0, X.shape[0], _SPARSE_IMAGES)
                    ]
                self.thresholds = None
                self._project()
            else:
                if renormalize:
                    self._blocks(self._normalize_rows, n_outputs)
                self.Y = self._dense_product()

    def step(self, problem, selected):
        """One iteration of Algorithm 1 on the queries ``selected``.

        Returns mu_t (for the gradient of Eq. 14) and the objective over all queries
        at ``U - mu_t G``, before the l0 projection.
        """
        with self.blas.limit(limits=1, user_api="blas"):
            return self._step(problem, selected)

    def components(self):
        """U as a (D, R) float32 CSC matrix with exactly M stored entries per column."""
        n_outputs, n_features = self.UT.shape
        if self.sparse:
            indices, data = self.kept.ravel(), self.values.ravel()
        else:
            indices = np.tile(np.arange(n_features, dtype=np.int32), n_outputs)
            data = self.UT.ravel().copy()
        return sp.csr_array(
            (data, indices, _row_pointers(n_outputs, indices.size // n_outputs)),
            shape=self.UT.shape,
        ).T.tocsc()

    def _step(self, problem, selected):
        self.n_steps += 1
        rows = problem.query_rows[selected]
        scores, losses, dF, Z, B, weights = _gradient(problem, self.Y, selected)
        H = self.gram @ B  # X G
        gradient_sq_norm = float(np.vdot(B, H))  # |G|^2 = tr(B^T K B)
        if losses.sum() <= 0.0 or gradient_sq_norm <= 0.0:
            return 0.0, float(problem.losses(self.Y).sum())
        if self.projected:
            line = _ProjectedLine(self, problem, selected, rows, dF, Z, gradient_sq_norm)
            # Every search starts from the same fraction of the range [0, |U|_F / 2]:
            # warm-started from the last step instead, a run of tiny steps (a flat,
            # bumpy objective near mu = 0) can trap the search there for good.
            step = _line_search(
                line,
                float(losses.sum()),
                line.max_step * _PROJECTED_FIRST_STEP,
                line.max_step,
                _PROJECTED_RTOL,
            )
            mu = step / np.sqrt(gradient_sq_norm)
            unprojected = float(problem.losses(self.Y - mu * H).sum())
            if step > 0.0:
                line.move(step)
            return mu, unprojected
        objective = _line_objective(problem, selected, scores, self.Y, H, weights)
        # First trial: the step that would zero a linear model of the objective.
        mu = _line_search(
            objective, float(losses.sum()), losses.sum() / gradient_sq_norm
        )
        unprojected = float(problem.losses(self.Y - mu * H).sum())
        if mu == 0.0:
            return 0.0, unprojected
        self._update(mu, rows, dF, Z)
        if self.sparse:
            self._project()
            return mu, unprojected
        if self.renormalize:
            # |u_r - mu g_r|^2 with |u_r| = 1, u_r.g_r = (Y^T B)_rr, |g_r|^2 = (B^T K B)_rr.
            norms = np.sqrt(
                1.0
                - 2.0 * mu * np.einsum("nr,nr->r", self.Y, B)
                + mu**2 * np.einsum("nr,nr->r", B, H)
            )
            self._blocks(
                lambda a, b: _divide_rows(self.UT[a:b], norms[a:b]), norms.size
            )
        self.Y = self.Y - mu * H
        if self.renormalize:
            self.Y /= norms
        if self.n_steps % _REFRESH_EVERY == 0:
            if self.renormalize:
                self._blocks(self._normalize_rows, self.UT.shape[0])
            self.Y = self._dense_product()
        return mu, unprojected

    def _gradient_factors(self, rows, dF, Z):
        """G = left^T right (Eq. 14): left (2P, D) float32 = [X_S; dF X], right (2P, R)
        float32, Fortran order, = [Z; Y_S]."""
        left = np.empty((2 * rows.size, self.X.shape[1]), dtype=np.float32)
        left[: rows.size] = self.X[rows]
        self._blocks(
            lambda a, b: self._loss_rows(dF, left[rows.size :], a, b), left.shape[1]
        )
        right = np.asfortranarray(np.vstack([Z, self.Y[rows]]), dtype=np.float32)
        return left, right

    def _update(self, mu, rows, dF, Z):
        """U <- U - mu G in place (Eq. 15 for descent)."""
        left, right = self._gradient_factors(rows, dF, Z)
        self._blocks(
            lambda a, b: sgemm(
                -mu, left.T, right[:, a:b], beta=1.0, c=self.UT[a:b].T, overwrite_c=True
            ),
            self.UT.shape[0],
        )

    def _gradient_rows(self, rows, dF, Z):
        """G^T (R, D) float32, one column of G per contiguous row."""
        left, right = self._gradient_factors(rows, dF, Z)
        GT = np.empty_like(self.UT)
        self._blocks(
            lambda a, b: sgemm(
                1.0, left.T, right[:, a:b], beta=0.0, c=GT[a:b].T, overwrite_c=True
            ),
            GT.shape[0],
        )
        return GT

    def _loss_rows(self, dF, out, start, stop):
        """``out[:, start:stop] = (dF X)[:, start:stop]``; late in training few
        constraints are violated and only the rows of X they involve are read."""
        used = np.flatnonzero(np.any(dF != 0.0, axis=0))
        if used.size <= _GATHER_ROWS_MAX * dF.shape[1]:
            out[:, start:stop] = (
                dF[:, used].astype(np.float32) @ self.X[used, start:stop]
            )
        else:
            out[:, start:stop] = dF.astype(np.float32) @ self.X[:, start:stop]

    def _project(self):
        """l0 projection of U (Eq. 17), then Y = X U."""
        previous = self.thresholds

        def block(start, stop):
            return _l0_project(
                self.UT[start:stop],
                self.n_keep,
                self.renormalize,
                None if previous is None else previous[start:stop],
            )

        kept, values, thresholds = zip(*self._blocks(block, self.UT.shape[0]))
        self.kept, self.values = np.vstack(kept), np.vstack(values)
        self.thresholds = np.concatenate(thresholds)
        self.Y = self.product(self.kept, self.values)

    def product(self, kept, values):
        """X V (N, R) float64 for the sparse V whose column r holds ``values[r]`` at rows
        ``kept[r]`` ((R, m) arrays): O(N R m) through the stored entries, or dense BLAS
        when V is dense enough for that to be faster."""
        if not self.sparse_product:
            VT = np.zeros_like(self.UT)
            np.put_along_axis(VT, kept, values.astype(np.float32), axis=1)
            return self._dense_product(VT)
        n_features = self.UT.shape[1]

        def block(start, stop):
            # Each thread multiplies the CSC of its rows of V^T by the blocks of X^T,
            # which reads the rows of X^T in order and accumulates into a block of
            # Y^T small enough to stay in cache.
            VT = sp.csr_array(
                (
                    values[start:stop].ravel().astype(np.float32),
                    kept[start:stop].ravel(),
                    _row_pointers(stop - start, kept.shape[1]),
                ),
                shape=(stop - start, n_features),
            ).tocsc()
            return np.hstack([VT @ XT for XT in self.XT_blocks])

        return np.vstack(self._blocks(block, kept.shape[0])).T.astype(np.float64)

    def sparse_rows_product(self, CT):
        """X C (N, R) float64 for a scipy CSR C^T (R, D): O(N nnz(C)) through the
        blocks of X^T, or dense BLAS when C is dense enough for that to be faster."""
        if CT.nnz > _SPARSE_DENSITY_MAX * CT.shape[0] * CT.shape[1]:
            return (self.X @ CT.toarray().T).astype(np.float64)
        return np.hstack([CT @ XT for XT in self.XT_blocks]).T.astype(np.float64)

    def _dense_product(self, VT=None):
        VT = self.UT if VT is None else VT
        parts = self._blocks(lambda a, b: self.X @ VT[a:b].T, VT.shape[0])
        return np.hstack(parts).astype(np.float64)

    def _normalize_rows(self, start, stop):
        _divide_rows(self.UT[start:stop], _row_norms(self.UT[start:stop]))

    def _blocks(self, function, size):
        """``[function(start, stop)]`` over ``n_jobs`` contiguous blocks of
        ``range(size)``, run on the thread pool."""
        bounds = np.unique(np.linspace(0, size, self.n_jobs + 1).astype(int))
        return list(self.pool.map(function, bounds[:-1], bounds[1:]))


class _ProjectedLine:
    """The selected queries' objective at ``P_M(U - mu G / |G|)``, as a function of mu.

    ``P_M`` keeps the M largest magnitudes of each column (Eq. 17) and, with
    ``renormalize``, rescales the column to unit norm; alpha_q and beta_q (Eq. 8-9)
    are recounted at the projected point. ``mu`` is in units of |G|_F, so that the
    search range ``[0, |U|_F / 2]`` means the same at every step.

    Cheap form. Outside its support S_r, column r of U is zero, so an entry k outside
    moves to ``-mu g_k``: the only ones that can enter the support are the M of
    largest ``|g_k|`` outside S_r, found once per step. Each trial then selects the M
    largest of 2M candidates per column (not D), and since ``X u_r`` is known (Y), the
    projected point's ``X u_r' = Y_r - mu X[:, S_r] g_r[S_r] + X c_r``, where ``c_r``
    only has the entries that left or entered the support: ``X[:, S_r] g_r[S_r]`` is
    one sparse product per step and ``X c_r`` costs N per moved entry. The scores of
    the P selected queries, and their losses, follow in O(P N R).
    """

    def __init__(self, descent, problem, selected, rows, dF, Z, gradient_sq_norm):
        self.descent, self.problem = descent, problem
        self.selected, self.rows = selected, rows
        self.GT = descent._gradient_rows(rows, dF, Z)
        self.GT /= np.float32(np.sqrt(gradient_sq_norm))
        kept = descent.kept
        self.inside_values = descent.values.astype(np.float64)
        self.inside_gradient = np.take_along_axis(self.GT, kept, axis=1).astype(
            np.float64
        )
        self.support_gradient = descent.product(kept, self.inside_gradient)
        # Entries that may enter: all M largest |g| outside the support would be
        # exact, but few enter at the steps tried; start with fewer, and widen as
        # soon as a trial lets every candidate of some column in.
        self.n_outside_max = min(kept.shape[1], self.GT.shape[1] - kept.shape[1])
        self._set_outside(min(_ENTERING_CANDIDATES, self.n_outside_max))
        # |U|_F: unit columns with renormalisation, else as they are.
        self.max_step = 0.5 * float(np.sqrt(np.sum(self.inside_values**2)))

    def _set_outside(self, n_outside):
        """Candidates to enter: the ``n_outside`` largest |g| outside each support."""
        kept, GT = self.descent.kept, self.GT
        n_features = GT.shape[1]
        stride = max(1, n_features // _THRESHOLD_SAMPLE)

        def block(start, stop):
            magnitude = np.abs(GT[start:stop])
            np.put_along_axis(magnitude, kept[start:stop], -1.0, axis=1)
            # A threshold from a strided sample keeps about 4 n_outside entries per
            # row for the exact selection (the whole row when it keeps too few).
            sample = magnitude[:, ::stride]
            rank = min(sample.shape[1] - 1, (4 * n_outside) // stride)
            thresholds = -np.partition(-sample, rank, axis=1)[:, rank]
            outside = np.empty((stop - start, n_outside), dtype=np.int32)
            for r, row in enumerate(magnitude):
                candidates = np.flatnonzero(row >= thresholds[r])
                if candidates.size < n_outside:
                    candidates = np.arange(n_features)
                cut = candidates.size - n_outside
                top = np.argpartition(row[candidates], cut)[cut:]
                outside[r] = candidates[top]
            return outside

        self.outside = np.vstack(self.descent._blocks(block, kept.shape[0]))
        self.outside_gradient = np.take_along_axis(GT, self.outside, axis=1).astype(
            np.float64
        )

    def _candidates(self, mu):
        """Candidate values (R, M + n_outside) at mu and the mask of the M kept."""
        n_keep = self.inside_values.shape[1]
        while True:
            values = np.hstack(
                [
                    self.inside_values - mu * self.inside_gradient,
                    -mu * self.outside_gradient,
                ]
            )
            chosen = np.zeros(values.shape, dtype=bool)
            order = np.argpartition(-np.abs(values), n_keep - 1, axis=1)[:, :n_keep]
            np.put_along_axis(chosen, order, True, axis=1)
            n_outside = self.outside.shape[1]
            # If every candidate of a column entered, the next one might have too.
            if n_outside == self.n_outside_max or not np.any(
                chosen[:, n_keep:].all(axis=1)
            ):
                return values, chosen
            self._set_outside(min(2 * n_outside, self.n_outside_max))

    def projected_scores(self, mu):
        """Y' = X P_M(U - mu G) (N, R) float64, and the candidate values and mask."""
        descent = self.descent
        values, chosen = self._candidates(mu)
        n_keep = self.inside_values.shape[1]
        dropped = ~chosen[:, :n_keep]
        entered = chosen[:, n_keep:]
        out_rows, out_at = np.nonzero(dropped)
        in_rows, in_at = np.nonzero(entered)
        CT = sp.csr_array(
            (
                np.concatenate(
                    [-values[:, :n_keep][dropped], values[:, n_keep:][entered]]
                ).astype(np.float32),
                (
                    np.concatenate([out_rows, in_rows]),
                    np.concatenate(
                        [descent.kept[out_rows, out_at], self.outside[in_rows, in_at]]
                    ),
                ),
            ),
            shape=descent.UT.shape,
        )
        Y = descent.Y - mu * self.support_gradient
        if CT.nnz:
            Y += descent.sparse_rows_product(CT)
        if descent.renormalize:
            norms = np.sqrt(np.sum(np.where(chosen, values, 0.0) ** 2, axis=1))
            Y /= np.where(norms > 0.0, norms, 1.0)
        return Y, values, chosen

    def __call__(self, mu):
        Y, _, _ = self.projected_scores(mu)
        scores = Y[self.rows] @ Y.T
        return float(self.problem.losses_of_scores(scores, self.selected).sum())

    def move(self, mu):
        """Set the descent's U to ``P_M(U - mu G / |G|)`` and Y to X U (from the
        moved entries, or recomputed every ``_REFRESH_EVERY`` steps against drift)."""
        descent = self.descent
        Y, values, chosen = self.projected_scores(mu)
        n_outputs, n_keep = descent.kept.shape
        rows = np.hstack([descent.kept, self.outside])[chosen].reshape(n_outputs, n_keep)
        kept_values = values[chosen].reshape(n_outputs, n_keep)
        order = np.argsort(rows, axis=1)
        rows = np.take_along_axis(rows, order, axis=1).astype(np.int32)
        kept_values = np.take_along_axis(kept_values, order, axis=1)
        if descent.renormalize:
            norms = np.linalg.norm(kept_values, axis=1, keepdims=True)
            kept_values /= np.where(norms > 0.0, norms, 1.0)
        kept_values = kept_values.astype(np.float32)
        np.put_along_axis(descent.UT, descent.kept, 0.0, axis=1)
        np.put_along_axis(descent.UT, rows, kept_values, axis=1)
        descent.kept, descent.values = rows, kept_values
        descent.thresholds = np.abs(kept_values).min(axis=1)
        refresh = descent.n_steps % _REFRESH_EVERY == 0
        descent.Y = descent.product(rows, kept_values) if refresh else Y


def _l0_project(UT, n_keep, renormalize, previous=None):
    """Keep the ``n_keep`` largest |u| of each row of UT, in place (Eq. 17).

    UT : (r, D) float32, one column of U per row; previous : None or (r,) float32, the
    thresholds of the last projection. The threshold of Eq. 17 is the ``n_keep``-th
    largest magnitude of the row, found by selection (no sort). A gradient step moves
    it little, so when ``previous`` is given the selection only looks at the entries
    above half the previous threshold (falling back to the whole row when they are too
    few): far fewer than D at high sparsity. Ties at the threshold keep the lowest
    indices, so every row keeps exactly ``n_keep`` entries. With ``renormalize`` the
    kept values are scaled to unit L2 norm (rows that are all zero stay so).

    Returns the kept indices (r, n_keep) int32, increasing along each row, their
    values (r, n_keep) float32 and the thresholds (r,) float32.
    """
    n_outputs, n_features = UT.shape
    if previous is None:
        previous = np.zeros(n_outputs, dtype=np.float32)
    indices = np.empty((n_outputs, n_keep), dtype=np.int32)
    data = np.empty((n_outputs, n_keep), dtype=np.float32)
    thresholds = np.empty(n_outputs, dtype=np.float32)
    magnitude = np.empty(n_features, dtype=np.float32)  # one row: stays in cache
    for r in range(n_outputs):
        row = UT[r]
        np.abs(row, out=magnitude)
        candidates = np.flatnonzero(magnitude >= previous[r] / 2)
        if candidates.size < n_keep:
            candidates = np.arange(n_features)
        values = magnitude[candidates]
        cut = candidates.size - n_keep
        thresholds[r] = np.partition(values, cut)[cut]
        keep = candidates[values >= thresholds[r]]
        if keep.size > n_keep:
            above = candidates[values > thresholds[r]]
            tied = candidates[values == thresholds[r]][: n_keep - above.size]
            keep = np.sort(np.concatenate([above, tied]))
        values = row[keep]
        if renormalize:
            norm = np.linalg.norm(values)
            if norm > 0.0:
                values /= norm
        row[:] = 0.0
        row[keep] = values
        indices[r], data[r] = keep, values
    return indices, data, thresholds


def _row_pointers(n_rows, per_row):
    """CSR row pointers of a matrix with ``per_row`` stored entries in every row."""
    return np.arange(n_rows + 1, dtype=np.int64) * per_row


def _divide_rows(A, divisors):
    """``A[r] /= divisors[r]`` in place."""
    A /= divisors.astype(A.dtype)[:, None]


def _line_search(
    objective, value_at_zero, first_step, max_step=np.inf, rtol=_SEARCH_RTOL
):
    """Step ``0 <= mu <= max_step`` minimising ``objective(mu)`` by golden-section
    search [18].

    Brackets a minimum from ``first_step``: expands by the golden ratio while the
    objective decreases (up to ``max_step``), or, if the first step does not lower the
    objective below ``value_at_zero``, contracts towards 0 until one does; then
    golden-section search on the bracket to a relative width of ``rtol``. The
    objective is piecewise (a hinge starts or stops at each constraint crossing, the
    l0 projection switches entries) and need not be unimodal, so the best point
    evaluated is returned; 0 if none beats ``value_at_zero``.
    """
    best = [0.0, value_at_zero]

    def evaluate(mu):
        value = objective(mu)
        if value < best[1]:
            best[:] = [mu, value]
        return value

    middle = min(first_step, max_step / _GOLDEN)
    f_middle = evaluate(middle)
    if f_middle < value_at_zero:
        low, high = 0.0, min(middle * (1.0 + _GOLDEN), max_step)
        f_high = evaluate(high)
        for _ in range(_MAX_BRACKET_STEPS):
            if f_high >= f_middle or high >= max_step:
                break
            low, middle, f_middle = middle, high, f_high
            high = min(middle + _GOLDEN * (middle - low), max_step)
            f_high = evaluate(high)
    else:
        low, high = 0.0, middle
        for _ in range(_MAX_BRACKET_STEPS):
            middle = high / _GOLDEN
            if evaluate(middle) < value_at_zero:
                break
            high = middle
        else:
            return 0.0

    inner = 1.0 / _GOLDEN
    left, right = high - inner * (high - low), low + inner * (high - low)
    f_left, f_right = evaluate(left), evaluate(right)
    for _ in range(_MAX_SECTION_STEPS):
        if high - low <= rtol * high:
            break
        if f_left <= f_right:
            high, right, f_right = right, left, f_left
            left = high - inner * (high - low)
            f_left = evaluate(left)
        else:
            low, left, f_left = left, right, f_right
            right = low + inner * (high - low)
            f_right = evaluate(right)
    return best[0]


def _select_queries(losses, n_select, rng):
    """Indices of the P queries of a step (§IV-1): the P // 2 of largest loss, and the
    others drawn uniformly without replacement from the rest."""
    if n_select >= losses.size:
        return np.arange(losses.size)
    n_active = n_select // 2
    order = np.argsort(-losses, kind="stable")
    rest = np.sort(order[n_active:])
    drawn = rng.choice(rest, size=n_select - n_active, replace=False)
    return np.concatenate([order[:n_active], drawn])


def _query_rows(group_codes, queries):
    """Validated query rows (Q,) int: given, or the first row of each group."""
    n_images = group_codes.size
    if queries is None:
        rows = np.sort(np.unique(group_codes, return_index=True)[1])
    else:
        queries = np.asarray(queries)
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


def _row_norms(A):
    """L2 norm of each row of A (float32); 1 for all-zero rows so that they stay zero."""
    norms = np.linalg.norm(A, axis=1)
    norms[norms == 0.0] = 1.0
    return norms


def _is_int(value):
    return isinstance(value, Integral) and not isinstance(value, bool)


def _is_real(value):
    return (
        isinstance(value, Real) and not isinstance(value, bool) and np.isfinite(value)
    )
