"""Tests of ndir.projection.sparse_rank against slow, independent computations."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.utils.estimator_checks import parametrize_with_checks

from ndir.evaluation import holidays_map
from ndir.projection import _descent, _line_search, _ranking
from ndir.projection.sparse_rank import SparseRankProjector


def grouped(n_groups, group_size, n_features, noise, seed):
    """Unit-norm float32 signatures in groups of near duplicates, first of each the query."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_groups), group_size)
    centres = rng.standard_normal((n_groups, n_features))
    X = centres[groups] + noise * rng.standard_normal((groups.size, n_features))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    is_query = np.zeros(groups.size, dtype=bool)
    is_query[::group_size] = True
    return X.astype(np.float32), groups, is_query


def brute_force_violations(X, Y, groups, query_rows, margin):
    """Per query, the violations (> 0 only) of its positive and negative constraints
    (Eq. 6), by loops; the pivot is the top negative under the original signatures X."""
    result = []
    for q in query_rows:
        negatives = [j for j in range(len(X)) if groups[j] != groups[q]]
        positives = [i for i in range(len(X)) if groups[i] == groups[q] and i != q]
        pivot = max(negatives, key=lambda j: float(np.dot(X[q], X[j])))
        d = lambda a: float(np.dot(Y[q], Y[a]))  # noqa: E731  d_U(x_q, x_a), Eq. 2
        pos = [margin + d(pivot) - d(i) for i in positives]
        neg = [d(j) - d(pivot) for j in negatives if j != pivot]
        result.append(([v for v in pos if v > 0], [v for v in neg if v > 0]))
    return result


def brute_force_losses(X, U, groups, query_rows, margin):
    """f_q of Eq. 7-9 by loops: mean squared violation of each constraint set."""
    losses = []
    for pos, neg in brute_force_violations(X, X @ U, groups, query_rows, margin):
        loss = sum(v * v for v in pos) / len(pos) if pos else 0.0
        loss += sum(v * v for v in neg) / len(neg) if neg else 0.0
        losses.append(loss)
    return np.array(losses)


@pytest.fixture
def tiny():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((12, 7))
    groups = np.repeat(np.arange(4), 3)
    return X, groups, np.array([0, 3, 6, 9]), rng.standard_normal((7, 3))


def test_losses_match_brute_force(tiny):
    X, groups, query_rows, U = tiny
    problem = _ranking.RankingProblem(X, groups, query_rows, 1e-2)
    expected = brute_force_losses(X, U, groups, query_rows, 1e-2)
    np.testing.assert_allclose(problem.losses(X @ U), expected, rtol=1e-12)
    assert np.all(expected > 0)


def test_hand_worked_loss():
    # Query row 0, its positive row 1, negatives rows 2 and 3. Under the original
    # signatures row 3 scores 0.9 > 0.5 with the query: it is the pivot.
    X = np.array([[1.0, 0.0], [0.2, 0.5], [0.5, 0.0], [0.9, 0.0]])
    problem = _ranking.RankingProblem(X, np.array([0, 0, 1, 2]), np.array([0]), 0.01)
    assert problem.pivots[0] == 3
    # Projected scores with the query: positive 0.2, negative 0.5, pivot 0.9. Positive
    # violation 0.01 + 0.9 - 0.2 = 0.71; the negative is below the pivot.
    Y = np.array([[1.0, 0.0], [0.2, 0.0], [0.5, 0.0], [0.9, 0.0]])
    np.testing.assert_allclose(problem.losses(Y), [0.71**2], rtol=1e-12)
    Y[2, 0] = 1.5  # the negative now beats the pivot by 0.6
    np.testing.assert_allclose(problem.losses(Y), [0.71**2 + 0.6**2], rtol=1e-12)
    Y[1, 0] = 2.0  # the positive beats the pivot by 1.1 > margin
    np.testing.assert_allclose(problem.losses(Y), [0.6**2], rtol=1e-12)
    # alpha, beta = 1 / number of violations: two negatives violated by 0.6 and 0.2.
    X = np.vstack([X, [0.1, 0.0]])
    problem = _ranking.RankingProblem(X, np.array([0, 0, 1, 2, 3]), np.array([0]), 0.01)
    Y = np.vstack([Y, [1.1, 0.0]])
    np.testing.assert_allclose(problem.losses(Y), [(0.6**2 + 0.2**2) / 2], rtol=1e-12)


def test_gradient_matches_finite_differences(tiny):
    X, groups, query_rows, U = tiny
    problem = _ranking.RankingProblem(X, groups, query_rows, 1e-2)
    selected = np.array([1, 3])

    def objective(V):
        return brute_force_losses(X, V, groups, query_rows[selected], 1e-2).sum()

    _, losses, dF, Z, B, _ = _ranking.gradient(problem, X @ U, selected)
    G = X.T @ B
    numeric = np.zeros_like(U)
    h = 1e-6
    for index in np.ndindex(U.shape):
        step = np.zeros_like(U)
        step[index] = h
        numeric[index] = (objective(U + step) - objective(U - step)) / (2 * h)
    np.testing.assert_allclose(G, numeric, rtol=1e-6, atol=1e-6 * np.abs(G).max())
    assert np.abs(G).max() > 1.0
    # The low-rank form used by the update: G = X_S^T Z + (dF X)^T Y_S.
    rows = query_rows[selected]
    np.testing.assert_allclose(X[rows].T @ Z + (dF @ X).T @ (X @ U)[rows], G, rtol=1e-12)
    np.testing.assert_allclose(losses.sum(), objective(U), rtol=1e-12)


def test_update_descends(tiny):
    # Eq. 15 is printed with "+": moving along +G must raise the objective, -G lower it.
    X, groups, query_rows, U = tiny
    problem = _ranking.RankingProblem(X, groups, query_rows, 1e-2)
    selected = np.arange(4)
    _, losses, _, _, B, _ = _ranking.gradient(problem, X @ U, selected)
    G = X.T @ B
    mu = 1e-4 / np.abs(G).max()
    assert problem.losses(X @ (U - mu * G)).sum() < losses.sum()
    assert problem.losses(X @ (U + mu * G)).sum() > losses.sum()


def test_line_objective_is_exact_along_the_line(tiny):
    X, groups, query_rows, U = tiny
    problem = _ranking.RankingProblem(X, groups, query_rows, 1e-2)
    selected = np.array([0, 2])
    Y = X @ U
    scores, _, _, _, B, weights = _ranking.gradient(problem, Y, selected)
    G = X.T @ B
    H = problem.gram @ B
    objective = _line_search.line_objective(problem, selected, scores, Y, H, weights)
    for mu in [0.0, 1e-3, 0.05, 0.7]:
        moved = X @ (U - mu * G)
        violations = brute_force_violations(X, moved, groups, query_rows[selected], 1e-2)
        # alpha and beta frozen at mu = 0: 1 / number of violations there.
        expected = sum(
            sum(v * v for v in pos) * a + sum(v * v for v in neg) * b for (pos, neg), a, b in zip(violations, *weights)
        )
        np.testing.assert_allclose(objective(mu), expected, rtol=1e-9)
    counts = [
        (sum(v > 0 for v in p), sum(v > 0 for v in n))
        for p, n in brute_force_violations(X, Y, groups, query_rows[selected], 1e-2)
    ]
    inverse = lambda n: 1.0 / n if n else 0.0  # noqa: E731
    np.testing.assert_allclose(weights[0], [inverse(c[0]) for c in counts])
    np.testing.assert_allclose(weights[1], [inverse(c[1]) for c in counts])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_padded_rows_places_each_rows_values_in_order(dtype):
    rng = np.random.default_rng(3)
    rows = np.sort(rng.integers(0, 7, 200))
    rows = rows[rows != 4]  # a row without values
    values = rng.normal(size=rows.size).astype(dtype)
    counts = np.bincount(rows, minlength=9)
    width = int(counts.max()) + 2
    # Independent: one row at a time.
    expected = np.full((9, width), np.inf, dtype=dtype)
    for row in range(9):
        expected[row, : counts[row]] = values[rows == row]
    padded = _line_search.padded_rows(counts, values, width, np.inf)
    assert padded.dtype == dtype
    np.testing.assert_array_equal(padded, expected)


