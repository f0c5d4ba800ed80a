"""Batch projection through a sparse U against the dense product."""

import numpy as np
import pytest
import scipy.sparse as sp

from ndir.projection import SparseRankProjector
from ndir.projection.product import BLOCK_ROWS, sparse_batch_product


@pytest.mark.parametrize("n_rows", [1, BLOCK_ROWS - 1, BLOCK_ROWS, 3 * BLOCK_ROWS + 5])
@pytest.mark.parametrize("n_jobs", [1, 2, 5])
def test_blocked_sparse_product_equals_dense(n_rows, n_jobs):
    rng = np.random.default_rng(n_rows)
    U = sp.random(300, 7, density=0.05, random_state=n_jobs, format="csc", dtype=np.float32)
    X = rng.standard_normal((n_rows, 300)).astype(np.float32)
    Y = sparse_batch_product(U.T, X, n_jobs)
    assert Y.dtype == np.float32 and Y.shape == (n_rows, 7)
    np.testing.assert_allclose(Y, X @ U.toarray(), rtol=1e-5, atol=1e-6)


def test_transform_takes_either_path_with_the_same_result():
    """At tau = 0.99 every batch goes through the sparse U, at tau = 0.5 a large
    batch through dense BLAS: both give X U."""
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(20), 3)
    X = rng.standard_normal((groups.size, 400)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    for sparsity in (0.99, 0.5):
        model = SparseRankProjector(n_components=8, sparsity=sparsity, max_iter=3, random_state=0, n_jobs=2)
        model.fit(X, groups)
        np.testing.assert_allclose(model.transform(X), X @ model.components_.toarray(), rtol=1e-5, atol=1e-6)
