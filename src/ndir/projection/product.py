"""Projecting a batch of signatures through a sparse U, faster than dense BLAS.

``Y = X U`` with X (n, D) one signature per row and U (D, R) holding M non-zeros per
column. Dense BLAS reads all of U (D R values) and does 2 n D R flops whatever the
sparsity. Through U^T in CSR the work is n nnz(U) multiply-adds, but scipy's kernel
wants the signatures one per column (X^T contiguous), and transposing a whole batch
(245 MB at n = 745, D = 81,920) costs more than the product itself. So X is taken in
blocks of :data:`BLOCK_ROWS` signatures: each block is transposed into a (D, b) array
that stays in cache (5 MB at b = 16), and every stored entry of U^T then reads b
consecutive floats of it. Blocks are spread over threads; scipy's kernel releases
the GIL.

Measured at n = 745, D = 81,920, R = 256, tau = 0.99 (M = 819) on this 2-core
machine: dense BLAS 0.34 s on 1 thread / 0.18 s on 2; whole-batch transpose then
sparse 0.47 s; blocks of 16: 0.13 s on 1 thread / 0.065 s on 2 (blocks of 4, 32 and
64 rows were slower: 0.23, 0.22, 0.29 s); ``benchmarks/peers.py`` and the cost table
measure it again on each run.
"""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

#: Signatures per transposed block (see the module docstring for the measurement).
BLOCK_ROWS = 16


def sparse_batch_product(components_t, X, n_jobs=1):
    """``X U`` (n, R) float32 through ``components_t`` = U^T, in blocks of rows.

    Parameters
    ----------
    components_t : (R, D) scipy sparse matrix, U^T (converted to CSR float32 if not).
    X : (n, D) float32 array, one signature per row.
    n_jobs : int >= 1, threads; each takes a contiguous share of the blocks.

    Returns
    -------
    (n, R) float32 array.
    """
    UT = sp.csr_array(components_t, dtype=np.float32)
    X = np.asarray(X, dtype=np.float32)
    n_rows = X.shape[0]
    Y = np.empty((n_rows, UT.shape[0]), dtype=np.float32)

    def project(start, stop):
        for first in range(start, stop, BLOCK_ROWS):
            last = min(first + BLOCK_ROWS, stop)
            Y[first:last] = (UT @ np.ascontiguousarray(X[first:last].T)).T

    n_blocks = -(-n_rows // BLOCK_ROWS)
    n_jobs = max(1, min(int(n_jobs), n_blocks))
    if n_jobs == 1:
        project(0, n_rows)
        return Y
    # Thread shares on block boundaries, so every block has BLOCK_ROWS rows but the last.
    bounds = np.minimum(np.linspace(0, n_blocks, n_jobs + 1).astype(int) * BLOCK_ROWS, n_rows)
    with ThreadPoolExecutor(n_jobs) as pool:
        list(pool.map(project, bounds[:-1], bounds[1:]))
    return Y
