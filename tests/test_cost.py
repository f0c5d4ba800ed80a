"""Tests of ndir.projection.cost: hand-counted storage, and dense/sparse agreement."""

import numpy as np
import pytest
import scipy.sparse as sp

from ndir.projection.cost import projection_cost, projection_latency


def column_sparse(n_features, n_components, per_column, seed):
    """(D, R) float32 CSC matrix with ``per_column`` random non-zeros in each column."""
    rng = np.random.default_rng(seed)
    rows = np.concatenate(
        [
            np.sort(rng.choice(n_features, per_column, replace=False))
            for _ in range(n_components)
        ]
    )
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


def test_paper_arithmetic():
    # §V-D: 256 projectors at tau = 99 % cost as much as 2.56 full ones (FV-512,
    # D = 81,920, M = round(0.01 D) = 819 per column), and 32 full projectors are
    # 12.5 times more costly.
    cost = projection_cost(column_sparse(81920, 256, 819, seed=1))
    assert cost["equivalent_full_projectors"] == pytest.approx(2.56, abs=0.005)
    assert 32 / cost["equivalent_full_projectors"] == pytest.approx(12.5, rel=0.005)
    assert cost["sparsity"] == pytest.approx(0.99, abs=1e-4)
    assert cost["storage_ratio"] == pytest.approx(
        4 * 81920 * 256 / (8 * 819 * 256 + 4 * 257)
    )


def test_dense_input_counts_non_zeros():
    dense = column_sparse(50, 3, 5, seed=2).toarray()
    assert projection_cost(dense) == projection_cost(sp.csc_array(dense))


def test_latency_paths_compute_the_same_projection():
    components = column_sparse(300, 8, 10, seed=3)
    X = np.random.default_rng(4).standard_normal((40, 300)).astype(np.float32)
    result = projection_latency(components, X, n_single=5, n_batch=2)
    assert result["n_batch_rows"] == 40
    assert result["max_abs_difference"] < 1e-4
    for key in [
        "single_dense_s",
        "single_sparse_s",
        "batch_dense_s",
        "batch_sparse_s",
        "batch_sparse_kernel_s",
    ]:
        assert result[key] > 0.0
    assert result["single_speedup"] == pytest.approx(
        result["single_dense_s"] / result["single_sparse_s"]
    )
    assert result["batch_speedup"] == pytest.approx(
        result["batch_dense_s"] / result["batch_sparse_s"]
    )
