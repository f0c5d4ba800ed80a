"""State and steps of Algorithm 1 (Negrel et al. 2014, §IV): the projectors U, their l0
projection (Eq. 17) and the projection ``Y = X U`` of the training set.

- :class:`Descent`: U (as U^T, dense float32, zeros included), the support of each
  column when sparse, and ``Y = X U`` (float64); without sparsity U is held as
  ``U_0 diag(s) + X^T A`` instead (below). :meth:`Descent.step` is one iteration: the
  selected queries' gradient (Eq. 14, :func:`~._ranking.gradient`), the learning rate
  by golden-section search on the dense or the projected objective
  (``ndir.projection._line_search``), the update ``U <- U - mu G`` (Eq. 15 with the
  descent sign), the l0 projection and, optionally, unit columns; then Y again.
- :func:`_l0_project`: keeps the M largest magnitudes of each column (Eq. 17-19).

Cost of a step (N images, P queries, R outputs, D dimensions). G = X^T B (B (N, R), Eq.
14) is never formed for the update: ``X_S^T Z + (dF X)^T Y_S`` is applied by one in-place
GEMM, O(P N D + P D R), dF X in O(nnz(dF) D) once few constraints are violated, and ``X G
= K B`` comes from the Gram matrix. The l0 projection is a selection per column (no
sort). Y is recomputed from the sparse U in O(N nnz(U)), reading blocks of X^T that stay
in cache, or by dense BLAS above ``SPARSE_DENSITY_MAX`` non-zeros. After a projected
step Y is updated from the step instead, and recomputed from U every ``_REFRESH_EVERY``
steps against float32 drift. Without sparsity no step reads X or U: every update adds
``-mu X^T B`` to U and rescales its columns, so U stays ``U_0 diag(s) + X^T A`` (the
start U_0, s (R,), A (N, R), float64), a step updates s, A and Y = X U_0 diag(s) + K A
in O(N R) given K B, and U is formed, ``diag(s) U_0^T + A^T X``, only when asked for
(:meth:`Descent.components`). The projected search reads G at the supports and at the largest
entries outside them, which :meth:`Descent.gradient_entries` takes from G^T formed
``_FEATURE_BLOCK`` features at a time (O(P D R), never stored whole).

Kernel independence: the products whose bits used to change with the OpenBLAS kernel
(Haswell against SkylakeX), the gradient's factors and G^T's entries, the norms of the
l0 projection and the dense products of moved entries, are summed in float64 and
rounded to float32 once; with the Gram matrix and the PCA start summed in float64 too,
a training's steps are bit-identical across kernels but for a float64 sum that falls on
a float32 rounding tie (``benchmarks/table2_spread.py`` measures what is left). The
dense search's update under sparsity (:meth:`Descent._update`), its gradient factors
among them, dense ``X U``, and U formed from ``U_0 diag(s) + X^T A`` without sparsity
stay float32 BLAS.
About a quarter more time per step at D = 40,960, R = 256, tau = 0.9.

Threads: BLAS runs single-threaded inside a step (``threadpoolctl``); the large
products, the l0 projection and the sparse products are split into ``n_jobs`` blocks run
on a thread pool (:meth:`Descent.blocks`).
"""

import numpy as np
import scipy.sparse as sp
from scipy.linalg.blas import sgemm
from threadpoolctl import ThreadpoolController

from ndir.projection._line_search import GOLDEN, ProjectedLine, golden_section_search, line_objective
from ndir.projection._ranking import gradient
from ndir.projection.product import float64_product

