"""Step size of Algorithm 1 (Negrel et al. 2014): "compute the optimal learning rate".

The learning rate mu_t minimises the selected queries' objective (Eq. 7 summed over the
P queries of the step) along the descent direction ``-G`` of Eq. 14:

- :func:`golden_section_search`: brackets a minimum of a scalar function of
  ``mu >= 0``, then golden-section search [18]; returns the best point evaluated (0
  if none beats ``mu = 0``), since the objectives below are piecewise and need not be
  unimodal;
- :func:`line_objective`: the objective at ``U - mu G``, with alpha_q and beta_q
  (Eq. 8-9) frozen at U: the scores are a quadratic in mu whose coefficients are formed
  once, so that each trial costs O(P N) (the "dense" search, and the only one without
  sparsity);
- :class:`ProjectedLine`: the objective at ``P_M(U - mu G / |G|)``, the point where the
  step lands after the l0 projection of Eq. 17 (and unit columns), alpha_q and beta_q
  recounted there (the "projected" search); each trial costs a product with the
  entries that move in or out of the supports, and :meth:`ProjectedLine.proposal`
  gives the point the chosen step lands on.

The objectives are evaluated through a ``RankingProblem`` (``ndir.projection._ranking``)
and, for :class:`ProjectedLine`, on the ``Descent`` (``ndir.projection._descent``) whose
U and Y it reads and never writes: the line search proposes a point, the descent
commits it (``Descent.step``). Neither module is imported here: the descent imports
this one.
"""

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

# The golden ratio (also sets the first trial of the projected search, in _descent).
GOLDEN = (1.0 + 5.0**0.5) / 2.0
# Line search: at most this many bracket expansions (or contractions), then golden-
# section steps until the bracket is narrower than _SEARCH_RTOL times its right end.
_MAX_BRACKET_STEPS = 60
_MAX_SECTION_STEPS = 40
_SEARCH_RTOL = 1e-3
# Entries first considered to enter each column's support in the projected search
# (widened when a trial admits them all), and the sample that sets their threshold.
_ENTERING_CANDIDATES = 64
_THRESHOLD_SAMPLE = 4096
# Supports of at least this many entries (M R) select the trials' kept entries near the
# threshold only (ProjectedLine._near_threshold); smaller ones among all M + C
# candidates, which is faster below about this size (measured per trial on the default
# run's signatures).
_NEAR_SELECTION_MIN = 50_000
# Pairs of candidates and near entries per column that a trial compares first
# (ProjectedLine._compare doubles them until the entering ones are all found).
_FIRST_COMPARED = 64
# Rows of the pool selected at a time (argpartition's (rows, most) int64 indices).
_SELECTION_ROWS = 32


def golden_section_search(objective, value_at_zero, first_step, max_step=np.inf, rtol=_SEARCH_RTOL):
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
    # The bracket's middle is usually one of the first section's two points (exactly
    # so when the bracket has the golden proportions): evaluated once.
    values = {}

    def evaluate(mu):
        if mu not in values:
            values[mu] = objective(mu)
            if values[mu] < best[1]:
                best[:] = [mu, values[mu]]
        return values[mu]

    middle = min(first_step, max_step / GOLDEN)
    f_middle = evaluate(middle)
    if f_middle < value_at_zero:
        low, high = 0.0, min(middle * (1.0 + GOLDEN), max_step)
        f_high = evaluate(high)
        for _ in range(_MAX_BRACKET_STEPS):
            if f_high >= f_middle or high >= max_step:
                break
            low, middle, f_middle = middle, high, f_high
            high = min(middle + GOLDEN * (middle - low), max_step)
            f_high = evaluate(high)
    else:
        low, high = 0.0, middle
        for _ in range(_MAX_BRACKET_STEPS):
            middle = high / GOLDEN
            if evaluate(middle) < value_at_zero:
                break
            high = middle
        else:
            return 0.0

    inner = 1.0 / GOLDEN
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


