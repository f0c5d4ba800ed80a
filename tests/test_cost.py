"""Tests of ndir.projection.cost: hand-counted storage, and dense/sparse agreement."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from ndir import encoding
from ndir.projection import cost
from ndir.projection.cost import projection_cost, projection_latency
from ndir.projection.product import sparse_batch_product


def column_sparse(n_features, n_components, per_column, seed):
    """(D, R) float32 CSC matrix with ``per_column`` random non-zeros in each column."""
    rng = np.random.default_rng(seed)
    rows = np.concatenate([np.sort(rng.choice(n_features, per_column, replace=False)) for _ in range(n_components)])
    values = rng.standard_normal(rows.size).astype(np.float32)
    indptr = np.arange(n_components + 1) * per_column
    return sp.csc_array((values, rows, indptr), shape=(n_features, n_components))


def test_hand_counted_cost():
    # D = 100, R = 4, one non-zero per column: 4 values + 4 row indices (4 bytes each)
    # + 5 column pointers (4 bytes) = 52 bytes against 100 * 4 * 4 = 1600 dense.
    cost = projection_cost(column_sparse(100, 4, 1, seed=0))
    assert cost["nnz"] == 4
    assert cost["bytes_dense"] == 1600
    assert cost["bytes_sparse"] == 52
    assert cost["storage_ratio"] == pytest.approx(1600 / 52)
    assert cost["madds_dense"] == 400 and cost["madds_sparse"] == 4
    assert cost["madds_ratio"] == pytest.approx(100.0)
    assert cost["sparsity"] == pytest.approx(0.99)
    assert cost["equivalent_full_projectors"] == pytest.approx(0.04)


def test_madds_ratio_of_one_entry_is_every_entry_and_of_none_is_finite():
    """One stored entry costs one multiply-add against D R dense: the ratio is D R. A
    projector with no entry is priced as one (a finite ratio, not a division by zero)."""
    one = sp.csc_array(([2.0], ([3], [1])), shape=(10, 4), dtype=np.float32)
    assert projection_cost(one)["madds_ratio"] == 40.0
    empty = projection_cost(np.zeros((10, 4), dtype=np.float32))
    assert empty["nnz"] == 0 and empty["madds_ratio"] == 40.0


def counted_projection(U, x):
    """y = x U by an explicit loop over U's entries, counting the multiply-adds done."""
    y = np.zeros(U.shape[1])
    madds = 0
    for k, r in zip(*np.nonzero(U)):
        y[r] += x[k] * U[k, r]
        madds += 1
    return y, madds


@pytest.mark.parametrize(("per_column", "seed"), [(1, 5), (7, 6), (30, 7)])
def test_storage_and_arithmetic_equal_an_independent_count(per_column, seed, tmp_path):
    """Bytes: the size of the CSC arrays that scipy writes (int32 indices, float32
    values); multiply-adds: those an entry-by-entry projection performs."""
    U = column_sparse(200, 6, per_column, seed)
    cost = projection_cost(U)
    csc = sp.csc_array(U.toarray())
    stored = csc.data.nbytes + csc.indices.astype(np.int32).nbytes + csc.indptr.astype(np.int32).nbytes
    assert cost["bytes_sparse"] == stored
    assert cost["bytes_dense"] == U.toarray().astype(np.float32).nbytes
    x = np.random.default_rng(seed).standard_normal(200)
    y, madds = counted_projection(U.toarray(), x)
    np.testing.assert_allclose(y, x @ U.toarray(), rtol=1e-6)
    assert cost["madds_sparse"] == madds
    assert cost["madds_dense"] == counted_projection(np.ones((200, 6)), x)[1]
    assert cost["equivalent_full_projectors"] == pytest.approx(madds / 200)


def test_paper_arithmetic():
    # §V-D: 256 projectors at tau = 99 % cost as much as 2.56 full ones (FV-512,
    # D = 81,920, M = round(0.01 D) = 819 per column), and 32 full projectors are
    # 12.5 times more costly.
    cost = projection_cost(column_sparse(81920, 256, 819, seed=1))
    assert cost["equivalent_full_projectors"] == pytest.approx(2.56, abs=0.005)
    assert 32 / cost["equivalent_full_projectors"] == pytest.approx(12.5, rel=0.005)
    assert cost["sparsity"] == pytest.approx(0.99, abs=1e-4)
    assert cost["storage_ratio"] == pytest.approx(4 * 81920 * 256 / (8 * 819 * 256 + 4 * 257))


def test_dense_input_counts_non_zeros():
    dense = column_sparse(50, 3, 5, seed=2).toarray()
    assert projection_cost(dense) == projection_cost(sp.csc_array(dense))


