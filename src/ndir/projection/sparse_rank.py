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

Layout. This module holds the estimator; the algorithm lives in private modules beside
it, each importing only those listed before it: ``_ranking`` (the ranking problem: the
query, positive, pivot and negative sets of Eq. 6, the loss of Eq. 7-9, the gradient
factors of Eq. 14, the query selection), ``_line_search`` (the objectives along the
step, dense and projected, and the golden-section search that picks mu_t) and
``_descent`` (the state of Algorithm 1: U, its l0 projection of Eq. 17, Y = X U, the
update, the threads, ``_REFRESH_EVERY``).
"""

import logging
from concurrent.futures import ThreadPoolExecutor
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, Options, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ndir import available_cpus
from ndir.encoding import l2_normalise_rows
from ndir.projection._descent import SPARSE_DENSITY_MAX, Descent, initial_components
from ndir.projection._ranking import RankingProblem, check_queries, select_queries
from ndir.projection.pca import PCAProjection
from ndir.projection.product import TransposedBlocks, float64_product, sparse_batch_product

logger = logging.getLogger(__name__)

#: Values of ``SparseRankProjector(line_search=...)``.
LINE_SEARCHES = ("projected", "dense")

# transform() goes through the sparse U (ndir.projection.product) for any batch when at
# most SPARSE_DENSITY_MAX of U is non-zero, through float64 BLAS otherwise: the path, and
# so each row's bits, must not depend on the batch (a row's projection does not change
# with its batch-mates). Up to that density the sparse product is the faster of the two
# batch-independent paths (docs/performance.md, "Batch projection"; benchmarks/peers.py).


#: Why a training stopped (``SparseRankProjector.stop_reason_``), worded for a figure's legend.
STOP_TOL = "objective below tol"
STOP_STALLED = "n_iter_no_change steps without a helpful step"
STOP_MAX_ITER = "max_iter steps"
STOP_CALLBACK = "the callback (flat or perfect training mAP)"
STOP_REASONS = (STOP_TOL, STOP_STALLED, STOP_MAX_ITER, STOP_CALLBACK)

#: The one table from the workflow's config to the estimator: each key of the config's
#: ``sparse`` section that sets a :class:`SparseRankProjector` parameter, and that
#: parameter. ``dims`` and ``sparsity`` are lists, the grid of cells (signature, R, tau):
#: a training gets one R and one tau (:func:`projector_params`). The run's top-level
#: ``seed`` is ``random_state``.
CONFIG_PARAMETERS = {
    "dims": "n_components",
    "sparsity": "sparsity",
    "max_iter": "max_iter",
    "queries_per_step": "n_queries_per_step",
    "margin": "margin",
    "tol": "tol",
    "n_iter_no_change": "n_iter_no_change",
    "renormalize": "renormalize",
    "line_search": "line_search",
    "eval_every": "callback_every",
}
#: Keys of the ``sparse`` section that are lists of cells (one value per training).
CONFIG_GRID = ("dims", "sparsity")
#: Keys of the ``sparse`` section that no estimator parameter takes: the cells of Figures
#: 2 and 3, and the workflow's stops on the training mAP (its callback's).
CONFIG_OTHERS = ("convergence_dim", "convergence_sparsity", "flat_map_evaluations", "stop_at_perfect_map")


def projector_params(settings, n_components, sparsity, seed):
    """Keyword arguments of :class:`SparseRankProjector` for one training: the values of
    the config's ``sparse`` section ``settings`` under the names of
    :data:`CONFIG_PARAMETERS`, with the cell's R (``n_components``) and tau
    (``sparsity``) and the run's ``seed`` as ``random_state``."""
    params = {name: settings[key] for key, name in CONFIG_PARAMETERS.items() if key not in CONFIG_GRID}
    return {**params, "n_components": n_components, "sparsity": sparsity, "random_state": seed}


def n_kept(sparsity, n_features):
    """M, the non-zeros each column of a projector keeps at sparsity tau (Eq. 18-19)."""
    return max(1, int(round((1.0 - sparsity) * n_features)))