@pytest.mark.parametrize("k", [1, 3, 8, 25, 40])
def test_smallest_sorted_are_the_first_of_a_full_sort(k):
    """Each row's k smallest by increasing value, as the first k of a full argsort (one
    row padded with inf, as the near entries are; finite values distinct, so their
    indices must match too), by partition and sort when k is small against the width."""
    rng = np.random.default_rng(k)
    A = rng.permutation(np.arange(6 * 30, dtype=np.float64)).reshape(6, 30)
    A[2, 5:] = np.inf
    full = np.argsort(A, axis=1)[:, :k]
    smallest = _line_search._smallest_sorted(A, k)
    values = np.take_along_axis(A, smallest, axis=1)
    assert np.array_equal(values, np.sort(A, axis=1)[:, :k])
    finite = np.isfinite(values)
    assert np.array_equal(smallest[finite], full[finite])


def test_line_search_finds_minimum_and_refuses_ascent():
    mu = _line_search.golden_section_search(lambda m: (m - 3.0) ** 2 + 1.0, 10.0, 0.01)
    assert abs(mu - 3.0) < 3.0 * _line_search._SEARCH_RTOL
    mu = _line_search.golden_section_search(lambda m: (m - 3.0) ** 2 + 1.0, 10.0, 500.0)
    assert abs(mu - 3.0) < 3.0 * _line_search._SEARCH_RTOL
    assert _line_search.golden_section_search(lambda m: 1.0 + m, 1.0, 0.5) == 0.0


@pytest.mark.parametrize("first_step", [0.01, 500.0])
def test_line_search_evaluates_each_step_once(first_step):
    # A projected trial costs a product with the moved entries: the bracket's middle,
    # which the golden section's first points meet again, is not evaluated twice.
    tried = []

    def objective(mu):
        tried.append(mu)
        return (mu - 3.0) ** 2 + 1.0

    mu = _line_search.golden_section_search(objective, 10.0, first_step, 10.0, 3e-2)
    assert len(tried) == len(set(tried))
    assert abs(mu - 3.0) < 3.0 * 3e-2


def test_line_search_stops_at_max_step_on_a_falling_objective():
    """An objective that keeps falling beyond max_step: no trial passes the cap (the
    projected search's max_step is |U|_F / 2, the whole column norm), and the best
    trial, at the cap, is returned, from a first step below the cap or above it."""
    for first_step in (1.0, 1000.0):
        tried = []

        def objective(mu):
            tried.append(mu)
            return -mu

        mu = _line_search.golden_section_search(objective, 0.0, first_step, 10.0)
        assert max(tried) <= 10.0
        assert 10.0 * (1.0 - _line_search._SEARCH_RTOL) <= mu <= 10.0
        assert mu in tried


def test_line_search_returns_the_best_point_evaluated_over_two_wells():
    """Two wells: a shallow one (-0.5 at 6.5) that the contraction from a first step
    of 10 lands in (f(10 / phi) < f(0)), and a deeper one (-2 at 3) that the section
    then finds. The search returns a point it evaluated, the lowest of them, in the
    deeper well; the shallow well was evaluated below f(0) too."""
    values = {}

    def objective(mu):
        values[mu] = min(-0.5 + 0.1 * (mu - 6.5) ** 2, -2.0 + 2.0 * (mu - 3.0) ** 2)
        return values[mu]

    mu = _line_search.golden_section_search(objective, 0.0, 10.0)
    assert mu in values and values[mu] == min(values.values())
    assert abs(mu - 3.0) < 3.0 * 3.0 * _line_search._SEARCH_RTOL
    assert any(5.0 < m < 8.0 and v < 0.0 for m, v in values.items())


def test_l0_projection_keeps_the_largest_entries_of_each_column():
    rng = np.random.default_rng(0)
    UT = rng.standard_normal((5, 40)).astype(np.float32)
    UT[3] = 0.5  # all tied: the lowest indices are kept
    UT[4, :30] = 0.0  # fewer non-zero values than kept entries
    original = UT.copy()
    indices, data, thresholds = _descent._l0_project(UT, 12, False)
    assert indices.shape == data.shape == (5, 12)
    for r in range(5):
        kept = indices[r]
        assert np.all(np.diff(kept) > 0)
        magnitude = np.abs(original[r])
        assert magnitude[kept].min() >= np.delete(magnitude, kept).max()
        np.testing.assert_array_equal(UT[r, kept], original[r, kept])
        np.testing.assert_array_equal(np.delete(UT[r], kept), 0.0)
        np.testing.assert_array_equal(data[r], original[r, kept])
    np.testing.assert_array_equal(indices[3], np.arange(12))
    # Row 0 against a full sort.
    top = np.sort(np.argsort(-np.abs(original[0]), kind="stable")[:12])
    np.testing.assert_array_equal(indices[0], top)


@pytest.mark.parametrize("scale", [0.0, 0.3, 0.9, 1.0, 1.1, 3.0, 1e6])
def test_l0_projection_from_previous_thresholds_matches_full_selection(scale):
    # The candidate pre-filter (entries above half the previous threshold) must not
    # change the result, whether the previous thresholds are far or close.
    rng = np.random.default_rng(2)
    UT = rng.standard_normal((4, 300)).astype(np.float32)
    expected = UT.copy()
    reference = _descent._l0_project(expected, 30, True)
    result = _descent._l0_project(UT, 30, True, scale * reference[2])
    for got, want in zip(result, reference):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(UT, expected)


def test_l0_projection_renormalizes_kept_entries():
    rng = np.random.default_rng(1)
    UT = rng.standard_normal((3, 50)).astype(np.float32)
    original = UT.copy()
    indices, _, _ = _descent._l0_project(UT, 5, renormalize=True)
    np.testing.assert_allclose(np.linalg.norm(UT, axis=1), 1.0, rtol=1e-6)
    kept = indices[0]
    np.testing.assert_allclose(UT[0, kept], original[0, kept] / np.linalg.norm(original[0, kept]), rtol=1e-6)


def test_objective_is_zero_when_every_constraint_holds():
    # Images of a group share a direction orthogonal to the other groups': positives
    # score 1, every negative 0 = the pivot's score, so Eq. 6 holds with margin.
    groups = np.repeat(np.arange(4), 3)
    X = np.eye(6, dtype=np.float32)[groups]
    projector = SparseRankProjector(n_components=6, sparsity=0.0, init=np.eye(6, dtype=np.float32)).fit(X, groups)
    assert projector.objective_[0] == 0.0
    assert projector.n_iter_ == 0
    assert holidays_map(projector.transform(X), groups, np.arange(12) % 3 == 0) == 1.0


def test_training_map_reaches_one_without_sparsity():
    X, groups, is_query = grouped(20, 3, 60, noise=2.0, seed=0)
    projector = SparseRankProjector(n_components=8, sparsity=0.0, max_iter=400, random_state=0).fit(X, groups)
    initial = SparseRankProjector(n_components=8, sparsity=0.0, max_iter=0).fit(X, groups)
    assert holidays_map(initial.transform(X), groups, is_query) < 0.9
    # Scored with the similarity of the loss, y_q . y_j (normalize=False).
    assert holidays_map(projector.transform(X), groups, is_query) == 1.0
    assert projector.objective_[-1] < projector.tol
    assert projector.n_iter_ < 400 and projector.objective_.size == projector.n_iter_ + 1


def test_fit_is_reproducible_and_sparse():
    X, groups, _ = grouped(15, 3, 200, noise=1.5, seed=1)
    make = lambda seed: SparseRankProjector(  # noqa: E731
        n_components=6,
        sparsity=0.9,
        max_iter=30,
        n_queries_per_step=4,
        random_state=seed,
    ).fit(X, groups)
    first, second, other = make(7), make(7), make(8)
    assert sp.issparse(first.components_) and first.components_.format == "csc"
    assert first.components_.dtype == np.float32 and first.components_.shape == (200, 6)
    np.testing.assert_array_equal(np.diff(first.components_.indptr), 20)
    assert first.n_nonzero_ == 20
    np.testing.assert_array_equal(first.components_.toarray(), second.components_.toarray())
    np.testing.assert_array_equal(first.objective_, second.objective_)
    assert not np.array_equal(first.objective_, other.objective_)
    # It learns, too: the objective over all queries falls under the l0 constraint.
    assert first.objective_[-1] < 0.5 * first.objective_[0]
    np.testing.assert_allclose(sp.linalg.norm(first.components_, axis=0), 1.0, rtol=1e-5)


