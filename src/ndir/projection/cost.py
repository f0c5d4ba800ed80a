"""Storage and projection cost of a (sparse) projection matrix (Negrel et al. 2014, §V-D).

The paper's point is that a projector with a rate tau of zeros (Eq. 18) costs a
fraction ``1 - tau`` of a dense one to store and to apply: 256 projectors at
tau = 99 % cost as much as 2.56 full ones. :func:`projection_cost` counts that;
:func:`projection_latency` measures it, since on a CPU a sparse product does not run
at the speed of dense BLAS: one signature is much faster through the sparse matrix,
and a batch only as fast as the signatures can be laid out for the sparse kernel
(:mod:`ndir.projection.product`; at tau = 0.99 about 4x dense BLAS, at tau = 0.9 no
faster).

Storage convention: a dense matrix is D x R float32; a sparse one is stored CSC (or,
equivalently, CSR of its transpose): float32 values, int32 row indices and R + 1 int32
column pointers.
"""

import time

import numpy as np
import scipy.sparse as sp

from ndir.encoding import blas_threads
from ndir.projection.product import sparse_batch_product


def projection_cost(components):
    """Storage and arithmetic of projecting with ``components`` (U, D x R).

    Parameters
    ----------
    components : (D, R) scipy sparse matrix or array
        The projectors (e.g. ``SparseRankProjector.components_``). For a sparse
        matrix ``nnz`` counts the stored entries (what its storage costs); for an
        array, the non-zero ones.

    Returns
    -------
    dict
        ``n_features`` (D), ``n_components`` (R), ``nnz``, ``sparsity`` (tau of Eq. 18,
        zeros over D R), ``bytes_dense`` (4 D R), ``bytes_sparse`` (CSC: 8 nnz +
        4 (R + 1)), ``storage_ratio`` (dense over sparse bytes), ``madds_dense`` and
        ``madds_sparse`` (multiply-adds to project one signature: D R and nnz),
        ``madds_ratio``, and ``equivalent_full_projectors`` (nnz / D: how many dense
        columns cost as much, 2.56 for R = 256 at tau = 99 %).
    """
    n_features, n_components = components.shape
    if sp.issparse(components):
        nnz = int(sp.csc_array(components).nnz)
    else:
        nnz = int(np.count_nonzero(components))
    size = n_features * n_components
    bytes_dense = 4 * size
    bytes_sparse = 8 * nnz + 4 * (n_components + 1)
    return {
        "n_features": n_features,
        "n_components": n_components,
        "nnz": nnz,
        "sparsity": 1.0 - nnz / size,
        "bytes_dense": bytes_dense,
        "bytes_sparse": bytes_sparse,
        "storage_ratio": bytes_dense / bytes_sparse,
        "madds_dense": size,
        "madds_sparse": nnz,
        "madds_ratio": size / max(nnz, 1),
        "equivalent_full_projectors": nnz / n_features,
    }


def projection_latency(components, X, n_single=50, n_batch=3):
    """Measured time of projecting signatures with U dense and sparse.

    Single signatures: ``x @ U`` with U a dense float32 array (BLAS GEMV, reads the
    whole matrix) against ``U^T x`` with U^T in CSR (nnz multiply-adds), the median
    over ``n_single`` rows of X. Whole batch ``X U``: dense BLAS GEMM against
    :func:`ndir.projection.product.sparse_batch_product` from U stored CSC as
    ``SparseRankProjector.components_`` is (its conversion to CSR by feature and the
    transpositions of the signatures, which arrive one per row, included), both on the
    same number of threads (BLAS's current limit), the median of ``n_batch`` runs.

    Parameters
    ----------
    components : (D, R) scipy sparse matrix or array
        The projectors U.
    X : (n, D) float32 array
        Signatures to project (e.g. the test split).
    n_single, n_batch : int
        Repetitions of the single-signature and whole-batch measurements.

    Returns
    -------
    dict
        ``single_dense_s``, ``single_sparse_s``, ``single_speedup`` (dense over sparse
        time), ``batch_dense_s``, ``batch_sparse_s``, ``batch_speedup``,
        ``batch_sparse_kernel_s`` (U^T in CSC times the whole X^T on one thread,
        without the transposition of X, as if the signatures were stored one per
        column: a floor for the sparse batch), ``n_batch_rows``, and
        ``max_abs_difference`` between the dense and sparse batch results (a check
        that both compute the same projection).
    """
    X = np.ascontiguousarray(X, dtype=np.float32)
    dense = np.ascontiguousarray(
        components.toarray() if sp.issparse(components) else components,
        dtype=np.float32,
    )
    sparse = sp.csc_array(dense)
    sparse_t_rows = sparse.T.tocsr()  # U^T in CSR: one projector per row
    sparse_t_cols = sp.csr_array(dense).T  # U^T in CSC: one input dimension per column
    rows = X[np.arange(n_single) % X.shape[0]]

    single_dense = _median_time(lambda x: x @ dense, rows)
    single_sparse = _median_time(lambda x: sparse_t_rows @ x, rows)
    batch_dense, Y_dense = _median_time_once(lambda: X @ dense, n_batch)
    n_threads = blas_threads()
    batch_sparse, Y_sparse = _median_time_once(lambda: sparse_batch_product(sparse, X, n_threads), n_batch)
    XT = np.ascontiguousarray(X.T)
    batch_kernel, _ = _median_time_once(lambda: sparse_t_cols @ XT, n_batch)
    return {
        "single_dense_s": single_dense,
        "single_sparse_s": single_sparse,
        "single_speedup": single_dense / single_sparse,
        "batch_dense_s": batch_dense,
        "batch_sparse_s": batch_sparse,
        "batch_speedup": batch_dense / batch_sparse,
        "batch_sparse_kernel_s": batch_kernel,
        "n_batch_rows": X.shape[0],
        "max_abs_difference": float(np.max(np.abs(Y_dense - Y_sparse))),
    }


def _median_time(function, rows):
    """Median wall time of ``function(row)`` over the rows, after one warm-up call."""
    function(rows[0])
    times = []
    for row in rows:
        start = time.perf_counter()
        function(row)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _median_time_once(function, repeats):
    """Median wall time of ``repeats`` calls of ``function()``, and its last result."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), result