# The projected search's objective is piecewise (entries switch in and out of the
# support) and each trial costs a product with the moved entries: a coarser bracket.
_PROJECTED_RTOL = 3e-2
# Its first trial, as a fraction of the largest step it tries (|U|_F / 2), and after a
# step that moved U, as a multiple of that step (capped by the first): a search that
# starts at the top of its range scans down by the golden ratio, about 10 trials of 23
# a step on the default run's FV-256 at tau = 0.9, where steps are 0.1 % of the range.
# The factor leaves room to grow: the bracket expands from there while the objective
# falls, so a run of tiny steps cannot hold the next one down (the last step itself as
# the first trial could: ef15ecb).
_PROJECTED_FIRST_STEP = 1.0 / GOLDEN
_PROJECTED_WARM_START = GOLDEN**2
# Without sparsity (or with the projected search) Y is updated from the step rather
# than recomputed; recompute it as X U this often so that it cannot drift away from
# the float32 U by rounding.
_REFRESH_EVERY = 100
# dF X goes through dF's non-zeros (a CSR product) when they are at most this fraction
# of dF: on the Holidays-scale grid's FV-512 at tau = 0.99, R = 32, 1.7 % on average
# (union of the queries' images: 28 %), 33 against 127 ms a step on one thread; above
# about 13 % the dense product is faster (measured on random dF, D = 81,920, N = 852).
_SPARSE_LOSS_DENSITY = 0.1
# Otherwise it gathers the rows of X that the violated constraints involve when they are
# at most this fraction of the training set, and multiplies the whole X otherwise.
_GATHER_ROWS_MAX = 0.25
# Fraction of non-zeros of U above which dense BLAS computes X U faster than the
# threaded sparse product (benchmarks/bench_sparse_rank.py measures both).
# SparseRankProjector.transform uses it too.
SPARSE_DENSITY_MAX = 0.12
# Images per block of X^T in the sparse X U: the block of Y^T a thread accumulates into,
# (R / n_jobs) x 256 float32, then stays in a 512 KiB L2 cache for R = 256 on 2 threads
# (0.13 s instead of 0.16 s for all 745 images at once, tau = 0.9, D = 81,920).
_SPARSE_IMAGES = 256
# X C gathers the rows of the blocks of X^T that C's entries read when they are at most
# this fraction of D (on real trials, FV-512: faster below about 10k of 81,920 rows,
# slower above 10k).
_GATHER_FEATURES_MAX = 1 / 8
# Features per block of G^T formed and scanned at once by the projected search: a
# (R, 1024) float32 block is 1 MiB at R = 256.
_FEATURE_BLOCK = 1024
# Features per block of dF X summed in float64: X's float64 copy of a (n, 256) block
# stays in L2 cache (0.75 MiB at n = 745), where a (n, 1024) one does not (the
# benchmark's tau = 0.99 step from random U, dense dF, 20 x 700 rows of X x 81,920
# features, one thread, AMD EPYC: 0.23 against 0.28 s; the same bits).
_LOSS_FEATURE_BLOCK = 256