def test_every_product_of_a_step_runs_on_one_blas_thread(monkeypatch):
    """The objective over all queries that each step of fit() computes is a small
    product, like the step's own: on one BLAS thread (beside another training, BLAS
    threads only wait for each other there), so that its bits do not depend on the
    machine's core count either."""
    from threadpoolctl import threadpool_info

    X, groups, _ = grouped(10, 3, 120, noise=1.0, seed=2)
    blas_threads = []
    losses = _ranking.RankingProblem.losses

    def recording(problem, Y):
        blas_threads.extend(pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas")
        return losses(problem, Y)

    monkeypatch.setattr(_ranking.RankingProblem, "losses", recording)
    SparseRankProjector(n_components=4, sparsity=0.9, max_iter=5, n_queries_per_step=4, random_state=0).fit(X, groups)
    assert blas_threads and set(blas_threads) == {1}


def test_without_renormalization_the_l0_projection_shrinks_columns():
    X, groups, _ = grouped(15, 3, 200, noise=1.5, seed=1)
    projector = SparseRankProjector(n_components=6, sparsity=0.9, max_iter=5, renormalize=False, random_state=0).fit(
        X, groups
    )
    norms = sp.linalg.norm(projector.components_, axis=0)
    # PCA axes have unit norm; keeping 20 of 200 entries leaves less.
    assert np.all(norms < 0.9)


def test_transform_paths_agree_and_normalize():
    X, groups, _ = grouped(15, 3, 200, noise=1.5, seed=2)
    projector = SparseRankProjector(n_components=6, sparsity=0.9, max_iter=5, random_state=0).fit(X, groups)
    dense = X.astype(np.float64) @ projector.components_.toarray()
    batch = projector.transform(X)
    single = np.vstack([projector.transform(x[None]) for x in X[:5]])
    assert batch.dtype == np.float32 and single.dtype == np.float32
    np.testing.assert_allclose(batch, dense, rtol=1e-5, atol=1e-6)
    assert np.array_equal(single, batch[:5])
    projector.set_params(normalize=True)
    np.testing.assert_allclose(np.linalg.norm(projector.transform(X), axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("sparsity", [0.99, 0.9, 0.5, 0.0])
@pytest.mark.parametrize("normalize", [False, True])
def test_transform_of_a_row_does_not_depend_on_its_batch(sparsity, normalize):
    """A row's projection has the same bits alone, in the whole batch, in the batch
    shuffled, and among other rows (more than one block of the sparse product, on 1 or
    2 threads), whatever the path: sparse U (tau = 0.99, 0.9) or dense U (tau = 0.5, 0)
    and whatever kernel OpenBLAS picked for this CPU (float32 GEMM did not give this on
    AVX-512 SkylakeX kernels)."""
    X, groups, _ = grouped(40, 3, 600, noise=1.5, seed=5)
    projector = SparseRankProjector(
        n_components=24, sparsity=sparsity, max_iter=3, normalize=normalize, random_state=0
    ).fit(X, groups)
    rng = np.random.default_rng(1)
    order = rng.permutation(len(X))
    others = rng.standard_normal((77, X.shape[1])).astype(np.float32)
    for n_jobs in (1, 2):
        projector.set_params(n_jobs=n_jobs)
        whole = projector.transform(X)
        assert np.array_equal(projector.transform(X[order]), whole[order])
        assert np.array_equal(projector.transform(np.vstack([others, X]))[len(others) :], whole)
        for row in (0, 7, len(X) - 1):
            assert np.array_equal(projector.transform(X[row : row + 1])[0], whole[row])
            assert np.array_equal(projector.transform(X[row : row + 5])[0], whole[row])


def test_training_scores_track_the_projection_without_sparsity():
    # Without sparsity Y is updated incrementally; the objective it reports must be
    # that of the returned components.
    X, groups, _ = grouped(15, 3, 80, noise=2.0, seed=3)
    projector = SparseRankProjector(n_components=5, sparsity=0.0, max_iter=150, tol=0.0, random_state=0).fit(X, groups)
    problem = _ranking.RankingProblem(X, groups, projector.query_rows_, projector.margin)
    final = problem.losses(projector.transform(X).astype(np.float64)).sum()
    np.testing.assert_allclose(final, projector.objective_[-1], rtol=1e-5, atol=1e-12)


def test_callback_sees_the_current_state():
    X, groups, _ = grouped(10, 3, 50, noise=1.0, seed=4)
    calls = []

    def record(iteration, projector):
        calls.append(
            (
                iteration,
                projector.n_iter_,
                projector.objective_.size,
                projector.transform(X).shape,
            )
        )

    SparseRankProjector(
        n_components=4,
        sparsity=0.5,
        max_iter=7,
        tol=0.0,
        callback=record,
        callback_every=3,
        random_state=0,
    ).fit(X, groups)
    assert [c[0] for c in calls] == [0, 3, 6, 7]
    assert all(c[1] == c[0] and c[2] == c[0] + 1 and c[3] == (30, 4) for c in calls)


def test_query_selection_takes_largest_half_and_random_rest():
    losses = np.array([0.0, 5.0, 1.0, 9.0, 2.0, 0.5, 7.0, 3.0])
    rng = np.random.default_rng(0)
    selected = _ranking.select_queries(losses, 4, rng)
    assert list(selected[:2]) == [3, 6]
    assert len(set(selected)) == 4 and not {3, 6} & set(selected[2:])
    np.testing.assert_array_equal(_ranking.select_queries(losses, 20, rng), np.arange(8))


def test_default_queries_are_first_of_each_group_and_pivot_is_top_negative():
    X, groups, is_query = grouped(6, 3, 30, noise=1.0, seed=5)
    projector = SparseRankProjector(n_components=3, max_iter=0).fit(X, groups)
    np.testing.assert_array_equal(projector.query_rows_, np.flatnonzero(is_query))
    for q, p in zip(projector.query_rows_, projector.pivots_):
        negatives = np.flatnonzero(groups != groups[q])
        assert p == negatives[np.argmax(X[negatives] @ X[q])]


@pytest.mark.parametrize(
    "params, message",
    [
        ({"sparsity": 1.0}, "sparsity"),
        ({"n_queries_per_step": 0}, "n_queries_per_step"),
        ({"init": "svd"}, "init"),
        ({"init": np.zeros((3, 3))}, "init array"),
        ({"n_components": 40}, "n_components"),
        ({"n_iter_no_change": 0}, "n_iter_no_change"),
    ],
)
def test_bad_parameters_are_reported(params, message):
    X, groups, _ = grouped(5, 3, 30, noise=1.0, seed=6)
    with pytest.raises(ValueError, match=message):
        SparseRankProjector(**{"n_components": 3, **params}).fit(X, groups)


def test_check_queries_takes_rows_or_a_mask_or_the_first_of_each_group():
    """Query rows: None gives the first row of each group (rows 0, 2, 5 of groups
    coded 0 0 1 1 1 2 2); an integer array is deduplicated and sorted; a boolean mask
    over the rows gives its true rows."""
    codes = np.array([0, 0, 1, 1, 1, 2, 2])
    np.testing.assert_array_equal(_ranking.check_queries(codes, None), [0, 2, 5])
    np.testing.assert_array_equal(_ranking.check_queries(codes, np.array([6, 1, 3, 1])), [1, 3, 6])
    np.testing.assert_array_equal(_ranking.check_queries(codes, [4, 0]), [0, 4])
    mask = np.array([False, True, False, False, True, True, False])
    np.testing.assert_array_equal(_ranking.check_queries(codes, mask), [1, 4, 5])


@pytest.mark.parametrize(
    "queries, message",
    [
        (np.array([0, 7]), r"query rows must lie in \[0, 7\)"),
        (np.array([-1, 2]), r"query rows must lie in \[0, 7\)"),
        (np.array([0.0, 2.0]), "got dtype float64, shape \\(2,\\)"),
        (np.array([[0, 2]]), "got dtype int64, shape \\(1, 2\\)"),
        (np.ones(6, dtype=bool), "boolean mask over the rows of X"),  # one row short
        (np.array(["0", "2"]), "array of row indices"),
        (np.zeros(7, dtype=bool), "no training query"),
        (np.array([], dtype=np.int64), "no training query"),
        ([], "no training query: queries is empty"),  # a plain empty list is float64
    ],
)
def test_check_queries_rejects_bad_query_sets(queries, message):
    """Out-of-range rows, a dtype or shape that is neither row indices nor a mask over
    the 7 rows, and an empty set are refused with a message saying which."""
    codes = np.array([0, 0, 1, 1, 1, 2, 2])
    with pytest.raises(ValueError, match=message):
        _ranking.check_queries(codes, queries)


def test_bad_groups_are_reported():
    X, groups, _ = grouped(5, 3, 30, noise=1.0, seed=6)
    lonely = np.append(groups[:-2], [7, 8])
    with pytest.raises(ValueError, match="alone in their group"):
        SparseRankProjector(n_components=3).fit(X, lonely)
    with pytest.raises(ValueError, match="one group"):
        SparseRankProjector(n_components=3).fit(X, np.zeros(15, dtype=int))


def test_two_images_are_refused_for_what_they_lack_not_for_their_number():
    """A query needs a near duplicate and a negative: two images of one group lack the
    negative, one image of each group the near duplicate, and the refusal says which;
    three (a pair, its first the query, and one other) are enough to learn from. One image is refused as
    too few by scikit-learn's input check."""
    X, groups, _ = grouped(2, 2, 30, noise=0.5, seed=6)
    model = SparseRankProjector(n_components=2, max_iter=2, random_state=0)
    with pytest.raises(ValueError, match="all images are in one group"):
        model.fit(X[:2], groups[:2])
    with pytest.raises(ValueError, match="alone in their group"):
        model.fit(X[1:3], groups[1:3])
    model.fit(X[:3], groups[:3], queries=[0])
    assert model.transform(X).shape == (4, 2) and model.query_rows_.tolist() == [0]
    with pytest.raises(ValueError, match="1 sample"):
        model.fit(X[:1], groups[:1])


@parametrize_with_checks([SparseRankProjector(n_components=2, sparsity=0.5, max_iter=3, init="random", random_state=0)])
def test_scikit_learn_estimator_checks(estimator, check):
    check(estimator)


def brute_force_projection(U, n_keep, renormalize):
    """P_M of Eq. 17 by a full sort of each column, then unit columns if asked."""
    projected = np.zeros_like(U)
    for r in range(U.shape[1]):
        keep = np.argsort(-np.abs(U[:, r]), kind="stable")[:n_keep]
        projected[keep, r] = U[keep, r]
        if renormalize:
            projected[:, r] /= np.linalg.norm(projected[:, r])
    return projected


def line_problem(n_groups, n_features, n_outputs, seed, selected):
    """A small ranking problem (groups of 3), random float32 initial projectors U0
    (D, R) and the selected queries: X, groups, query_rows, U0, problem, selected."""
    X, groups, is_query = grouped(n_groups, 3, n_features, noise=1.0, seed=seed)
    query_rows = np.flatnonzero(is_query)
    U0 = np.random.default_rng(seed + 1).standard_normal((n_features, n_outputs))
    problem = _ranking.RankingProblem(X, groups, query_rows, 1e-3)
    return X, groups, query_rows, U0.astype(np.float32), problem, np.asarray(selected)


def projected_line(descent, problem, selected):
    """The projected line of the descent's next step on the queries ``selected``, their
    objective at U and the step's G = X^T B (D, R) float64, not normalised."""
    _, losses, dF, Z, B, _ = _ranking.gradient(problem, descent.Y, selected)
    G = descent.X.T.astype(np.float64) @ B
    line = _line_search.ProjectedLine(descent, problem, selected, problem.query_rows[selected], dF, Z, np.sum(G * G))
    return line, losses, G


@pytest.mark.parametrize("entering, last_width", [(1, 0), (64, 0), (1, 6)])
@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("n_keep", [3, 12])
@pytest.mark.parametrize("small_blocks", [False, True])
@pytest.mark.parametrize("near_selection_min", [0, 10**9])
def test_projected_line_is_the_objective_at_the_projected_point(
    renormalize,
    n_keep,
    entering,
    last_width,
    small_blocks,
    near_selection_min,
    monkeypatch,
):
    # The cheap form (M + a few candidates per column, X u' from Y and the moved
    # entries) against the loss recomputed from scratch at P_M(U - mu G / |G|),
    # alpha_q and beta_q recounted there; with one entering candidate to start with,
    # the search must widen them whenever a trial admits them all. With small blocks,
    # G^T is scanned 7 features at a time and the candidates' thresholds come from a
    # sample of 8 of the 40 features: too few for some columns, which are scanned
    # again, and the candidates are selected 2 of the 5 columns at a time. A last
    # search that ended with 6 candidates starts this one at 3. The trials select
    # near the threshold, or among all candidates.
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(_line_search, "_ENTERING_CANDIDATES", entering)
    monkeypatch.setattr(_line_search, "_NEAR_SELECTION_MIN", near_selection_min)
    if small_blocks:
        monkeypatch.setattr(_descent, "_FEATURE_BLOCK", 7)
        monkeypatch.setattr(_line_search, "_THRESHOLD_SAMPLE", 8)
        monkeypatch.setattr(_line_search, "_SELECTION_ROWS", 2)

    X, groups, query_rows, U0, problem, selected = line_problem(6, 40, 5, 4, [0, 2, 5])
    with ThreadPoolExecutor(2) as pool:
        descent = _descent.Descent(X, problem.gram, U0, n_keep, renormalize, "projected", pool, 2)
        descent.entering_width = last_width
        U = descent.components().toarray()
        line, losses, G = projected_line(descent, problem, selected)
        G /= np.linalg.norm(G)
        np.testing.assert_allclose(line(0.0), losses.sum(), rtol=1e-5)
        for mu in [1e-3, 0.05, 0.3, 1.0, 3.0]:
            moved = brute_force_projection(U - mu * G, n_keep, renormalize)
            expected = brute_force_losses(X.astype(np.float64), moved, groups, query_rows[selected], 1e-3).sum()
            np.testing.assert_allclose(line(mu), expected, rtol=1e-4, atol=1e-9)
        # The line only proposes the step's point; the descent commits it.
        proposal = line.proposal(0.3)
        np.testing.assert_array_equal(descent.components().toarray(), U)
        descent._commit(proposal)
        moved = brute_force_projection(U - 0.3 * G, n_keep, renormalize)
        np.testing.assert_allclose(descent.components().toarray(), moved, atol=1e-5)
        np.testing.assert_allclose(descent.Y, X @ moved, atol=1e-5)
        np.testing.assert_array_equal(descent.UT, descent.components().toarray().T)


@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("n_keep, entering", [(3, 1), (12, 2), (60, 64)])
@pytest.mark.parametrize("first_compared", [1, 16])
def test_trials_move_the_entries_that_the_full_selection_moves(
    renormalize, n_keep, entering, first_compared, monkeypatch
):
    # A trial selects among the support entries near the threshold and the entering
    # candidates only (ProjectedLine._near_threshold); it must drop and admit exactly
    # the entries that the selection over all M + C candidates of every column does
    # (ProjectedLine._candidates), with the same values, and the same column norms to
    # rounding, at steps tried in any order (the near entries are cached from the
    # largest step tried), through widenings of the candidates, and whatever number
    # of pairs each column compares first (ProjectedLine._compare doubles them: from
    # 1, every column that lets entries in doubles at least once).
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(_line_search, "_ENTERING_CANDIDATES", entering)
    monkeypatch.setattr(_line_search, "_FIRST_COMPARED", first_compared)
    monkeypatch.setattr(_line_search, "_NEAR_SELECTION_MIN", 0)
    X, groups, query_rows, U0, problem, selected = line_problem(8, 200, 6, 6, [0, 3, 5, 7])
    with ThreadPoolExecutor(2) as pool:
        descent = _descent.Descent(X, problem.gram, U0, n_keep, renormalize, "projected", pool, 2)
        line, _, _ = projected_line(descent, problem, selected)
        steps = np.geomspace(1e-3, 30.0, 14)
        shuffled = np.random.default_rng(8).permutation(steps)
        n_moved = 0
        for mu in np.concatenate([steps[::-1], steps, shuffled]):
            moves = line._near_threshold(mu)
            assert moves is not None
            out_rows, out_at, out_values, in_rows, in_at, in_values, norms = moves
            values, chosen = line._candidates(mu)
            dropped = ~chosen[:, :n_keep]
            entered = chosen[:, n_keep:]
            np.testing.assert_array_equal(np.sort(out_rows * n_keep + out_at), np.flatnonzero(dropped))
            expected_in = np.flatnonzero(entered)
            order = np.argsort(in_rows * entered.shape[1] + in_at)
            np.testing.assert_array_equal((in_rows * entered.shape[1] + in_at)[order], expected_in)
            np.testing.assert_array_equal(out_values, -values[:, :n_keep][dropped])
            np.testing.assert_array_equal(in_values[order], values[:, n_keep:][entered])
            if renormalize:
                expected = np.linalg.norm(np.where(chosen, values, 0.0), axis=1)
                np.testing.assert_allclose(norms, expected, rtol=1e-12)
            else:
                assert norms is None
            n_moved += out_rows.size
        assert n_moved > 0


def test_a_tie_at_the_threshold_leaves_the_trial_to_the_full_selection(monkeypatch):
    # Two candidates of equal magnitude at the threshold: which one enters takes the
    # full selection's exact count, so the trial declines (returns None) and the
    # objective still comes out right.
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(_line_search, "_NEAR_SELECTION_MIN", 0)
    X, groups, query_rows, U0, problem, selected = line_problem(6, 40, 5, 4, [0, 2, 5])
    with ThreadPoolExecutor(2) as pool:
        descent = _descent.Descent(X, problem.gram, U0, 4, True, "projected", pool, 2)
        line, _, _ = projected_line(descent, problem, selected)
        # Column 0 at a step (a power of 2, for exact products) where none of its
        # candidates enters: its largest made exactly as large as its smallest entry.
        for mu in 0.5 ** np.arange(1, 8):
            _, chosen = line._candidates(mu)
            if not chosen[0, 4:].any():
                break
        smallest = np.min(np.abs(line.inside_values[0] - mu * line.inside_gradient[0]))
        line.outside_gradient[0, np.argmax(line.outside_slope[0])] = smallest / mu
        line._index_outside()
        assert line._near_threshold(mu) is None
        # The full selection keeps exactly M = 4 entries per column, the tie included.
        _, chosen = line._candidates(mu)
        assert (np.count_nonzero(chosen, axis=1) == 4).all()
        Y, _, _ = line.projected_scores(mu)
        expected = problem.losses_of_scores(Y[line.rows] @ Y.T, selected).sum()
        assert line(mu) == expected


def test_projected_step_learns_at_high_sparsity():
    # The regression that matters (Fig. 4 of the paper): at tau = 0.99 the learned
    # projector must rank the training set far better than its thresholded-PCA start.
    # The literal step (searched before the l0 projection, which then discards 99 % of
    # it) gains a few points here; the step searched at the projected point gains 36.
    X, groups, is_query = grouped(30, 3, 2000, noise=2.0, seed=0)
    maps, objectives = {}, {}
    for line_search in ("projected", "dense"):
        start = SparseRankProjector(8, sparsity=0.99, max_iter=0).fit(X, groups)
        learned = SparseRankProjector(8, sparsity=0.99, max_iter=100, line_search=line_search, random_state=0).fit(
            X, groups
        )
        maps[line_search] = [holidays_map(model.transform(X), groups, is_query) for model in (start, learned)]
        objectives[line_search] = learned.objective_
    initial, learned = maps["projected"]
    assert initial < 0.65 and learned - initial > 0.25
    assert objectives["projected"][-1] < objectives["projected"][0] / 3
    assert maps["dense"][1] - maps["dense"][0] < 0.15
    # Every projected step lowers the selected queries' objective, so the history of
    # the whole objective falls on average and ends far below the dense variant's.
    assert objectives["projected"][-1] < objectives["dense"][-1] / 2


def test_history_records_the_objective_before_projection():
    X, groups, _ = grouped(15, 3, 200, noise=1.5, seed=1)
    for line_search in ("projected", "dense"):
        model = SparseRankProjector(6, sparsity=0.9, max_iter=10, line_search=line_search, random_state=0).fit(
            X, groups
        )
        assert model.objective_unprojected_.shape == (model.n_iter_,)
        assert np.all(np.isfinite(model.objective_unprojected_))
    # Without sparsity nothing is projected: before == after (up to renormalisation,
    # off here).
    model = SparseRankProjector(6, sparsity=0.0, max_iter=10, renormalize=False, random_state=0).fit(X, groups)
    np.testing.assert_allclose(model.objective_unprojected_, model.objective_[1:], rtol=1e-4)


def test_training_stops_after_n_iter_no_change_steps_that_do_not_move(monkeypatch):
    """A line search that finds no step (mu = 0) n_iter_no_change times in a row ends
    the training there; zeros broken by a step do not, and None runs to max_iter.
    The line search is replaced by a fixed sequence of step sizes."""
    X, groups, _ = grouped(8, 3, 40, noise=1.5, seed=2)
    pattern = []
    monkeypatch.setattr(_descent.Descent, "step", lambda self, problem, selected: (pattern.pop(0), 1.0))

    def fit(n, sizes):
        pattern[:] = list(sizes)
        return SparseRankProjector(4, sparsity=0.5, max_iter=30, n_iter_no_change=n, random_state=0).fit(X, groups)

    stalled = fit(7, [0.0] * 30)
    assert stalled.n_iter_ == 7 and stalled.objective_[-1] > stalled.tol
    np.testing.assert_array_equal(stalled.step_sizes_, 0.0)
    # Two zeros then a step, over and over: never three zeros in a row.
    assert fit(3, [0.0, 0.0, 0.5] * 10).n_iter_ == 30
    # Four steps, then zeros: the third zero in a row ends it.
    late = fit(3, [0.5] * 4 + [0.0] * 26)
    assert late.n_iter_ == 7
    np.testing.assert_array_equal(late.step_sizes_, [0.5] * 4 + [0.0] * 3)
    assert fit(None, [0.0] * 30).n_iter_ == 30


def test_a_callback_returning_true_stops_at_the_state_it_was_shown():
    """A callback that returns True at iteration 6 ends the fit there, with exactly the
    projectors, objective and steps of a fit with max_iter = 6."""
    X, groups, _ = grouped(8, 3, 40, noise=1.5, seed=2)
    fit = lambda **kwargs: SparseRankProjector(  # noqa: E731
        4, **{"sparsity": 0.5, "max_iter": 20, "callback_every": 3, "random_state": 0, **kwargs}
    ).fit(X, groups)
    shown = []
    stopped = fit(callback=lambda iteration, model: shown.append(iteration) or iteration == 6)
    assert shown == [0, 3, 6] and stopped.n_iter_ == 6
    reference = fit(max_iter=6)
    np.testing.assert_array_equal(stopped.components_.toarray(), reference.components_.toarray())
    np.testing.assert_array_equal(stopped.objective_, reference.objective_)
    np.testing.assert_array_equal(stopped.step_sizes_, reference.step_sizes_)
    assert fit(callback=lambda iteration, model: None).n_iter_ > 6


@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("sparsity", [0.0, 0.9])
def test_starting_projector_is_the_l0_projection_of_pca(sparsity, renormalize):
    """Algorithm 1's first line: with no step, components_ is P_M of the PCA axes of
    the training signatures (M = 20 of D = 200 at tau = 0.9), by a full sort, with
    unit columns when renormalize (the identity at tau = 0)."""
    from ndir.projection.pca import PCAProjection

    X, groups, _ = grouped(15, 3, 200, noise=1.5, seed=1)
    projector = SparseRankProjector(6, sparsity=sparsity, max_iter=0, renormalize=renormalize).fit(X, groups)
    pca = PCAProjection(6).fit(X).components_.astype(np.float64)
    n_keep = round((1.0 - sparsity) * 200)
    expected = brute_force_projection(pca, n_keep, renormalize)
    assert projector.n_iter_ == 0 and projector.n_nonzero_ == n_keep
    np.testing.assert_allclose(projector.components_.toarray(), expected, atol=1e-6)


@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("sparsity", [0.0, 0.5, 0.9, 0.99])
def test_thresholded_components_are_the_start_without_the_ranking_problem(sparsity, renormalize):
    """thresholded_components (what readings and browse score as thresholded PCA):
    the components_ of a fit with max_iter=0 from the same axes, bit for bit, stored
    alike (M entries per column, explicit zeros kept), at every tau."""
    from ndir.projection.pca import PCAProjection
    from ndir.projection.sparse_rank import thresholded_components

    X, groups, _ = grouped(15, 3, 200, noise=1.5, seed=2)
    axes = PCAProjection(6).fit(X).components_
    axes[:5, 1] = 0.0  # ties at zero within a column
    original = axes.copy()
    fitted = SparseRankProjector(6, sparsity=sparsity, max_iter=0, init=axes, renormalize=renormalize).fit(X, groups)
    start = thresholded_components(axes, sparsity, renormalize)
    assert start.format == fitted.components_.format == "csc" and start.dtype == np.float32
    assert start.nnz == fitted.components_.nnz == 6 * fitted.n_nonzero_
    for part in ("data", "indices", "indptr"):
        np.testing.assert_array_equal(getattr(start, part), getattr(fitted.components_, part))
    np.testing.assert_array_equal(axes, original)  # the caller's axes are left as they were


def test_dense_steps_keep_unit_columns_and_y_equals_x_u():
    """Without sparsity, renormalize divides each column by |u_r - mu g_r|, computed
    from Y, B and K rather than from U, and Y is updated from the step rather than
    recomputed (before _REFRESH_EVERY steps, which would renormalise U from scratch):
    the columns of U must have unit norm after every step, and Y must stay X U."""
    from concurrent.futures import ThreadPoolExecutor

    X, groups, _ = grouped(15, 3, 80, noise=2.0, seed=3)
    model = SparseRankProjector(n_components=5, sparsity=0.0, max_iter=5, tol=0.0, random_state=0).fit(X, groups)
    assert model.n_iter_ == 5 < _descent._REFRESH_EVERY
    assert np.all(model.step_sizes_ > 0.0)
    np.testing.assert_allclose(sp.linalg.norm(model.components_, axis=0), 1.0, atol=1e-5)

    X, groups, query_rows, U0, problem, selected = line_problem(6, 40, 5, 4, [0, 2, 5])
    with ThreadPoolExecutor(2) as pool:
        descent = _descent.Descent(X, problem.gram, U0, 40, True, "dense", pool, 2)
        mu, _ = descent.step(problem, selected)
        assert mu > 0.0 and not descent.refresh_due()
        U = descent.components().toarray().astype(np.float64)
        np.testing.assert_allclose(np.linalg.norm(U, axis=0), 1.0, atol=1e-5)
        np.testing.assert_allclose(descent.Y, X.astype(np.float64) @ U, atol=1e-5)


@pytest.mark.parametrize("renormalize", [True, False])
def test_dense_steps_follow_the_explicit_update_of_u(renormalize, monkeypatch):
    """Without sparsity the descent holds U as U_0 diag(s) + X^T A and never forms it
    during a step: after each of 7 steps its components equal U updated explicitly, in
    float64, as Algorithm 1 writes it (U - mu X^T B with the step's mu and B, then unit
    columns), and Y equals X U; with refreshes (every 3rd step here) recomputing Y and
    the norms from s and A."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(_descent, "_REFRESH_EVERY", 3)
    X, groups, query_rows, U0, problem, _ = line_problem(8, 30, 4, 6, [0])
    X64 = X.astype(np.float64)
    U = U0.astype(np.float64)
    if renormalize:
        U /= np.linalg.norm(U, axis=0)
    rng = np.random.default_rng(2)
    with ThreadPoolExecutor(2) as pool:
        descent = _descent.Descent(X, problem.gram, U0, 30, renormalize, "dense", pool, 2)
        for _ in range(7):
            selected = rng.choice(len(query_rows), 4, replace=False)
            _, _, _, _, B, _ = _ranking.gradient(problem, descent.Y, selected)
            mu, _ = descent.step(problem, selected)
            assert mu > 0.0
            U = U - mu * X64.T @ B
            if renormalize:
                U /= np.linalg.norm(U, axis=0)
            np.testing.assert_allclose(descent.components().toarray(), U, rtol=0, atol=1e-5)
            np.testing.assert_allclose(descent.Y, X64 @ U, rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("feature_block", [1024, 16])
@pytest.mark.parametrize("gather_max", [0.0, 1.0])
@pytest.mark.parametrize("sparse_density", [0.0, 1.0])
def test_gradient_factors_gather_or_multiply_the_rows_of_x(
    sparse_density, gather_max, feature_block, dtype, monkeypatch
):
    """dF X goes through dF's non-zeros when they are few (_SPARSE_LOSS_DENSITY);
    otherwise it reads only the rows of X whose column of dF has a non-zero when they
    are few (_GATHER_ROWS_MAX), the whole X otherwise: each way left^T right is G of
    Eq. 14, here summed query by query, sum_q x_q (dF[q] Y)^T + (X^T dF[q]) y_q^T,
    for a dF with 3 non-zero columns out of 18 (the late-training case), one of them
    all ones and one all minus ones (an image each query counts once, with a weight of
    1: a non-zero column whatever its values), and dF X is the float64 product rounded
    to float32 (float64 factors) or float32 BLAS's product (float32 factors, the dense
    search's update). With blocks of 16 features, each of the two threads' 20 features
    spans two blocks, the second one short."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(_descent, "_SPARSE_LOSS_DENSITY", sparse_density)
    monkeypatch.setattr(_descent, "_GATHER_ROWS_MAX", gather_max)
    monkeypatch.setattr(_descent, "_LOSS_FEATURE_BLOCK", feature_block)
    X, groups, query_rows, U0, problem, _ = line_problem(6, 40, 5, 4, [0])
    rows = query_rows[[0, 2, 5]]
    rng = np.random.default_rng(9)
    dF = np.zeros((rows.size, X.shape[0]))
    dF[:, 4] = rng.standard_normal(rows.size)
    dF[:, 11], dF[:, 16] = 1.0, -1.0
    with ThreadPoolExecutor(2) as pool:
        descent = _descent.Descent(X, problem.gram, U0, 40, False, "dense", pool, 2)
        Z = dF @ descent.Y
        left, right = descent.gradient_factors(rows, dF, Z, dtype)
    assert left.dtype == right.dtype == dtype
    X64, Y = X.astype(np.float64), descent.Y
    G = sum(np.outer(X64[q], dF[k] @ Y) + np.outer(X64.T @ dF[k], Y[q]) for k, q in enumerate(rows))
    np.testing.assert_allclose(left.T.astype(np.float64) @ right, G, atol=1e-5 * np.abs(G).max())
    loss_rows = sum(np.outer(dF[:, j], X64[j]) for j in (4, 11, 16))
    if dtype == np.float64:
        np.testing.assert_allclose(left[rows.size :], loss_rows.astype(np.float32), rtol=2**-23, atol=0)
    else:
        np.testing.assert_allclose(left[rows.size :], loss_rows, rtol=1e-6, atol=1e-6 * np.abs(loss_rows).max())


@pytest.mark.parametrize("line_search", ["projected", "dense"])
def test_step_reports_the_objective_before_the_l0_projection(line_search):
    """A sparse step moves U to P_M(U - mu G), G = X^T B of the step's queries (full
    sort, unit columns), mu the step size it returns; its second value
    (objective_unprojected_) is the loss over all queries at U - mu G, before the
    projection, by loops."""
    from concurrent.futures import ThreadPoolExecutor

    X, groups, query_rows, U0, problem, selected = line_problem(6, 40, 5, 4, [0, 2, 5])
    with ThreadPoolExecutor(2) as pool:
        descent = _descent.Descent(X, problem.gram, U0, 12, True, line_search, pool, 2)
        U = descent.components().toarray().astype(np.float64)
        B = _ranking.gradient(problem, descent.Y, selected)[4]
        mu, unprojected = descent.step(problem, selected)
        after = descent.components().toarray().astype(np.float64)
    assert mu > 0.0
    X64 = X.astype(np.float64)
    # The step lands on P_M(U - mu X^T B) with unit columns: mu is the step taken
    # along G = X^T B, whatever the search's own parametrisation.
    moved = U - mu * X64.T @ B
    np.testing.assert_allclose(after, brute_force_projection(moved, 12, True), atol=2e-5)
    expected = brute_force_losses(X64, moved, groups, query_rows, 1e-3)
    np.testing.assert_allclose(unprojected, expected.sum(), rtol=1e-5)


@pytest.mark.parametrize("gather_features_max", [0.0, 1.0])
@pytest.mark.parametrize("line_search", ["projected", "dense"])
def test_sparse_products_over_several_blocks_of_images(line_search, gather_features_max, monkeypatch):
    """The sparse X U (Descent.product) and X C (sparse_rows_product) read X^T in
    blocks of _SPARSE_IMAGES images: with blocks of 5 of the 24 training images (a last
    one of 4), both equal the float64 products computed densely (the block split only
    changes which images a product covers, not the sums), and the Y of the initial l0
    projection is X P_M(U0) (brute-force projection). X C reads every row of X^T, or
    gathers those of C's entries first (_GATHER_FEATURES_MAX): the same bits."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(_descent, "_SPARSE_IMAGES", 5)
    monkeypatch.setattr(_descent, "_GATHER_FEATURES_MAX", gather_features_max)
    X, groups, query_rows, U0, problem, _ = line_problem(8, 200, 6, 7, [0])
    X64 = X.astype(np.float64)
    n_keep = 12  # 6 % of D = 200: below SPARSE_DENSITY_MAX, the sparse product
    with ThreadPoolExecutor(2) as pool:
        descent = _descent.Descent(X, problem.gram, U0, n_keep, True, line_search, pool, 2)
        assert descent.sparse_product and len(descent.XT_blocks) == 5
        assert [block.shape[1] for block in descent.XT_blocks] == [5, 5, 5, 5, 4]
        start = brute_force_projection(U0.astype(np.float64), n_keep, True)
        np.testing.assert_allclose(descent.Y, X64 @ start, rtol=1e-5, atol=1e-6)

        rng = np.random.default_rng(11)
        kept = np.sort(np.stack([rng.choice(200, 9, replace=False) for _ in range(6)]), axis=1)
        values = rng.standard_normal((6, 9)).astype(np.float32)
        V = np.zeros((200, 6))
        for r in range(6):
            V[kept[r], r] = values[r]
        np.testing.assert_allclose(descent.product(kept, values), X64 @ V, rtol=1e-5, atol=1e-6)

        CT = sp.random(6, 200, density=0.05, random_state=12, format="csr", dtype=np.float32)
        assert CT.nnz <= _descent.SPARSE_DENSITY_MAX * CT.shape[0] * CT.shape[1]
        C = CT.toarray().T.astype(np.float64)
        np.testing.assert_allclose(descent.sparse_rows_product(CT), X64 @ C, rtol=1e-5, atol=1e-6)
        # Through C^T in CSC, the same bits as row by row (each output sums its terms
        # in increasing feature order either way).
        by_rows = np.hstack([CT.tocsr() @ XT for XT in descent.XT_blocks]).T
        np.testing.assert_array_equal(descent.sparse_rows_product(CT), by_rows)

        # The same products with a single block of all 24 images.
        single = _descent.Descent.__new__(_descent.Descent)
        single.__dict__.update(descent.__dict__)
        single.XT_blocks = [np.ascontiguousarray(X.T)]
        np.testing.assert_allclose(single.product(kept, values), descent.product(kept, values), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(
            single.sparse_rows_product(CT), descent.sparse_rows_product(CT), rtol=1e-6, atol=1e-7
        )


def correctly_rounded_norms(UT):
    """Each row of UT (float32) divided by its float64 norm, rounded to float32 once."""
    UT64 = UT.astype(np.float64)
    return (UT64 / np.sqrt(np.einsum("ij,ij->i", UT64, UT64))[:, None]).astype(np.float32)


def test_l0_projection_renormalizes_by_the_float64_norm():
    # float32's np.linalg.norm of a row is BLAS's snrm2, whose last bit changed with
    # the OpenBLAS kernel (every kept value of the column with it): the kept values are
    # the row over its float64 norm, rounded once.
    UT = np.random.default_rng(11).standard_normal((40, 1000)).astype(np.float32)
    _, values, _ = _descent._l0_project(UT.copy(), 1000, renormalize=True)
    np.testing.assert_array_equal(values, correctly_rounded_norms(UT))


def test_ranking_gram_matrix_is_summed_in_float64():
    # The pivots and X G = K B come from the Gram matrix: exact float64 sums of the
    # float32 signatures (to 1e-15), not float32 BLAS's (1e-7, and kernel-dependent).
    X, groups, is_query = grouped(30, 3, 2000, noise=1.0, seed=12)
    problem = _ranking.RankingProblem(X, groups, np.flatnonzero(is_query), 1e-2)
    X64 = X.astype(np.float64)
    np.testing.assert_allclose(problem.gram, X64 @ X64.T, rtol=1e-14, atol=1e-15)


def test_gradient_entries_are_float64_sums_rounded_once():
    # G^T's entries, which decide what the l0 projection keeps, are the float64
    # products of the float64 factors rounded to float32 once: the same bits whatever
    # the BLAS kernel (float32 BLAS's were not).
    from concurrent.futures import ThreadPoolExecutor

    X, groups, query_rows, U0, problem, selected = line_problem(20, 3000, 6, 13, range(8))
    with ThreadPoolExecutor(1) as pool:
        descent = _descent.Descent(X, problem.gram, U0, 30, True, "projected", pool, 1)
        _, _, dF, Z, _, _ = _ranking.gradient(problem, descent.Y, selected)
        left, right = descent.gradient_factors(query_rows[selected], dF, Z)
        assert left.dtype == right.dtype == np.float64
        inside, rows, columns, values = descent.gradient_entries(left, right, np.zeros(6, dtype=np.float32))
    # dF X: float64 sums of exact products, rounded to float32 once.
    dF_X = (dF @ X.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(left[len(selected) :], dF_X)
    GT = (right.T @ left).astype(np.float32)
    np.testing.assert_array_equal(inside, np.take_along_axis(GT, descent.kept, axis=1))
    np.testing.assert_array_equal(values, GT[rows, columns])


def test_y_is_recomputed_from_x_u_and_u_renormalised_every_refresh_steps(monkeypatch):
    """Every _REFRESH_EVERY-th dense step recomputes Y as X U and rescales U's columns
    to unit norm from scratch, wiping out the drift of the steps that update them:
    here a drift injected into Y and into a column of U before the refresh step
    (_REFRESH_EVERY = 2) is gone after it, and stays after a step that is not one.
    Without sparsity U = U_0 diag(s) + X^T A: the drift of its column 1 is injected
    into s and A."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(_descent, "_REFRESH_EVERY", 2)
    X, groups, query_rows, U0, problem, selected = line_problem(6, 40, 5, 4, [0, 2, 5])
    drift = np.random.default_rng(5).standard_normal((X.shape[0], 5)) * 1e-2
    with ThreadPoolExecutor(2) as pool:
        descent = _descent.Descent(X, problem.gram, U0, 40, True, "dense", pool, 2)
        for refresh in (False, True):
            descent.Y = descent.Y + drift
            descent.scales[1] *= 1.25
            descent.coefficients[:, 1] *= 1.25
            mu, _ = descent.step(problem, selected)
            assert mu > 0.0 and descent.refresh_due() == refresh
            Y, UT = descent.Y.copy(), descent.components().toarray().T.astype(np.float64)
            exact = X.astype(np.float64) @ UT.T
            if refresh:
                np.testing.assert_allclose(Y, exact, atol=1e-5)
                np.testing.assert_allclose(np.linalg.norm(UT, axis=1), 1.0, atol=1e-6)
            else:
                assert np.abs(Y - exact).max() > 1e-3
                assert abs(np.linalg.norm(UT[1]) - 1.0) > 1e-2


@pytest.mark.parametrize("line_search", ["projected", "dense"])
@pytest.mark.parametrize("n_keep", [3, 6])
def test_a_step_on_queries_whose_constraints_hold_does_not_move(line_search, n_keep):
    """Selected queries that violate nothing have no gradient: the step reports mu = 0
    (U did not move, which the stall count of n_iter_no_change counts on), leaves U and
    Y as they were, and returns the objective over all queries at U, by loops. Groups
    0-2 lie on axes of their own; group 3's third image lies on group 2's axis, so the
    queries of groups 2 and 3 violate a constraint and those of groups 0 and 1 none."""
    from concurrent.futures import ThreadPoolExecutor

    X = np.zeros((12, 6), dtype=np.float32)
    X[np.arange(12), [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 2]] = 1.0
    groups = np.repeat(np.arange(4), 3)
    query_rows = np.array([0, 3, 6, 9])
    problem = _ranking.RankingProblem(X, groups, query_rows, 1e-3)
    U0 = np.eye(6, dtype=np.float32)[:, :4]
    expected = brute_force_losses(X.astype(np.float64), U0.astype(np.float64), groups, query_rows, 1e-3)
    assert np.all(expected[:2] == 0.0) and np.all(expected[2:] > 0.0)
    with ThreadPoolExecutor(2) as pool:
        descent = _descent.Descent(X, problem.gram, U0, n_keep, True, line_search, pool, 2)
        U, Y = descent.components().toarray(), descent.Y.copy()
        mu, objective = descent.step(problem, np.array([0, 1]))
        assert mu == 0.0
        np.testing.assert_allclose(objective, expected.sum(), rtol=1e-6)
        np.testing.assert_array_equal(descent.components().toarray(), U)
        np.testing.assert_array_equal(descent.Y, Y)


@pytest.mark.parametrize("sparsity", [0.5, 0.0])
def test_a_zero_projector_stays_zero_among_unit_columns(sparsity, monkeypatch):
    """A column of U that is zero (here in a given start) has a zero gradient (its
    scores are all zero) and stays zero through projected steps, or dense ones whose
    norms are recomputed at every other step (_REFRESH_EVERY = 2), with renormalize:
    no division of 0 by its norm 0 (NaN), while the other columns keep unit norms and
    the steps move."""
    monkeypatch.setattr(_descent, "_REFRESH_EVERY", 2)
    X, groups, _ = grouped(8, 3, 40, noise=1.5, seed=2)
    init = np.random.default_rng(0).standard_normal((40, 4)).astype(np.float32)
    init[:, 2] = 0.0
    model = SparseRankProjector(4, sparsity=sparsity, max_iter=5, tol=0.0, init=init, random_state=0).fit(X, groups)
    U = model.components_.toarray()
    assert np.all(model.step_sizes_ > 0.0) and np.all(np.isfinite(model.objective_))
    assert np.all(U[:, 2] == 0.0)
    np.testing.assert_allclose(np.linalg.norm(U[:, [0, 1, 3]], axis=0), 1.0, atol=1e-6)


def test_fit_reads_the_callers_transposed_blocks(monkeypatch):
    """fit(transposed=TransposedBlocks(X)): the descent's sparse products read the
    caller's blocks of X^T (the same arrays, no copy of its own), and the projectors
    and their history are those of a fit without them; blocks of other signatures are
    refused, naming the parameter."""
    from ndir.projection.product import TransposedBlocks

    X, groups, _ = grouped(8, 3, 200, noise=1.0, seed=21)
    settings = dict(n_components=6, sparsity=0.94, max_iter=8, n_queries_per_step=4, random_state=0)
    plain = SparseRankProjector(**settings).fit(X, groups)
    seen = []
    original = _descent.Descent.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        seen.append(self.XT_blocks)

    monkeypatch.setattr(_descent.Descent, "__init__", spy)
    transposed = TransposedBlocks(X)
    shared = SparseRankProjector(**settings).fit(X, groups, transposed=transposed)
    assert seen[-1] is transposed.blocks()
    np.testing.assert_array_equal(shared.components_.toarray(), plain.components_.toarray())
    np.testing.assert_array_equal(shared.objective_, plain.objective_)
    with pytest.raises(ValueError, match="transposed holds other signatures"):
        SparseRankProjector(**settings).fit(X, groups, transposed=TransposedBlocks(X[::-1].copy()))


def test_the_random_start_is_a_gaussian_draw_with_unit_columns():
    """init='random': each projector (column) is a standard normal draw of the
    estimator's random_state scaled to unit norm; with tau = 0 and no step, that start
    is what fit returns (rows scaled instead would turn the columns)."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((12, 10)).astype(np.float32)
    groups = np.repeat(np.arange(4), 3)
    model = SparseRankProjector(n_components=3, sparsity=0.0, max_iter=0, init="random", random_state=5)
    U = model.fit(X, groups).components_.toarray()
    draw = np.random.RandomState(5).standard_normal((10, 3)).astype(np.float32)
    np.testing.assert_allclose(U, draw / np.linalg.norm(draw, axis=0), rtol=1e-5, atol=1e-6)


def test_the_training_says_which_rule_stopped_it():
    from ndir.projection.sparse_rank import STOP_CALLBACK, STOP_MAX_ITER, STOP_TOL

    rng = np.random.default_rng(2)
    X = rng.standard_normal((12, 10)).astype(np.float32)
    groups = np.repeat(np.arange(4), 3)

    def fit(**params):
        return SparseRankProjector(n_components=3, sparsity=0.5, random_state=0, **params).fit(X, groups)

    assert fit(max_iter=3, n_iter_no_change=None).stop_reason_ == STOP_MAX_ITER
    model = fit(max_iter=3, tol=1e9)
    assert (model.stop_reason_, model.n_iter_) == (STOP_TOL, 0)
    model = fit(max_iter=20, callback=lambda step, model: step >= 2, callback_every=1)
    assert (model.stop_reason_, model.n_iter_) == (STOP_CALLBACK, 2)


def counted_trials(monkeypatch):
    """A list that gets each trial (mu, objective) of the projected line searches."""
    trials = []
    evaluate = _line_search.ProjectedLine.__call__

    def counted(line, mu):
        trials.append((mu, evaluate(line, mu)))
        return trials[-1][1]

    monkeypatch.setattr(_line_search.ProjectedLine, "__call__", counted)
    return trials


@pytest.mark.parametrize("sparsity", [0.9, 0.99])
def test_warm_started_search_learns_as_the_search_from_the_top(sparsity, monkeypatch):
    # The fast path against the one it replaces: every search from the top of its range
    # (an infinite factor: min(top, inf * last step) is the top). On these signatures
    # the steps are near the top, so the two paths differ little; on the default run's,
    # where steps are 0.1 % of the range, the warm start saves 40 % of the trials
    # (benchmarks/table2_spread.py measures what it does to Table II).
    X, groups, is_query = grouped(30, 3, 2000, noise=2.0, seed=0)
    results = {}
    for start, factor in (("warm", _descent._PROJECTED_WARM_START), ("top", np.inf)):
        monkeypatch.setattr(_descent, "_PROJECTED_WARM_START", factor)
        model = SparseRankProjector(8, sparsity=sparsity, max_iter=60, random_state=0).fit(X, groups)
        results[start] = holidays_map(model.transform(X), groups, is_query), model.objective_[-1]
    (warm_map, warm_objective), (top_map, top_objective) = results["warm"], results["top"]
    assert warm_map == pytest.approx(top_map, abs=0.02)
    assert warm_objective == pytest.approx(top_objective, rel=0.2, abs=1e-5)


def test_a_projected_step_keeps_its_step_for_the_next_search(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    X, _, _, U0, problem, selected = line_problem(6, 40, 4, 0, [0, 2])
    trials = counted_trials(monkeypatch)
    with ThreadPoolExecutor(1) as pool:
        descent = _descent.Descent(X, problem.gram, U0, 8, True, "projected", pool, 1)
        for _ in range(3):
            value_at_zero = float(problem.losses(descent.Y)[selected].sum())
            trials.clear()
            mu, _ = descent.step(problem, selected)
            best_mu, best_value = min(trials, key=lambda trial: trial[1])
            assert descent.last_step == (best_mu if best_value < value_at_zero else 0.0)
            assert (mu > 0.0) == (descent.last_step > 0.0)


def test_first_trial_grows_from_the_last_step_up_to_the_top_of_the_range():
    from concurrent.futures import ThreadPoolExecutor

    X, _, _, U0, problem, selected = line_problem(6, 40, 4, 0, [0, 2])
    golden_squared = _line_search.GOLDEN**2
    with ThreadPoolExecutor(1) as pool:
        descent = _descent.Descent(X, problem.gram, U0, 8, True, "projected", pool, 1)
        top = 2.0 * _descent._PROJECTED_FIRST_STEP
        assert descent.first_trial(2.0) == top  # before a step (and after a step of 0)
        descent.last_step = 1e-3
        assert descent.first_trial(2.0) == pytest.approx(1e-3 * golden_squared)
        descent.last_step = 1.0
        assert descent.first_trial(2.0) == top
        # A last step far below this one's best cannot hold it down: the bracket expands
        # from the first trial while the objective falls.
        descent.last_step = 1e-9
        line, losses, _ = projected_line(descent, problem, selected)
        trials = []

        def objective(mu):
            trials.append(mu)
            return line(mu)

        first = descent.first_trial(line.max_step)
        step = _line_search.golden_section_search(
            objective, float(losses.sum()), first, line.max_step, _descent._PROJECTED_RTOL
        )
        assert trials[0] == pytest.approx(1e-9 * golden_squared)
        assert step > 1e6 * trials[0]