def padded_rows(counts, values, width, fill):
    """(len(counts), width) array: row r holds the next ``counts[r]`` of ``values``
    (grouped by row, rows in order), then ``fill``.

    A boolean mask assigned in row-major order fills each row's first slots in order:
    3x faster than scattering to (row, position) pairs (4.5 M pool entries: 70 against
    220 ms, the same array).
    """
    padded = np.full((counts.size, width), fill, dtype=values.dtype)
    padded[np.arange(width) < counts[:, None]] = values
    return padded


def _smallest_sorted(A, k):
    """Column indices of the ``k`` smallest values of each row of A, by increasing value
    (all of them when a row has at most k): ``argsort(A, axis=1)[:, :k]`` up to the
    order of equal values.

    The trials compare only the first of each column's near entries, while the widest
    column, which sets the padded width, can hold a hundred times the median (FV-512,
    R = 256, tau = 0.9: median 29, 90th percentile 4,563): a partition, then a sort of
    the k, instead of sorting whole rows.
    """
    if 2 * k >= A.shape[1]:
        return np.argsort(A, axis=1)[:, :k]
    smallest = np.argpartition(A, k - 1, axis=1)[:, :k]
    order = np.argsort(np.take_along_axis(A, smallest, axis=1), axis=1)
    return np.take_along_axis(smallest, order, axis=1)


def line_objective(problem, selected, scores, Y, H, weights):
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


class Moves(NamedTuple):
    """The entries a trial step moves in or out of the supports of U.

    ``out_rows``, ``out_at`` (int): the dropped entries, by column of U and position in
    the descent's ``kept``; ``out_values``: minus their values at the step. ``in_rows``,
    ``in_at`` (int): the entered ones, by column and position among the line's
    ``outside`` candidates; ``in_values``: their values at the step. ``norms``: (R,)
    the columns' norms at the projected point with ``renormalize``, else None.
    """

    out_rows: np.ndarray
    out_at: np.ndarray
    out_values: np.ndarray
    in_rows: np.ndarray
    in_at: np.ndarray
    in_values: np.ndarray
    norms: np.ndarray | None


class Proposal(NamedTuple):
    """The point a projected step lands on, for the descent to commit.

    ``kept``: (R, M) int32, the support of each column of U, increasing; ``values``:
    (R, M) float32, U's entries there (unit columns with ``renormalize``); ``Y``: (N,
    R) float64, X U at that point, from the moved entries.
    """

    kept: np.ndarray
    values: np.ndarray
    Y: np.ndarray