class Descent:
    """State of Algorithm 1: the projectors and their projection of the training set.

    X : (N, D) float32; gram : (N, N) float64 = X X^T; U : (D, R) float32 initial
    projectors; n_keep : M; renormalize : unit columns after each update;
    line_search : "projected" or "dense" (see ``SparseRankProjector``); XT_blocks :
    None, or blocks of X^T, (D, rows) float32 C-contiguous in order of rows, that the
    caller already holds (:meth:`~.product.TransposedBlocks.blocks`): the sparse
    products then read them instead of a copy of their own (the same bits: each
    output sums over the features in the same order whatever the blocks).
    ``UT`` (R, D) float32 holds U transposed, zeros included (a column of U per
    contiguous row, for the per-column selection and the in-place update); ``Y``
    (N, R) float64 is X U; when sparse, ``kept`` and ``values`` (R, M) are the row
    indices and values of the entries of each column of U. Without sparsity ``UT``
    holds the start U_0^T and U = U_0 diag(``scales``) + X^T ``coefficients`` (s (R,),
    A (N, R) float64; ``start_Y`` = X U_0).

    The descent is the only writer of this state: the projected search
    (:class:`~._line_search.ProjectedLine`) reads it and proposes the point its step
    lands on, which :meth:`_commit` makes current.

    BLAS runs single-threaded inside (``threadpoolctl``): the many small products of a
    step are slowed down, not sped up, by BLAS threads, and the large ones are split
    by hand into ``n_jobs`` blocks run on ``pool``, which also spreads the l0
    projection and the sparse product.
    """

    def __init__(self, X, gram, U, n_keep, renormalize, line_search, pool, n_jobs, XT_blocks=None):
        self.X, self.gram = X, gram
        self.UT = np.ascontiguousarray(U.T, dtype=np.float32)
        self.n_keep, self.renormalize = n_keep, renormalize
        self.pool, self.n_jobs = pool, n_jobs
        self.blas = ThreadpoolController()
        n_outputs, n_features = self.UT.shape
        self.sparse = n_keep < n_features
        self.projected = self.sparse and line_search == "projected"
        self.sparse_product = self.sparse and n_keep / n_features <= SPARSE_DENSITY_MAX
        self.n_steps = 0
        # Entering candidates per column the last projected search ended with: the next
        # search starts at half of it, since each widening builds a new candidate set and
        # may scan G^T again (on real signatures at tau = 0.9 a search widened from the
        # first width about three times).
        self.entering_width = 0
        # The projected search's last step (in units of |G|_F; 0: none moved U yet).
        self.last_step = 0.0
        self._support_blocks = None
        with self.blas.limit(limits=1, user_api="blas"):
            if self.sparse:
                # The sparse X U reads X^T one row per stored entry of U, in blocks of
                # images (contiguous, the caller's or copies) so that the rows of Y^T it
                # accumulates into stay in cache; the projected search reads the rows of
                # X^T of the entries that its trial steps move in or out of the support.
                if self.sparse_product or self.projected:
                    self.XT_blocks = XT_blocks or [
                        np.ascontiguousarray(X[start : start + _SPARSE_IMAGES].T)
                        for start in range(0, X.shape[0], _SPARSE_IMAGES)
                    ]
                self.thresholds = None
                self._project()
            else:
                if renormalize:
                    self.blocks(self._normalize_rows, n_outputs)
                self.Y = self._dense_product()
                # Every dense step adds a multiple of G = X^T B to U: U stays
                # U_0 diag(s) + X^T A, with U_0 = UT^T the start (never changed).
                self.start_Y = self.Y.copy()
                self.start_sq_norms = np.einsum("rd,rd->r", self.UT, self.UT, dtype=np.float64)
                self.scales = np.ones(n_outputs)
                self.coefficients = np.zeros((X.shape[0], n_outputs))

    def step(self, problem, selected):
        """One iteration of Algorithm 1 on the queries ``selected``.

        Returns mu_t (for the gradient of Eq. 14) and the objective over all queries
        at ``U - mu_t G``, before the l0 projection.
        """
        with self.blas.limit(limits=1, user_api="blas"):
            return self._step(problem, selected)

    def losses(self, problem):
        """f_q of every query at the current U (Eq. 7), (Q,) float64: a small product,
        run single-threaded like the step's (BLAS threads only wait for each other on
        it, 7 against 3 ms for 250 queries at R = 32 beside another busy process), so
        that its bits do not depend on the number of cores either."""
        with self.blas.limit(limits=1, user_api="blas"):
            return problem.losses(self.Y)

    def components(self):
        """U as a (D, R) float32 CSC matrix with exactly M stored entries per column."""
        if self.sparse:
            return stored_components(self.kept, self.values, self.UT.shape[1])
        return dense_components(self._span_components())

    def first_trial(self, max_step):
        """The projected search's first step: ``_PROJECTED_WARM_START`` times the last
        step that moved U, at most ``max_step * _PROJECTED_FIRST_STEP`` (the top of the
        range, where every search starts before U first moves and after a step of 0)."""
        first = max_step * _PROJECTED_FIRST_STEP
        if self.last_step > 0.0:
            return min(first, _PROJECTED_WARM_START * self.last_step)
        return first

    def refresh_due(self):
        """Whether the current step recomputes Y as X U rather than updating it from
        the step: every ``_REFRESH_EVERY`` steps, against float32 drift."""
        return self.n_steps % _REFRESH_EVERY == 0

    def _step(self, problem, selected):
        self.n_steps += 1
        rows = problem.query_rows[selected]
        scores, losses, dF, Z, B, weights = gradient(problem, self.Y, selected)
        H = self.gram @ B  # X G
        gradient_sq_norm = float(np.vdot(B, H))  # |G|^2 = tr(B^T K B)
        if losses.sum() <= 0.0 or gradient_sq_norm <= 0.0:
            return 0.0, float(problem.losses(self.Y).sum())
        if self.projected:
            line = ProjectedLine(self, problem, selected, rows, dF, Z, gradient_sq_norm)
            step = golden_section_search(
                line,
                float(losses.sum()),
                self.first_trial(line.max_step),
                line.max_step,
                _PROJECTED_RTOL,
            )
            self.last_step = step
            self.entering_width = line.n_outside
            mu = step / np.sqrt(gradient_sq_norm)
            unprojected = float(problem.losses(self.Y - mu * H).sum())
            if step > 0.0:
                self._commit(line.proposal(step))
            return mu, unprojected
        objective = line_objective(problem, selected, scores, self.Y, H, weights)
        # First trial: the step that would zero a linear model of the objective.
        mu = golden_section_search(objective, float(losses.sum()), losses.sum() / gradient_sq_norm)
        unprojected = float(problem.losses(self.Y - mu * H).sum())
        if mu == 0.0:
            return 0.0, unprojected
        if self.sparse:
            self._update(mu, rows, dF, Z)
            self._project()
        else:
            self._move_in_span(mu, B, H)
        return mu, unprojected

    def _move_in_span(self, mu, B, H):
        """U <- U - mu G without sparsity, in O(N R) (O(N^2 R) on refresh steps), U
        never formed: G = X^T B, so A <- A - mu B and Y <- Y - mu K B (H = K B). With
        renormalize each column is then divided by |u_r - mu g_r|, from |u_r| = 1,
        u_r.g_r = (Y^T B)_rr and |g_r|^2 = (B^T K B)_rr. Every ``_REFRESH_EVERY`` steps
        Y and the norms are recomputed from s and A (:meth:`_refresh_span`)."""
        if self.renormalize:
            norms = np.sqrt(1.0 - 2.0 * mu * np.einsum("nr,nr->r", self.Y, B) + mu**2 * np.einsum("nr,nr->r", B, H))
        self.coefficients -= mu * B
        self.Y = self.Y - mu * H
        if self.renormalize:
            self._rescale_span(norms)
        if self.refresh_due():
            self._refresh_span()

    def _rescale_span(self, norms):
        """Divide column r of U = U_0 diag(s) + X^T A, and of Y, by ``norms[r]``."""
        self.scales /= norms
        self.coefficients /= norms
        self.Y /= norms

    def _refresh_span(self):
        """Y = X U_0 diag(s) + K A and, with renormalize, unit columns from
        |u_r|^2 = s_r^2 |u0_r|^2 + 2 s_r (X u0_r).a_r + a_r^T K a_r, all in float64:
        what the steps' updates of Y and of the norms drift from by rounding."""
        KA = self.gram @ self.coefficients
        self.Y = self.start_Y * self.scales + KA
        if self.renormalize:
            sq_norms = (
                self.scales**2 * self.start_sq_norms
                + 2.0 * self.scales * np.einsum("nr,nr->r", self.start_Y, self.coefficients)
                + np.einsum("nr,nr->r", self.coefficients, KA)
            )
            norms = np.sqrt(np.maximum(sq_norms, 0.0))
            norms[norms == 0.0] = 1.0  # a zero column stays zero
            self._rescale_span(norms)

    def _span_components(self):
        """U^T (R, D) float32 = diag(s) U_0^T + A^T X, by single-threaded float32 BLAS
        over blocks of ``_FEATURE_BLOCK`` features, so that its bits depend neither on
        the number of threads nor on the pool (shut down when a fit sets its final state)."""
        UT = np.empty_like(self.UT)
        AT = self.coefficients.T.astype(np.float32)
        scales = self.scales.astype(np.float32)[:, None]
        with self.blas.limit(limits=1, user_api="blas"):
            for start in range(0, UT.shape[1], _FEATURE_BLOCK):
                block = slice(start, start + _FEATURE_BLOCK)
                UT[:, block] = AT @ self.X[:, block]
                UT[:, block] += scales * self.UT[:, block]
        return UT

    def _commit(self, proposal):
        """Make the projected search's :class:`~._line_search.Proposal` the current
        point: U^T in place, the supports, their thresholds, and Y (the proposal's, or
        recomputed as X U when :meth:`refresh_due`, against drift)."""
        n_outputs, n_features = self.UT.shape
        # Through flat indices (put_along_axis is 10x slower here).
        UT = self.UT.reshape(-1)
        offsets = np.arange(n_outputs)[:, None] * n_features
        UT[(offsets + self.kept).ravel()] = 0.0
        UT[(offsets + proposal.kept).ravel()] = proposal.values.ravel()
        self.kept, self.values = proposal.kept, proposal.values
        self.thresholds = np.abs(proposal.values).min(axis=1)
        self.Y = self.product(proposal.kept, proposal.values) if self.refresh_due() else proposal.Y

    def gradient_factors(self, rows, dF, Z, dtype=np.float64):
        """G = left^T right (Eq. 14): left (2P, D) = [X_S; dF X], right (2P, R), Fortran
        order, = [Z; Y_S], both of ``dtype``.

        float64 for the products that read them (:meth:`gradient_entries`,
        :meth:`gradient_sample`), with dF X summed in float64 and rounded to float32
        once: summed in float32 by BLAS, G's last bits changed with the OpenBLAS kernel,
        and with them which entries the l0 projection kept. float32 for the dense
        search's update under sparsity (:meth:`_update`), whose float32 GEMM depends on
        the kernel anyway: dF X by float32 BLAS, without converting X to float64.
        """
        left = np.empty((2 * rows.size, self.X.shape[1]), dtype=dtype)
        left[: rows.size] = self.X[rows]
        weights, used = _loss_weights(dF)
        weights = weights.astype(dtype, copy=False)
        self.blocks(lambda a, b: self._loss_rows(weights, used, left[rows.size :], a, b), left.shape[1])
        right = np.asfortranarray(np.vstack([Z, self.Y[rows]]), dtype=dtype)
        return left, right

    def _update(self, mu, rows, dF, Z):
        """U <- U - mu G in place (Eq. 15 for descent), by float32 BLAS: the dense
        search's update under sparsity, whose bits depend on the BLAS kernel (the
        projected search's step is committed by :meth:`_commit` instead, a step without
        sparsity by :meth:`_move_in_span`)."""
        left, right = self.gradient_factors(rows, dF, Z, np.float32)
        self.blocks(
            lambda a, b: sgemm(-mu, left.T, right[:, a:b], beta=1.0, c=self.UT[a:b].T, overwrite_c=True),
            self.UT.shape[0],
        )

    def gradient_entries(self, left, right, thresholds):
        """Entries of G^T (R, D) that the projected search reads, without storing G^T.

        G^T is formed ``_FEATURE_BLOCK`` features at a time (a block that stays in
        cache; blocks run on the thread pool) and each block is scanned at once for
        the entries of the supports and for the entries outside them whose magnitude
        reaches the column's threshold. Blocks have a fixed width, so the values do
        not depend on the number of threads.

        left, right : the factors of G from :meth:`gradient_factors`; thresholds : (R,)
        float32 >= 0, per column of U; ``inf`` skips a column.

        Returns ``inside`` (R, M) float32, G at the support (``kept``), and the entries
        outside the supports with ``|g| >= thresholds``: ``outside_rows``,
        ``outside_columns`` (int32) and ``outside_values`` (float32), ordered by feature
        block, then by column of U (row of G^T), then by feature.
        """
        n_outputs, n_features = self.UT.shape
        n_keep = self.kept.shape[1]
        by_block, block_bounds = self._support_by_block()
        inside = np.empty(n_outputs * n_keep, dtype=np.float32)
        column_thresholds = thresholds[:, None]

        def scan(block):
            start = block * _FEATURE_BLOCK
            stop = min(start + _FEATURE_BLOCK, n_features)
            # (R, w) C-contiguous, summed in float64 (see gradient_factors).
            GT = (right.T @ left[:, start:stop]).astype(np.float32)
            flat = by_block[block_bounds[block] : block_bounds[block + 1]]
            support_rows, support_at = flat // n_keep, self.kept.ravel()[flat] - start
            inside[flat] = GT[support_rows, support_at]
            magnitude = np.abs(GT)
            magnitude[support_rows, support_at] = -1.0
            # flatnonzero then divmod: 6x faster than a 2-d nonzero on a (256, 1024) mask.
            hit_rows, hit_at = np.divmod(np.flatnonzero(magnitude >= column_thresholds), stop - start)
            # int32 indices: the pool of entries can hold most of G^T (FV-256, tau = 0.9:
            # 34k of 41k features per column), 12 bytes an entry against 20 with int64.
            return hit_rows.astype(np.int32), (hit_at + start).astype(np.int32), GT[hit_rows, hit_at]

        parts = list(self.pool.map(scan, range(block_bounds.size - 1)))
        outside_rows, outside_columns, outside_values = (np.concatenate(part) for part in zip(*parts))
        return (
            inside.reshape(n_outputs, n_keep),
            outside_rows,
            outside_columns,
            outside_values,
        )

    def _support_by_block(self):
        """The supports' entries (flat indices into ``kept``) grouped by feature block
        (a radix sort of int16), and each block's bounds in that order; computed once
        per support, for the scans of a step."""
        if self._support_blocks is None or self._support_blocks[0] is not self.kept:
            n_features = self.UT.shape[1]
            block_of = (self.kept // _FEATURE_BLOCK).astype(np.int16).ravel()
            by_block = np.argsort(block_of, kind="stable")
            block_bounds = np.searchsorted(block_of[by_block], np.arange(-(-n_features // _FEATURE_BLOCK) + 1))
            self._support_blocks = self.kept, by_block, block_bounds
        return self._support_blocks[1:]

    def gradient_sample(self, left, right, stride):
        """|G^T| (R, ceil(D / stride)) float32 at every ``stride``-th feature, -1 on
        the supports: a cheap look at each column's distribution of |g|."""
        magnitude = np.abs(right.T @ left[:, ::stride]).astype(np.float32)
        on_sample = self.kept % stride == 0
        magnitude[np.nonzero(on_sample)[0], self.kept[on_sample] // stride] = -1.0
        return magnitude

    def _loss_rows(self, weights, used, out, start, stop):
        """``out[:, start:stop] = (dF X)[:, start:stop]`` for dF's ``weights`` on the rows
        ``used`` of X (:func:`_loss_weights`): into a float64 ``out``, summed in float64
        ``_LOSS_FEATURE_BLOCK`` features at a time and rounded to float32; into a float32 one
        (float32 ``weights``), by one float32 product."""
        if out.dtype == np.float32:
            out[:, start:stop] = weights @ self.X[used, start:stop]
            return
        # dF (P, n) times a block of X's columns in float64 (n, w): a third of the time
        # of converting the strided rows of X^T (FV-256: 24 against 73 ms a step), and
        # the same bits on the 53 trainings of the default run.
        for first in range(start, stop, _LOSS_FEATURE_BLOCK):
            last = min(first + _LOSS_FEATURE_BLOCK, stop)
            out[:, first:last] = (weights @ self.X[used, first:last].astype(np.float64)).astype(np.float32)

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

        kept, values, thresholds = zip(*self.blocks(block, self.UT.shape[0]))
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

        return np.vstack(self.blocks(block, kept.shape[0])).T.astype(np.float64)

    def sparse_rows_product(self, CT):
        """X C (N, R) float64 for a scipy sparse C^T (R, D): O(N nnz(C)) through the
        blocks of X^T, or dense BLAS when C is dense enough for that to be faster.

        Through C^T in CSC, as :meth:`product`: the rows of X^T are read once each, in
        order, into a block of Y^T that stays in cache, where CSR reads a row of X^T
        per entry, in a different order for each row of C^T. Each output sums its
        terms in increasing feature order either way, so the bits are the same; on the
        moved entries of real trials (FV-512, R = 256, tau = 0.9, 1k-190k entries)
        2.2x faster (1.33 against 2.86 s for 36 trials).

        When at most ``_GATHER_FEATURES_MAX`` of C's rows have entries, only they, and
        those rows of each block of X^T, take part: the product loops over every
        column of C^T, and a trial at high sparsity moves a few hundred entries of D =
        81,920 (Holidays-scale FV-512, R = 32, tau = 0.99: 3.15 against 1.22 ms a
        trial; the same bits: the same terms in the same order)."""
        if CT.nnz > SPARSE_DENSITY_MAX * CT.shape[0] * CT.shape[1]:
            return float64_product(self.X, CT.toarray().T).astype(np.float64)
        CT = CT.tocsc()
        features = np.flatnonzero(np.diff(CT.indptr))
        if features.size > _GATHER_FEATURES_MAX * CT.shape[1]:
            return np.hstack([CT @ XT for XT in self.XT_blocks]).T.astype(np.float64)
        # The non-empty columns' entries are contiguous: their starts, then the end.
        moved = sp.csc_array(
            (CT.data, CT.indices, np.append(CT.indptr[features], CT.indptr[-1])),
            shape=(CT.shape[0], features.size),
        )
        return np.hstack([moved @ XT[features] for XT in self.XT_blocks]).T.astype(np.float64)

    def _dense_product(self, VT=None):
        VT = self.UT if VT is None else VT
        parts = self.blocks(lambda a, b: self.X @ VT[a:b].T, VT.shape[0])
        return np.hstack(parts).astype(np.float64)

    def _normalize_rows(self, start, stop):
        _divide_rows(self.UT[start:stop], _row_norms(self.UT[start:stop]))

    def blocks(self, function, size):
        """``[function(start, stop)]`` over ``n_jobs`` contiguous blocks of
        ``range(size)``, run on the thread pool."""
        bounds = np.unique(np.linspace(0, size, self.n_jobs + 1).astype(int))
        return list(self.pool.map(function, bounds[:-1], bounds[1:]))


def _loss_weights(dF):
    """dF (P, N) float64 as the factor of dF X: its columns with a non-zero and the rows
    of X they read (an index array, or all rows).

    Only the rows of X that the violated constraints involve are read when they are
    few. dF's non-zeros are few once U ranks well (each query violates a few of its
    constraints): at most ``_SPARSE_LOSS_DENSITY`` of dF, the factor is a CSR array
    and each row of dF X sums its non-zero terms in increasing image order (scipy's
    product, no BLAS: the same bits on every machine); otherwise a dense array for
    float64 BLAS, whose bits only differ from these at float32 rounding ties."""
    used = np.flatnonzero(np.any(dF != 0.0, axis=0))
    if np.count_nonzero(dF) <= _SPARSE_LOSS_DENSITY * dF.size:
        return sp.csr_array(dF[:, used]), used
    if used.size > _GATHER_ROWS_MAX * dF.shape[1]:
        used = slice(None)
    return dF[:, used], used


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
            # In float64: float32's norm of a 1-d array is BLAS's snrm2, whose last bit,
            # and so every kept value of the column, changed with the OpenBLAS kernel.
            norm = np.linalg.norm(values.astype(np.float64))
            if norm > 0.0:
                values /= norm
        row[:] = 0.0
        row[keep] = values
        indices[r], data[r] = keep, values
    return indices, data, thresholds


def initial_components(U, n_keep, renormalize):
    """The (D, R) float32 CSC U that a :class:`Descent` starts from, without its ranking
    problem: each column of U (D, R) with its ``n_keep`` largest magnitudes kept
    (:func:`_l0_project`), or all of them when ``n_keep`` is D, unit columns with
    ``renormalize``; the same values as :meth:`Descent.components` right after
    ``Descent(...)``."""
    UT = np.array(U.T, dtype=np.float32, order="C")
    if n_keep < UT.shape[1]:
        kept, values, _ = _l0_project(UT, n_keep, renormalize)
        return stored_components(kept, values, UT.shape[1])
    if renormalize:
        _divide_rows(UT, _row_norms(UT))
    return dense_components(UT)


def stored_components(kept, values, n_features):
    """The (D, R) float32 CSC U whose column r holds ``values[r]`` at rows ``kept[r]``."""
    n_outputs, n_keep = kept.shape
    return sp.csr_array(
        (values.ravel(), kept.ravel(), _row_pointers(n_outputs, n_keep)), shape=(n_outputs, n_features)
    ).T.tocsc()


def dense_components(UT):
    """The (D, R) float32 CSC U of UT (R, D), every entry stored."""
    n_outputs, n_features = UT.shape
    indices = np.tile(np.arange(n_features, dtype=np.int32), n_outputs)
    return sp.csr_array((UT.ravel().copy(), indices, _row_pointers(n_outputs, n_features)), shape=UT.shape).T.tocsc()


def _row_pointers(n_rows, per_row):
    """CSR row pointers of a matrix with ``per_row`` stored entries in every row."""
    return np.arange(n_rows + 1, dtype=np.int64) * per_row


def _divide_rows(A, divisors):
    """``A[r] /= divisors[r]`` in place."""
    A /= divisors.astype(A.dtype)[:, None]


def _row_norms(A):
    """L2 norm of each row of A (float32); 1 for all-zero rows so that they stay zero."""
    norms = np.linalg.norm(A, axis=1)
    norms[norms == 0.0] = 1.0
    return norms
