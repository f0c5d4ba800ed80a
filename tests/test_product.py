"""Batch projection through a sparse U against the dense product."""

import numpy as np
import pytest
import scipy.sparse as sp

from ndir.projection import SparseRankProjector, product
from ndir.projection.product import BLOCK_ROWS, TransposedBlocks, float64_product, sparse_batch_product

ROW_COUNTS = [1, 16, 17, BLOCK_ROWS, 2 * BLOCK_ROWS + 11]


@pytest.mark.parametrize("n_rows", ROW_COUNTS)
@pytest.mark.parametrize("n_jobs", [1, 2, 5])
@pytest.mark.parametrize("layout", ["csc", "csr", "coo"])
def test_sparse_product_equals_dense(n_rows, n_jobs, layout, monkeypatch):
    """Tiles of X (several tiles of features, the last narrower, and blocks of rows, the
    last shorter) give X U, whatever U's storage."""
    monkeypatch.setattr(product, "TILE_FEATURES", 128)
    rng = np.random.default_rng(n_rows)
    U = sp.random(300, 7, density=0.05, random_state=n_jobs, format=layout, dtype=np.float32)
    X = rng.standard_normal((n_rows, 300)).astype(np.float32)
    Y = sparse_batch_product(U, X, n_jobs)
    assert Y.dtype == np.float32 and Y.shape == (n_rows, 7) and Y.flags.c_contiguous
    np.testing.assert_allclose(Y, X @ U.toarray(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n_rows", [16, 3 * BLOCK_ROWS + 1])
def test_paper_size_product_equals_dense(n_rows):
    """At the paper's width (D = 81,920, R = 256, M = 819: ten tiles of features), equal
    to the float64 product within float32 rounding of sums of ~800 terms."""
    n_features, n_components, per_column = 81920, 256, 819
    rng = np.random.default_rng(n_rows)
    U = sp.csc_array(
        (
            rng.standard_normal(n_components * per_column, dtype=np.float32),
            np.sort(rng.integers(0, n_features, (n_components, per_column)), axis=1).ravel(),
            np.arange(n_components + 1) * per_column,
        ),
        shape=(n_features, n_components),
    )
    X = rng.standard_normal((n_rows, n_features), dtype=np.float32)
    reference = (U.astype(np.float64).T @ X.T.astype(np.float64)).T
    Y = sparse_batch_product(U, X, 2)
    np.testing.assert_allclose(Y, reference, rtol=0, atol=1e-5 * np.abs(reference).max())


@pytest.mark.parametrize("n_rows", ROW_COUNTS)
@pytest.mark.parametrize("n_jobs", [1, 2])
def test_transposed_blocks_give_the_array_product_to_the_last_bit(n_rows, n_jobs, monkeypatch):
    """Signatures laid out once (tiles of features, the last narrower; blocks of rows,
    the last shorter) give exactly the bits of the plain array's product, for every
    U they are multiplied by."""
    monkeypatch.setattr(product, "TILE_FEATURES", 128)
    rng = np.random.default_rng(n_rows)
    X = rng.standard_normal((n_rows, 300)).astype(np.float32)
    blocked = TransposedBlocks(X)
    for seed in range(3):
        U = sp.random(300, 7, density=0.05, random_state=seed, format="csc", dtype=np.float32)
        assert np.array_equal(sparse_batch_product(U, blocked, n_jobs), sparse_batch_product(U, X, n_jobs))
    assert np.array_equal(np.hstack(blocked.blocks()), X.T)


@pytest.mark.parametrize("layout", ["csc", "csr"])
def test_a_row_has_the_same_bits_in_any_batch(layout, monkeypatch):
    """Both products give a row the same bits alone, among other rows (before or after
    it, in other blocks and threads) and in reverse order: its sums do not depend on
    the batch. The float64 product stays within float32 rounding of the exact one."""
    monkeypatch.setattr(product, "TILE_FEATURES", 128)
    monkeypatch.setattr(product, "FLOAT64_BLOCK_BYTES", 8 * 300 * 5)
    rng = np.random.default_rng(2)
    U = sp.random(300, 7, density=0.1, random_state=3, format=layout, dtype=np.float32)
    X = rng.standard_normal((2 * BLOCK_ROWS + 11, 300)).astype(np.float32)
    mean = rng.standard_normal(300).astype(np.float32)
    products = {
        "sparse": lambda rows, n_jobs: sparse_batch_product(U, rows, n_jobs),
        "float64": lambda rows, n_jobs: float64_product(rows, U.toarray(), mean=mean),
    }
    for multiply in products.values():
        whole = multiply(X, 1)
        assert whole.dtype == np.float32 and whole.shape == (len(X), 7)
        for n_jobs in (1, 2):
            assert np.array_equal(multiply(X[::-1], n_jobs), whole[::-1])
            assert np.array_equal(multiply(X[5:], n_jobs), whole[5:])
            for row in (0, BLOCK_ROWS + 3, len(X) - 1):
                assert np.array_equal(multiply(X[row : row + 1], n_jobs)[0], whole[row])
    exact = (X.astype(np.float64) - mean) @ U.toarray().astype(np.float64)
    np.testing.assert_allclose(products["float64"](X, 1), exact, rtol=1e-6, atol=1e-6)


def test_transposed_blocks_reject_non_finite_signatures():
    X = np.ones((3, 4), dtype=np.float32)
    X[1, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        TransposedBlocks(X)


def test_transform_takes_either_path_with_the_same_result():
    """At tau = 0.99 every batch goes through the sparse U, at tau = 0.5 through dense
    BLAS in float64: both give X U."""
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(20), 3)
    X = rng.standard_normal((groups.size, 400)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    for sparsity in (0.99, 0.5):
        model = SparseRankProjector(n_components=8, sparsity=sparsity, max_iter=3, random_state=0, n_jobs=2)
        model.fit(X, groups)
        for rows in (X[:1], X):
            np.testing.assert_allclose(model.transform(rows), rows @ model.components_.toarray(), rtol=1e-5, atol=1e-6)
            assert np.array_equal(model.transform(TransposedBlocks(rows)), model.transform(rows))
    with pytest.raises(ValueError, match="400 features"):
        model.transform(TransposedBlocks(X[:, :300]))


def test_transpose_writes_into_the_buffer_or_raises():
    """The tiles' transposition fills the given (features, rows) buffer exactly, for a
    view of X with strided rows, and refuses a buffer it would not write into (OpenCV
    would return a new array, leaving the buffer's garbage to the product)."""
    X = np.arange(60, dtype=np.float32).reshape(6, 10)
    out = np.empty((4, 3), dtype=np.float32)
    product._transpose(X[1:4, 5:9], out)
    assert np.array_equal(out, X[1:4, 5:9].T)
    with pytest.raises(RuntimeError, match="did not write"):
        product._transpose(X[1:4, 5:9], np.empty((4, 3), dtype=np.float64))


@pytest.mark.parametrize("block_bytes", [8 * 50 * 7, 1 << 25])
def test_float64_inner_is_the_float64_product_in_any_blocks(block_bytes, monkeypatch):
    # Sums of exact products in float64 (blocks of 7 features and one block alike).
    monkeypatch.setattr(product, "FLOAT64_BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(3)
    A = rng.standard_normal((50, 300)).astype(np.float32)
    B = rng.standard_normal((20, 300)).astype(np.float32)
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    np.testing.assert_allclose(product.float64_inner(A, B), A64 @ B64.T, rtol=1e-13, atol=1e-12)
    gram = product.float64_inner(A)
    assert gram.dtype == np.float64
    np.testing.assert_allclose(gram, A64 @ A64.T, rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("n_jobs", [1, 4])
def test_an_empty_batch_projects_to_no_rows(n_jobs):
    """No rows, no blocks: an empty (0, R) result on any number of jobs (no pool of 0 threads)."""
    U = sp.random(300, 7, density=0.05, random_state=8, format="csc", dtype=np.float32)
    Y = sparse_batch_product(U, np.zeros((0, 300), dtype=np.float32), n_jobs)
    assert Y.shape == (0, 7) and Y.dtype == np.float32


@pytest.mark.parametrize("n_jobs", [None, 1, 2])
def test_n_jobs_threads_share_the_blocks_of_rows(n_jobs, monkeypatch):
    """One job, the default (None here), projects on the calling thread; two share two
    blocks of rows on a pool of their own (the caller only waits), with the same result."""
    import threading

    seen = []
    transpose = product._transpose

    def recording(X, out):
        seen.append(threading.get_ident())
        return transpose(X, out)

    monkeypatch.setattr(product, "_transpose", recording)
    rng = np.random.default_rng(8)
    U = sp.random(300, 7, density=0.05, random_state=8, format="csc", dtype=np.float32)
    X = rng.standard_normal((2 * BLOCK_ROWS, 300)).astype(np.float32)
    Y = sparse_batch_product(U, X) if n_jobs is None else sparse_batch_product(U, X, n_jobs)
    np.testing.assert_allclose(Y, X @ U.toarray(), rtol=1e-5, atol=1e-6)
    caller = threading.get_ident()
    assert len(seen) == 2
    assert set(seen) == {caller} if n_jobs in (None, 1) else caller not in seen


@pytest.mark.parametrize("n_jobs, n_blocks", [(2, 2), (2, 5), (3, 7), (4, 4)])
def test_n_jobs_threads_take_one_contiguous_share_of_whole_blocks_each(n_jobs, n_blocks, monkeypatch):
    """As many shares as threads (n_jobs, fewer blocks than that being capped): the rows
    cut at block boundaries into contiguous shares, in order and covering every row,
    as even as whole blocks allow (sizes differ by at most one block); more shares than
    threads would leave some thread two shares of the work while the others wait."""
    pools, shares = [], []

    class RecordingPool(product.ThreadPoolExecutor):
        def __init__(self, max_workers):
            pools.append(max_workers)
            super().__init__(max_workers)

        def map(self, function, starts, stops):
            starts, stops = list(starts), list(stops)
            shares.extend(zip(starts, stops))
            return super().map(function, starts, stops)

    monkeypatch.setattr(product, "ThreadPoolExecutor", RecordingPool)
    n_rows = (n_blocks - 1) * BLOCK_ROWS + 5
    rng = np.random.default_rng(n_blocks)
    U = sp.random(300, 7, density=0.05, random_state=n_jobs, format="csc", dtype=np.float32)
    X = rng.standard_normal((n_rows, 300)).astype(np.float32)
    np.testing.assert_allclose(sparse_batch_product(U, X, n_jobs), X @ U.toarray(), rtol=1e-5, atol=1e-6)
    assert pools == [n_jobs] and len(shares) == n_jobs
    starts, stops = np.array(shares).T
    assert starts[0] == 0 and stops[-1] == n_rows
    np.testing.assert_array_equal(starts[1:], stops[:-1])
    assert np.all(starts % BLOCK_ROWS == 0)
    blocks = -(-(stops - starts) // BLOCK_ROWS)
    assert blocks.min() >= 1 and blocks.max() - blocks.min() <= 1