def thresholded_components(components, sparsity, renormalize):
    """The projectors Algorithm 1 starts from, (D, R) float32 CSC: ``components`` (D, R),
    e.g. PCA's axes, with the :func:`n_kept` largest magnitudes of each column kept (the
    l0 projection of Eq. 17) and, with ``renormalize``, unit columns. The
    ``components_`` of ``SparseRankProjector(max_iter=0, init=components)`` fitted at
    that sparsity, without the ranking problem its fit sets up (the N x N Gram matrix):
    the "thresholded PCA, no learning" ablation."""
    components = np.asarray(components, dtype=np.float32)
    return initial_components(components, n_kept(sparsity, components.shape[0]), renormalize)


def project_components(components, X, n_jobs=1):
    """``X U`` (n, R) float32 through a projector U, ``components`` (D, R) scipy sparse
    with the same number M of stored entries in each column (a learned projector, or
    its start :func:`thresholded_components`), as :meth:`SparseRankProjector.transform`
    computes it: through the stored entries (:func:`~ndir.projection.product.sparse_batch_product`
    on ``n_jobs`` threads) when M / D is at most ``SPARSE_DENSITY_MAX``, by float64 BLAS
    (:func:`~ndir.projection.product.float64_product`) above. Either way a row's result
    depends neither on its batch-mates nor on the threads. ``X``: (n, D) float32, or its
    :class:`~ndir.projection.product.TransposedBlocks`."""
    n_features, n_components = components.shape
    if components.nnz / n_components / n_features <= SPARSE_DENSITY_MAX:
        return sparse_batch_product(components, X, n_jobs)
    signatures = X.X if isinstance(X, TransposedBlocks) else X
    return float64_product(signatures, components.astype(np.float64).toarray())


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
    n_iter_no_change : int or None, default 50
        Stop after this many consecutive steps whose line search found no step size
        that lowers the selected queries' objective (mu = 0: U did not move, for as
        many draws of the queries); None never stops for that. At Holidays scale a
        training can sit at an objective of 4e-12, above ``tol`` but at rounding level,
        for the remaining 1,700 of its 2,000 steps.
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
        A callback that returns True ends the training there: the fitted state is the
        one it was shown (the state of ``max_iter = iteration``).
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
    stop_reason_ : str
        Why the training stopped, one of :data:`STOP_REASONS`.
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

    _parameter_constraints = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "sparsity": [Interval(Real, 0, 1, closed="left")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "n_queries_per_step": [Interval(Integral, 1, None, closed="left")],
        "margin": [Interval(Real, 0, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left"), None],
        "init": [StrOptions({"pca", "random"}), "array-like"],
        "renormalize": ["boolean"],
        "line_search": [StrOptions(set(LINE_SEARCHES))],
        "normalize": ["boolean"],
        "callback": [callable, None],
        "callback_every": [Interval(Integral, 1, None, closed="left")],
        "n_jobs": [Interval(Integral, 1, None, closed="left"), Options(Integral, {-1}), None],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_components,
        sparsity=0.99,
        max_iter=2000,
        n_queries_per_step=20,
        margin=1e-2,
        tol=1e-12,
        n_iter_no_change=50,
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
        self.n_iter_no_change = n_iter_no_change
        self.init = init
        self.renormalize = renormalize
        self.line_search = line_search
        self.normalize = normalize
        self.callback = callback
        self.callback_every = callback_every
        self.n_jobs = n_jobs
        self.random_state = random_state

    def fit(self, X, y, queries=None, transposed=None):
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
        transposed : None or :class:`~ndir.projection.product.TransposedBlocks` of X
            Blocks of X^T the caller keeps anyway (to project X through the projectors
            of a callback): the training's sparse products read them rather than a
            copy of their own (61 MiB at N = 389, D = 40,960), with the same results.

        Returns
        -------
        self
        """
        self._validate_params()
        X, groups = validate_data(self, X, y, dtype=np.float32, ensure_min_samples=2)
        if transposed is not None and (transposed.shape != X.shape or not np.array_equal(transposed.X, X)):
            raise ValueError(
                f"transposed holds other signatures ({transposed.shape}) than X {X.shape}; pass TransposedBlocks(X)"
            )
        n_images, n_features = X.shape
        if self.n_components > n_features:
            raise ValueError(f"n_components={self.n_components} exceeds the signature dimension D={n_features}")
        group_codes = np.unique(groups, return_inverse=True)[1]
        query_rows = check_queries(group_codes, queries)
        problem = RankingProblem(X, group_codes, query_rows, self.margin)
        n_keep = n_kept(self.sparsity, n_features)
        rng = check_random_state(self.random_state)
        n_jobs = self._n_threads()

        self.n_nonzero_ = n_keep
        self.query_rows_ = query_rows
        self.pivots_ = problem.pivots
        objective, unprojected, step_sizes = [], [], []
        with ThreadPoolExecutor(n_jobs) as pool:
            descent = Descent(
                X,
                problem.gram,
                self._initial_components(X, rng),
                n_keep,
                self.renormalize,
                self.line_search,
                pool,
                n_jobs,
                None if transposed is None else transposed.blocks(),
            )
            for step in range(self.max_iter + 1):
                losses = descent.losses(problem)
                objective.append(float(losses.sum()))
                stop = self._stop_reason(objective[-1], step, step_sizes)
                if self.callback is not None and (stop or step % self.callback_every == 0):
                    self._set_state(descent, objective, unprojected, step_sizes)
                    if self.callback(step, self):
                        stop = stop or STOP_CALLBACK
                if stop:
                    self.stop_reason_ = stop
                    break
                selected = select_queries(losses, self.n_queries_per_step, rng)
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
        """Project signatures: ``Y = X U`` (Eq. 3), each row independently of the others.

        Through the sparse U (nnz multiply-adds per row,
        :func:`ndir.projection.product.sparse_batch_product` on ``n_jobs`` threads)
        when at most 12 % of U is non-zero (about 4x float32 dense BLAS at 1 %),
        otherwise through dense BLAS summed in float64
        (:func:`ndir.projection.product.float64_product`). Either way a row's result
        does not depend on the other rows of the batch, their number or order, nor on
        the threads (scikit-learn's ``check_methods_sample_order_invariance`` and
        ``check_methods_subset_invariance``): float32 BLAS did, with the OpenBLAS kernel
        of the CPU.

        Parameters
        ----------
        X : (n, D) float32 array, or :class:`ndir.projection.product.TransposedBlocks`
            of one (for signatures projected again and again, as by a training's
            history: the sparse product then reads them without transposing them).

        Returns
        -------
        (n, R) float32 array
            ``X U``; rows scaled to unit L2 norm when ``normalize`` (zero rows stay
            zero).
        """
        check_is_fitted(self)
        if isinstance(X, TransposedBlocks):
            if X.shape[1] != self.n_features_in_:
                raise ValueError(
                    f"X has {X.shape[1]} features, but SparseRankProjector is expecting "
                    f"{self.n_features_in_} features as input"
                )
        else:
            X = validate_data(self, X, dtype=np.float32, reset=False)
        Y = project_components(self.components_, X, self._n_threads())
        if self.normalize:
            Y = l2_normalise_rows(Y)
        return Y

    def _n_threads(self):
        """Threads of fit and transform: ``n_jobs``, or every core this process may use."""
        return available_cpus() if self.n_jobs in (None, -1) else self.n_jobs

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.transformer_tags.preserves_dtype = ["float32"]
        return tags

    def _stop_reason(self, objective, step, step_sizes):
        """Which of :data:`STOP_REASONS` ends the training after ``step`` steps, or None."""
        n = self.n_iter_no_change
        if objective < self.tol or objective == 0.0:  # a zero objective has a zero gradient
            return STOP_TOL
        if n is not None and len(step_sizes) >= n and not any(step_sizes[-n:]):
            return STOP_STALLED
        if step == self.max_iter:
            return STOP_MAX_ITER
        return None

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