@pytest.mark.parametrize("n_rows", [5, 70])
def test_latency_reports_the_batch_and_the_difference_of_its_products(n_rows, monkeypatch):
    """What projection_latency returns besides times (measured, not checked): every
    key, the rows of the batch and the largest difference between the dense and the
    sparse batch products, within float32 rounding of a float64 product on a batch
    of one block of rows and on one of two. With a sparse
    product made wrong by 0.25 at one entry, 0.25 is reported."""
    components = column_sparse(300, 8, 10, seed=3)
    X = np.random.default_rng(4).standard_normal((n_rows, 300)).astype(np.float32)
    exact = X.astype(np.float64) @ components.toarray().astype(np.float64)
    result = projection_latency(components, X, n_single=2, n_batch=1)
    assert set(result) == {
        "single_dense_s",
        "single_sparse_s",
        "single_speedup",
        "batch_dense_s",
        "batch_sparse_s",
        "batch_speedup",
        "batch_sparse_kernel_s",
        "n_batch_rows",
        "max_abs_difference",
    }
    assert result["n_batch_rows"] == n_rows
    assert result["max_abs_difference"] <= 1e-5 * np.abs(exact).max()
    # Speed-ups are ratios of the times reported, dense over sparse.
    for kind in ("single", "batch"):
        assert result[f"{kind}_speedup"] == pytest.approx(result[f"{kind}_dense_s"] / result[f"{kind}_sparse_s"])

    def wrong(U, X, n_threads):
        Y = exact.copy()
        Y[n_rows - 1, 5] += 0.25
        return Y.astype(np.float32)

    monkeypatch.setattr(cost, "sparse_batch_product", wrong)
    result = projection_latency(components, X, n_single=2, n_batch=1)
    assert result["max_abs_difference"] == pytest.approx(0.25, abs=1e-5)


def test_latency_runs_the_sparse_batch_on_blas_threads(monkeypatch):
    """The sparse batch product gets as many threads as BLAS has (so that the batch
    speed-up compares like with like): the fewest of its libraries (one loaded after a
    limit keeps its default), one when no BLAS pool is reported."""
    seen = []

    def spy(U, X, n_threads):
        seen.append(n_threads)
        return sparse_batch_product(U, X, n_threads)

    monkeypatch.setattr(cost, "sparse_batch_product", spy)
    pools = [{"user_api": "openmp", "num_threads": 7}, {"user_api": "blas", "num_threads": 3}]
    monkeypatch.setattr(encoding, "threadpool_info", lambda: pools)
    projection_latency(column_sparse(300, 8, 10, seed=3), np.ones((5, 300), dtype=np.float32), n_single=1, n_batch=1)
    assert seen and set(seen) == {3}
    seen.clear()
    monkeypatch.setattr(encoding, "threadpool_info", lambda: [*pools, {"user_api": "blas", "num_threads": 1}])
    projection_latency(column_sparse(300, 8, 10, seed=3), np.ones((5, 300), dtype=np.float32), n_single=1, n_batch=1)
    assert seen and set(seen) == {1}
    # No BLAS pool reported: one thread (the product takes n_jobs >= 1).
    seen.clear()
    monkeypatch.setattr(encoding, "threadpool_info", lambda: pools[:1])
    projection_latency(column_sparse(300, 8, 10, seed=3), np.ones((5, 300), dtype=np.float32), n_single=1, n_batch=1)
    assert seen and set(seen) == {1}
    # The API named by an equal string that is not the interned literal (as read back
    # from threadpoolctl's JSON report, say): compared by value, not by identity.
    seen.clear()
    read_back = json.loads(json.dumps(pools))
    assert read_back[1]["user_api"] is not pools[1]["user_api"]
    monkeypatch.setattr(encoding, "threadpool_info", lambda: read_back)
    projection_latency(column_sparse(300, 8, 10, seed=3), np.ones((5, 300), dtype=np.float32), n_single=1, n_batch=1)
    assert seen and set(seen) == {3}


def test_latency_may_time_more_single_queries_than_there_are_rows():
    """n_single counts timed single-signature projections, not rows: with fewer rows
    (3 here, for 7 timings) they are taken in turn, again and again."""
    X = np.random.default_rng(5).standard_normal((3, 300)).astype(np.float32)
    result = projection_latency(column_sparse(300, 8, 10, seed=3), X, n_single=7, n_batch=1)
    assert result["single_dense_s"] > 0 and result["single_sparse_s"] > 0
    assert result["n_batch_rows"] == 3


def test_latencies_are_times_within_the_calls_wall_time():
    """Every time reported lies between 0 and the wall time of the whole call: a time
    taken as perf_counter() + start, or a count, would not."""
    import time

    components = column_sparse(300, 8, 10, seed=3)
    X = np.random.default_rng(4).standard_normal((20, 300)).astype(np.float32)
    start = time.perf_counter()
    result = projection_latency(components, X, n_single=3, n_batch=2)
    wall = time.perf_counter() - start
    for key in ("single_dense_s", "single_sparse_s", "batch_dense_s", "batch_sparse_s", "batch_sparse_kernel_s"):
        assert 0 < result[key] < wall, key
