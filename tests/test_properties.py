"""Laws simple enough to state for every input, checked by hypothesis on small random
cases: retrieval scores do not depend on the order of the database, Recall@k grows
with k, and a projection of a row does not depend on its batch."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ndir.evaluation import holidays_map, map_from_scores, recall_at_k
from ndir.projection import PCAProjection, SparseRankProjector

# No example database: nothing written into the checkout (.hypothesis/).
SETTINGS = settings(max_examples=40, deadline=None, database=None)


@st.composite
def retrieval_cases(draw):
    """Groups of 2-4 images with small integer signatures (many exact ties), one query
    per group, and a permutation of the images."""
    sizes = draw(st.lists(st.integers(2, 4), min_size=2, max_size=6))
    groups = np.repeat(np.arange(len(sizes)), sizes)
    n, dims = groups.size, draw(st.integers(1, 4))
    values = draw(st.lists(st.integers(-2, 2), min_size=n * dims, max_size=n * dims))
    X = np.array(values, dtype=np.float32).reshape(n, dims)
    is_query = np.zeros(n, dtype=bool)
    is_query[np.cumsum([0] + sizes[:-1])] = True
    order = np.array(draw(st.permutations(range(n))))
    return X, groups, is_query, order


@SETTINGS
@given(retrieval_cases())
def test_map_does_not_depend_on_the_order_of_the_database(case):
    X, groups, is_query, order = case
    mean_ap, ap = holidays_map(X, groups, is_query, return_per_query=True)
    shuffled_map, shuffled_ap = holidays_map(X[order], groups[order], is_query[order], return_per_query=True)
    assert shuffled_map == pytest.approx(mean_ap, abs=1e-12)
    # Per query, in the order of the queries' rows.
    queries = np.flatnonzero(is_query)
    by_row = dict(zip(queries, ap))
    assert shuffled_ap == pytest.approx([by_row[order[row]] for row in np.flatnonzero(is_query[order])], abs=1e-12)
    assert 0.0 <= mean_ap <= 1.0


@SETTINGS
@given(retrieval_cases())
def test_map_from_scores_of_relabelled_groups_is_unchanged(case):
    X, groups, is_query, _ = case
    queries = np.flatnonzero(is_query)
    scores = X[queries].astype(np.float64) @ X.T.astype(np.float64)
    assert map_from_scores(scores, queries, 100 - 3 * groups) == map_from_scores(scores, queries, groups)


@SETTINGS
@given(retrieval_cases())
def test_recall_at_k_grows_with_k_and_reaches_one(case):
    X, groups, _, order = case
    n = groups.size
    recalls = recall_at_k(X, groups, ks=range(1, n))
    values = [recalls[k] for k in range(1, n)]
    assert all(a <= b for a, b in zip(values, values[1:]))
    assert values[-1] == 1.0 and 0.0 <= values[0]
    assert recall_at_k(X[order], groups[order], ks=range(1, n)) == recalls


@pytest.fixture(scope="module")
def projectors():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(8), 3)
    X = (rng.normal(size=(8, 30))[groups] + rng.normal(size=(24, 30))).astype(np.float32)
    return [
        SparseRankProjector(4, sparsity=0.9, max_iter=5, random_state=0).fit(X, groups),
        SparseRankProjector(4, sparsity=0.0, max_iter=5, random_state=0).fit(X, groups),
        PCAProjection(4).fit(X),
    ]


@SETTINGS
@given(
    st.integers(1, 12).flatmap(
        lambda n: st.tuples(
            st.lists(st.floats(-3, 3, width=32), min_size=30 * n, max_size=30 * n),
            st.permutations(range(n)),
        )
    )
)
def test_projection_of_a_row_does_not_depend_on_its_batch(projectors, case):
    values, order = case
    X = np.array(values, dtype=np.float32).reshape(-1, 30)
    order = np.array(order)
    for projector in projectors:
        Y = projector.transform(X)
        np.testing.assert_array_equal(projector.transform(X[order]), Y[order])
        np.testing.assert_array_equal(projector.transform(X[:1]), Y[:1])