class ProjectedLine:
    """The selected queries' objective at ``P_M(U - mu G / |G|)``, as a function of mu.

    ``P_M`` keeps the M largest magnitudes of each column (Eq. 17) and, with
    ``renormalize``, rescales the column to unit norm; alpha_q and beta_q (Eq. 8-9)
    are recounted at the projected point. ``mu`` is in units of |G|_F, so that the
    search range ``[0, |U|_F / 2]`` means the same at every step.

    Cheap form. Outside its support S_r, column r of U is zero, so an entry k outside
    moves to ``-mu g_k``: the only ones that can enter the support are the M of
    largest ``|g_k|`` outside S_r, found once per step; few enter at the steps tried,
    so the candidates start at the ``_ENTERING_CANDIDATES`` largest (or half the
    number the last search ended with, if more) and widen when a trial lets all of a
    column's in. Each trial then selects the M largest of M + C candidates per column
    (not D): in fact among the candidates and the few support entries near the
    threshold only (:meth:`_near_threshold`), while the step's final move selects
    among all M + C, keeping the summation order of its products. Since ``X u_r`` is
    known (Y), the projected point's ``X u_r' = Y_r - mu X[:, S_r] g_r[S_r] + X c_r``,
    where ``c_r`` only has the entries that left or entered the support:
    ``X[:, S_r] g_r[S_r]`` is one sparse product per step and ``X c_r`` costs N per
    moved entry. The scores of the P selected queries, and their losses, follow in
    O(P N R).

    G^T (R x D) is never stored: :meth:`Descent.gradient_entries` forms it in blocks
    of features and keeps, from each block, the support's entries and the entries
    outside above a per-column threshold (set from a strided sample of G^T to keep
    about 4 C per column): the pool the candidates, and their widenings, come from.
    A column whose pool runs short is scanned again with a lower threshold.
    """

    def __init__(self, descent, problem, selected, rows, dF, Z, gradient_sq_norm):
        self.descent, self.problem = descent, problem
        self.selected, self.rows = selected, rows
        self.factors = descent.gradient_factors(rows, dF, Z)
        self.gradient_norm = np.float32(np.sqrt(gradient_sq_norm))
        kept = descent.kept
        n_outputs, n_features = descent.UT.shape
        # Entries that may enter: all M largest |g| outside the support would be
        # exact, but few enter at the steps tried; start with fewer (at least half as
        # many as the last search ended with), and widen as soon as a trial lets every
        # candidate of some column in. The kept entries are the same whatever the start.
        self.n_outside_max = min(kept.shape[1], n_features - kept.shape[1])
        n_outside = min(max(_ENTERING_CANDIDATES, descent.entering_width // 2), self.n_outside_max)
        # G^T is scanned once for the support's entries and, outside, for those above
        # a threshold set from a strided sample to keep about 4 n_outside per column:
        # the pool from which the candidates are taken (and widened, scanning again
        # with lower thresholds the columns whose pool is too small).
        self.stride = max(1, n_features // _THRESHOLD_SAMPLE)
        self.sample = descent.gradient_sample(*self.factors, self.stride)
        every_column = np.ones(n_outputs, dtype=bool)
        self._pool_by_column = None
        inside, *self.pool = descent.gradient_entries(*self.factors, self._thresholds(4 * n_outside, every_column))
        self.inside_values = descent.values.astype(np.float64)
        self.inside_gradient = (inside / self.gradient_norm).astype(np.float64)
        self.support_gradient = descent.product(kept, self.inside_gradient)
        self._set_outside(n_outside)
        # |U|_F: unit columns with renormalisation, else as they are.
        self.max_step = 0.5 * float(np.sqrt(np.sum(self.inside_values**2)))
        self.near_selection = kept.size >= _NEAR_SELECTION_MIN
        if self.near_selection:
            self._prepare_near_selection()

    def _prepare_near_selection(self):
        """What :meth:`_near_threshold` reads: the bounds |u| -+ mu |g| of each support
        entry's magnitude along the line, the entry of each column with the smallest
        |u|, and |u - mu g|^2 summed over the support, a quadratic in mu."""
        self.inside_magnitude = np.abs(self.inside_values)
        self.inside_slope = np.abs(self.inside_gradient)
        smallest = np.argmin(self.inside_magnitude, axis=1)[:, None]
        self.smallest_bounds = (
            np.take_along_axis(self.inside_magnitude, smallest, axis=1)[:, 0],
            np.take_along_axis(self.inside_slope, smallest, axis=1)[:, 0],
        )
        self.support_sq_norm = [
            np.einsum("ij,ij->i", a, b)
            for a, b in [
                (self.inside_values, self.inside_values),
                (self.inside_values, self.inside_gradient),
                (self.inside_gradient, self.inside_gradient),
            ]
        ]
        # The near entries at the largest step tried: (step, width C, flat indices into
        # the (R, M) support). The pass over the support writes into a buffer: a fresh
        # (256, 8192) float64 temporary costs page faults here (14 ms against 6 ms).
        self._near = None
        self._lower = np.empty_like(self.inside_magnitude)
        self._entered = np.zeros(self.inside_values.shape[0], dtype=np.intp)

    @property
    def n_outside(self):
        """Entering candidates per column, after the widenings so far."""
        return self.outside.shape[1]

    def _thresholds(self, n_expected, columns):
        """(R,) float32: for the ``columns`` (bool mask), the |g| above which about
        ``n_expected`` entries outside the support lie, estimated from the sample (0,
        i.e. all of them, when the sample is too small to tell); ``inf`` elsewhere."""
        thresholds = np.full(columns.size, np.inf, dtype=np.float32)
        rank = n_expected // self.stride
        if rank >= self.sample.shape[1]:
            thresholds[columns] = 0.0
        else:
            sample = self.sample[columns]
            thresholds[columns] = np.maximum(-np.partition(-sample, rank, axis=1)[:, rank], 0.0)
        return thresholds

    def _set_outside(self, n_outside):
        """Candidates to enter: the ``n_outside`` largest |g| outside each support,
        from the pool; columns with fewer in the pool are scanned again."""
        n_outputs = self.descent.UT.shape[0]
        n_expected = 4 * n_outside
        while True:
            counts = np.bincount(self.pool[0], minlength=n_outputs)
            short = counts < n_outside
            if not np.any(short):
                break
            n_expected *= 2
            others = ~short[self.pool[0]]
            # The rescan is dropped once merged, before the selection below: the pool
            # can hold most of G^T (FV-256, tau = 0.9: 34k of 41k features per column).
            rescanned = self.descent.gradient_entries(*self.factors, self._thresholds(n_expected, short))[1:]
            self.pool = [np.concatenate([old[others], new]) for old, new in zip(self.pool, rescanned)]
            del rescanned
            self._pool_by_column = None
        if self._pool_by_column is None:
            # The pool by column of U (a stable radix sort), padded to a (R, most) array
            # of -|g| (1 past a column's entries); kept for the widenings that the same
            # pool serves.
            pool_rows, _, pool_values = self.pool
            by_row = np.argsort(pool_rows.astype(np.int16), kind="stable")
            first = np.cumsum(counts) - counts
            padded = padded_rows(counts, -np.abs(pool_values[by_row]), counts.max(), 1.0)
            self._pool_by_column = by_row, first, padded
        by_row, first, padded = self._pool_by_column
        # The n_outside largest |g| of each row, a few rows at a time: argpartition's
        # int64 indices of the whole (R, most) array would double the pool's memory.
        top = np.concatenate(
            [
                np.argpartition(padded[start : start + _SELECTION_ROWS], n_outside - 1, axis=1)[:, :n_outside]
                for start in range(0, padded.shape[0], _SELECTION_ROWS)
            ]
        )
        at = by_row[first[:, None] + top]
        _, pool_columns, pool_values = self.pool
        # int32 already (Descent.gradient_entries): the indexing is the only copy.
        self.outside = pool_columns[at]
        self.outside_gradient = (pool_values[at] / self.gradient_norm).astype(np.float64)
        self._index_outside()

    def _index_outside(self):
        """|g| of the candidates, each column's largest, and no order yet: the trials
        read the candidates in decreasing |g| (:meth:`_largest_outside`), while U's
        update keeps them in the order above, which sets the summation order of its
        column norms."""
        self.outside_slope = np.abs(self.outside_gradient)
        self.outside_max = self.outside_slope.max(axis=1)
        n_outputs = self.outside.shape[0]
        self._by_size = np.empty((n_outputs, 0), dtype=np.intp)
        self._sorted_slope = np.empty((n_outputs, 0))
        self._n_sorted = np.zeros(n_outputs, dtype=np.intp)

    def _largest_outside(self, n, rows):
        """The n largest candidates of the columns ``rows`` (int array) by decreasing
        |g|: their positions in ``outside`` and their |g|, (rows.size, n) each; sorted
        once per column for the most yet asked of it."""
        unsorted = rows[self._n_sorted[rows] < n]
        if unsorted.size:
            if n > self._by_size.shape[1]:
                grow = ((0, 0), (0, n - self._by_size.shape[1]))
                self._by_size = np.pad(self._by_size, grow)
                self._sorted_slope = np.pad(self._sorted_slope, grow)
            slope = self.outside_slope[unsorted]
            top = np.argpartition(-slope, n - 1, axis=1)[:, :n]
            order = np.argsort(-np.take_along_axis(slope, top, axis=1), axis=1)
            by_size = np.take_along_axis(top, order, axis=1)
            self._by_size[unsorted, :n] = by_size
            self._sorted_slope[unsorted, :n] = np.take_along_axis(slope, by_size, axis=1)
            self._n_sorted[unsorted] = n
        if rows.size == self._n_sorted.size:
            return self._by_size[:, :n], self._sorted_slope[:, :n]
        return self._by_size[rows, :n], self._sorted_slope[rows, :n]

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
            # The M largest magnitudes: those at or above the M-th largest (a partition
            # and a comparison, 3x faster than scattering an argpartition's indices);
            # with ties there, exactly M of them by the argpartition.
            magnitude = np.abs(values)
            n_left_out = values.shape[1] - n_keep
            chosen = magnitude >= np.partition(magnitude, n_left_out, axis=1)[:, n_left_out, None]
            if np.any(np.count_nonzero(chosen, axis=1) != n_keep):
                chosen[:] = False
                order = np.argpartition(-magnitude, n_keep - 1, axis=1)[:, :n_keep]
                np.put_along_axis(chosen, order, True, axis=1)
            # If every candidate of a column entered, the next one might have too.
            if self.n_outside == self.n_outside_max or not np.any(chosen[:, n_keep:].all(axis=1)):
                return values, chosen
            self._set_outside(min(2 * self.n_outside, self.n_outside_max))

    def _near_threshold(self, mu):
        """The trial's moves, from the support entries near the threshold only.

        The same kept entries as :meth:`_candidates`, without forming all M + C
        candidates of a column. The C entering candidates and the support entry of
        smallest |u| are C + 1 values whose magnitudes are at most ``bound`` =
        max(mu max|g_out|, |u_s| + mu |g_s|), so the M-th largest magnitude (the
        (C + 1)-th smallest) is at most ``bound``, and a support entry with
        ``|u| - mu |g| > bound`` is kept: only the others, "near" (1-2 % of the
        support at tau = 0.9 on real signatures), may leave. The near entries for a
        step mu are a superset of those for any smaller step, so they are found by a
        pass over the support at the largest step tried so far, then filtered.

        Then, per column, the candidates in decreasing magnitude ``o_1 >= o_2 ...``
        against the near entries in increasing magnitude ``r_1 <= r_2 ...``: the M
        largest of the column are kept when the e entering are those with
        ``o_i > r_i``, each replacing one of the e smallest near entries; no more
        than the near entries can leave, so only the first of them are compared.

        Returns the :class:`Moves`, as :meth:`projected_scores` forms them; or None
        where a tie at the threshold needs :meth:`_candidates`' exact count.
        """
        n_outputs, n_keep = self.inside_values.shape
        while True:
            n_outside = self.n_outside
            smallest_magnitude, smallest_slope = self.smallest_bounds
            bound = np.maximum(mu * self.outside_max, smallest_magnitude + mu * smallest_slope)
            # A relative margin far above the rounding of |u - mu g|.
            bound *= 1.0 + 1e-9
            if self._near is not None and mu <= self._near[0] and (n_outside == self._near[1]):
                flat = self._near[2]
                lower = self.inside_magnitude.ravel()[flat]
                lower -= mu * self.inside_slope.ravel()[flat]
                flat = flat[lower <= bound[flat // n_keep]]
            else:
                lower = np.multiply(self.inside_slope, mu, out=self._lower)
                np.subtract(self.inside_magnitude, lower, out=lower)
                flat = np.flatnonzero(lower <= bound[:, None])
                self._near = (mu, n_outside, flat)
            near_rows = flat // n_keep
            near_values = self.inside_values.ravel()[flat]
            near_values -= mu * self.inside_gradient.ravel()[flat]
            # Each column's near entries by increasing magnitude (inf past its own), and
            # as many of its largest candidates (-inf past the last), one more than can
            # enter: at most the column's near entries.
            counts = np.bincount(near_rows, minlength=n_outputs)
            first = np.cumsum(counts) - counts
            width = int(counts.max())
            # flat increases, so near_rows does: grouped by row, in order.
            padded = padded_rows(counts, np.abs(near_values), width + 1, np.inf)
            n_compared = min(n_outside, width + 1)
            n_entered, left_out_max, kept_min, drops, (in_rows, in_at) = self._compare(mu, padded, n_compared)
            if np.any(left_out_max >= kept_min):
                return None
            if n_outside == self.n_outside_max or not np.any(n_entered == n_outside):
                break
            self._set_outside(min(2 * n_outside, self.n_outside_max))
        dropped = np.sort(first[drops[0]] + drops[1])
        out_values = -near_values[dropped]
        in_values = -mu * self.outside_gradient[in_rows, in_at]
        norms = None
        if self.descent.renormalize:
            support, cross, gradient = self.support_sq_norm
            sq_norms = support - 2.0 * mu * cross + mu**2 * gradient
            sq_norms -= np.bincount(near_rows[dropped], weights=out_values**2, minlength=n_outputs)
            sq_norms += np.bincount(in_rows, weights=in_values**2, minlength=n_outputs)
            norms = np.sqrt(np.maximum(sq_norms, 0.0))
        return Moves(
            near_rows[dropped],
            flat[dropped] - near_rows[dropped] * n_keep,
            out_values,
            in_rows,
            in_at,
            in_values,
            norms,
        )

    def _compare(self, mu, padded, n_compared):
        """Which candidates enter each column, and which near entries they replace.

        Per column, the candidates in decreasing magnitude ``o_1 >= o_2 ...`` against
        the near entries (``padded``, (R, width + 1), inf past a column's own) in
        increasing magnitude ``r_1 <= r_2 ...``, for the first ``n_compared`` pairs:
        the e pairs with ``o_i > r_i`` enter. As the o decrease and the r increase,
        they are a prefix, so column r compares only its first c_r pairs, from twice
        the number that entered it at the last trial (at least ``_FIRST_COMPARED``),
        doubling while all of its c_r enter, up to ``n_compared``: the answer of all
        pairs, while most columns sort a few (on real signatures at tau = 0.9, FV-512,
        R = 256, the median column lets 0-100 entries in, the widest thousands, of up
        to C = 4,096 compared).

        Returns e (R,); per column the largest magnitude left out and the smallest
        kept, (R,) each, for the tie check; the dropped near entries as (columns,
        positions in ``padded``) and the entering candidates as (columns, positions in
        ``outside``), grouped by column in decreasing magnitude.
        """
        n_outputs = padded.shape[0]
        start = np.clip(2 * self._entered, _FIRST_COMPARED, n_compared)
        compared = int(start.min())
        waiting = np.ones(n_outputs, dtype=bool)
        rows = np.arange(n_outputs)
        n_entered = np.empty(n_outputs, dtype=np.intp)
        left_out_max, kept_min = np.empty(n_outputs), np.empty(n_outputs)
        dropped, entered = [], []
        while True:
            rows = rows[start[rows] <= compared]
            if rows.size:
                near = padded if rows.size == n_outputs else padded[rows]
                by_size = _smallest_sorted(near, compared + 1)
                near_sorted = np.take_along_axis(near, by_size, axis=1)
                candidates = np.full((rows.size, compared + 1), -np.inf)
                by_decreasing_slope, slope = self._largest_outside(compared, rows)
                candidates[:, :compared] = mu * slope
                entering = candidates[:, :compared] > near_sorted[:, :compared]
                count = np.count_nonzero(entering, axis=1)
                done = (count < compared) | (compared == n_compared)
                if not done.all():
                    count, rows, by_size, near_sorted, candidates = (
                        part[done] for part in (count, rows, by_size, near_sorted, candidates)
                    )
                    by_decreasing_slope = by_decreasing_slope[done]
                    entering = entering[done]
                at = np.arange(rows.size)
                # Left out strictly below the kept; equal (a tie): exact count needed.
                entered_any = count > 0
                last_in = np.maximum(count - 1, 0)
                n_entered[rows] = count
                left_out_max[rows] = np.maximum(
                    candidates[at, count],
                    np.where(entered_any, near_sorted[at, last_in], -np.inf),
                )
                kept_min[rows] = np.minimum(
                    np.where(entered_any, candidates[at, last_in], np.inf),
                    near_sorted[at, count],
                )
                which, rank = np.nonzero(entering)
                dropped.append((rows[which], by_size[which, rank]))
                entered.append((rows[which], by_decreasing_slope[which, rank]))
                waiting[rows] = False
            if not waiting.any():
                break
            rows = np.flatnonzero(waiting)
            compared = min(2 * compared, n_compared)
        self._entered = n_entered
        dropped_rows, dropped_at = (np.concatenate(part) for part in zip(*dropped))
        in_rows, in_at = (np.concatenate(part) for part in zip(*entered))
        if len(entered) > 1:
            # Column by column, each in decreasing magnitude, as np.nonzero lists them.
            by_row = np.argsort(in_rows, kind="stable")
            in_rows, in_at = in_rows[by_row], in_at[by_row]
        return (
            n_entered,
            left_out_max,
            kept_min,
            (dropped_rows, dropped_at),
            (in_rows, in_at),
        )

    def projected_scores(self, mu):
        """Y' = X P_M(U - mu G) (N, R) float64, and the candidate values and mask."""
        values, chosen = self._candidates(mu)
        n_keep = self.inside_values.shape[1]
        dropped = ~chosen[:, :n_keep]
        entered = chosen[:, n_keep:]
        # Row-major like np.nonzero, several times faster on these 2-d masks.
        out_rows, out_at = np.divmod(np.flatnonzero(dropped), n_keep)
        in_rows, in_at = np.divmod(np.flatnonzero(entered), entered.shape[1])
        norms = None
        if self.descent.renormalize:
            norms = np.sqrt(np.sum(np.where(chosen, values, 0.0) ** 2, axis=1))
        moves = Moves(
            out_rows,
            out_at,
            -values[:, :n_keep][dropped],
            in_rows,
            in_at,
            values[:, n_keep:][entered],
            norms,
        )
        return self._moved_scores(mu, moves), values, chosen

    def _moved_scores(self, mu, moves):
        """X u_r' = (Y_r - mu X[:, S_r] g_r[S_r] + X c_r) / norms[r], (N, R) float64:
        c_r holds the dropped entries (minus their values at mu) and the entered ones
        (:class:`Moves`)."""
        descent = self.descent
        CT = sp.csc_array(
            (
                np.concatenate([moves.out_values, moves.in_values]).astype(np.float32),
                (
                    np.concatenate([moves.out_rows, moves.in_rows]),
                    np.concatenate(
                        [
                            descent.kept[moves.out_rows, moves.out_at],
                            self.outside[moves.in_rows, moves.in_at],
                        ]
                    ),
                ),
            ),
            shape=descent.UT.shape,
        )
        Y = descent.Y - mu * self.support_gradient
        if CT.nnz:
            Y += descent.sparse_rows_product(CT)
        if moves.norms is not None:
            Y /= np.where(moves.norms > 0.0, moves.norms, 1.0)
        return Y

    def __call__(self, mu):
        moves = self._near_threshold(mu) if self.near_selection else None
        if moves is None:
            Y, _, _ = self.projected_scores(mu)
        else:
            Y = self._moved_scores(mu, moves)
        scores = Y[self.rows] @ Y.T
        return float(self.problem.losses_of_scores(scores, self.selected).sum())

    def proposal(self, mu):
        """The :class:`Proposal` of the step mu: ``P_M(U - mu G / |G|)``, with its
        supports, values and X U. Selects among all M + C candidates, in the summation
        order of :meth:`projected_scores`; the descent is left unchanged."""
        descent = self.descent
        Y, values, chosen = self.projected_scores(mu)
        n_outputs, n_keep = descent.kept.shape
        rows = np.hstack([descent.kept, self.outside])[chosen].reshape(n_outputs, n_keep)
        kept_values = values[chosen].reshape(n_outputs, n_keep)
        # Keep the features of each support increasing: only the columns where an
        # entry entered are out of order.
        changed = np.flatnonzero(chosen[:, n_keep:].any(axis=1))
        order = np.argsort(rows[changed], axis=1)
        rows[changed] = np.take_along_axis(rows[changed], order, axis=1)
        kept_values[changed] = np.take_along_axis(kept_values[changed], order, axis=1)
        rows = rows.astype(np.int32)
        if descent.renormalize:
            norms = np.linalg.norm(kept_values, axis=1, keepdims=True)
            kept_values /= np.where(norms > 0.0, norms, 1.0)
        return Proposal(rows, kept_values.astype(np.float32), Y)
