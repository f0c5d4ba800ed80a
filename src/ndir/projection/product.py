"""Projecting a batch of signatures through a sparse U, faster than dense BLAS.

``Y = X U`` with X (n, D) one signature per row and U (D, R) holding M non-zeros per
column. Dense BLAS reads all of U (D R values) and does 2 n D R flops whatever the
sparsity. Through the sparse U the work is n nnz(U) multiply-adds, but scipy's
sparse-times-dense kernels vectorise over the columns of the dense operand, so they
want the signatures one per column (X^T contiguous), and numpy transposes a whole
batch (245 MB at n = 745, D = 81,920) slower than the product itself. Hence:

* X is taken in blocks of :data:`BLOCK_ROWS` signatures, and each block in tiles of
  :data:`TILE_FEATURES` features. A tile is transposed into a (features, rows) buffer
  that stays in L3 (by OpenCV's blocked ``cv2.transpose``, 2.4x faster than numpy's
  fastest way here), then multiplied by the same features of U, stored CSR by feature:
  ``Y_block^T += U_tile^T X_tile^T`` walks the tile once, in order, each stored entry
  of U adding one contiguous row of the tile to a (R, rows) accumulator that stays in
  L2. Blocks are spread over threads; scipy's kernel releases the GIL.

Every batch, even of one signature, takes these tiles, so each signature's projection
is a fixed sequence of float32 operations set by U and :data:`TILE_FEATURES` alone:
scipy's kernel adds the features of a tile in order, one row of the tile at a time, and
the tiles' partial sums are added in order. The result for a signature is therefore the
same to the last bit whatever the other signatures of the batch, their number, their
order and the threads. (No shortcut straight through U^T for small batches: a single sum
over all features rounds otherwise.) Projectors too dense for this product go through
:func:`float64_product`, which gives the same guarantee up to ties of rounding.

``benchmarks/peers.py`` and the cost table of ``benchmarks/bench_sparse_rank.py`` time
this product against dense BLAS; the current figures are in docs/performance.md.
"""

from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import scipy.sparse as sp

#: Signatures per block: the (R, rows) float32 accumulator of one block is 64 KiB at
#: R = 256 and stays in L2, and the kernel's inner loop runs over 64 contiguous floats.
BLOCK_ROWS = 64
#: Features per tile: the transposed tile of a block is 2 MiB (8,192 x 64 float32).
TILE_FEATURES = 8192
#: Bytes of one block of float64 signatures in :func:`float64_product` and
#: :func:`float64_inner`.
FLOAT64_BLOCK_BYTES = 1 << 25


class TransposedBlocks:
    """Signatures laid out once for many products through sparse projectors.

    Each block of :data:`BLOCK_ROWS` signatures is stored transposed, (D, rows)
    C-contiguous, so :func:`sparse_batch_product` reads its tiles in place instead of
    transposing them again: a training's history projects the same train and test
    signatures through a new U every few steps. The products are bit-identical to
    those of the plain array (same tiles, same kernel, same order of the sums).

    Parameters
    ----------
    X : (n, D) float32 array, one signature per row, finite; kept (as ``X``) for the
        paths that multiply the array itself. The blocks, made on the first sparse
        product, hold one more copy of it (245 MB at n = 745, D = 81,920; 0.5 s).
    """

    def __init__(self, X):
        self.X = np.asarray(X, dtype=np.float32)
        if self.X.ndim != 2:
            raise ValueError(f"X must be (n, D), got shape {self.X.shape}")
        if not np.all(np.isfinite(self.X)):
            raise ValueError("X contains NaN or infinite values")
        self.shape = self.X.shape
        self._blocks = None

    def blocks(self):
        """The transposed blocks, (D, rows) float32 each, in order of rows."""
        if self._blocks is None:
            n_rows, n_features = self.shape
            self._blocks = []
            for first in range(0, n_rows, BLOCK_ROWS):
                block = self.X[first : first + BLOCK_ROWS]
                block_t = np.empty((n_features, block.shape[0]), dtype=np.float32)
                # Tile by tile, as sparse_batch_product does: a tile stays in cache.
                for start in range(0, n_features, TILE_FEATURES):
                    _transpose(block[:, start : start + TILE_FEATURES], block_t[start : start + TILE_FEATURES])
                self._blocks.append(block_t)
        return self._blocks


def _transpose(X, out):
    """``out[:] = X.T`` for a (rows, features) float32 view of X with contiguous rows and
    a C-contiguous (features, rows) ``out``, by OpenCV (which releases the GIL)."""
    if cv2.transpose(X, dst=out) is not out:
        raise RuntimeError(f"cv2.transpose did not write into a {out.shape} {out.dtype} buffer")


def sparse_batch_product(components, X, n_jobs=1):
    """``X U`` (n, R) float32 through the sparse ``components`` U, in tiles of X.

    Parameters
    ----------
    components : (D, R) scipy sparse matrix, U (any format; converted to CSR float32).
    X : (n, D) float32 array, one signature per row, or :class:`TransposedBlocks`
        of one (whose tiles need no transposition).
    n_jobs : int >= 1, threads; each takes a contiguous share of the blocks.

    Returns
    -------
    (n, R) float32 array, equal to the dense ``X @ U`` up to float32 rounding (the sums
    run in another order); each row's bits depend on that row of X and on U only.
    """
    blocked = X if isinstance(X, TransposedBlocks) else None
    X = blocked.X if blocked else np.asarray(X, dtype=np.float32)
    n_rows, n_features = X.shape
    blocks_t = blocked.blocks() if blocked else None
    U = sp.csr_array(components, dtype=np.float32)
    n_components = U.shape[1]
    tile_starts = range(0, n_features, TILE_FEATURES)
    # U^T of each tile of features: a CSC view of contiguous rows of U's CSR.
    tiles_t = [U[start : start + TILE_FEATURES].T for start in tile_starts]
    Y = np.empty((n_rows, n_components), dtype=np.float32)

    def transposed_tiles(first, last):
        """X[first:last, tile]^T (features, rows) contiguous, tile after tile."""
        if blocks_t:
            block_t = blocks_t[first // BLOCK_ROWS]
            yield from (block_t[start : start + TILE_FEATURES] for start in tile_starts)
            return
        tile_buffer = np.empty((min(TILE_FEATURES, n_features), last - first), dtype=np.float32)
        for tile_start in tile_starts:
            X_tile = X[first:last, tile_start : tile_start + TILE_FEATURES]
            X_tile_t = tile_buffer[: X_tile.shape[1]]
            _transpose(X_tile, X_tile_t)
            yield X_tile_t

    def project(start, stop):
        for first in range(start, stop, BLOCK_ROWS):
            last = min(first + BLOCK_ROWS, stop)
            Y_block_t = np.zeros((n_components, last - first), dtype=np.float32)
            for tile_t, X_tile_t in zip(tiles_t, transposed_tiles(first, last)):
                Y_block_t += tile_t @ X_tile_t
            Y[first:last] = Y_block_t.T

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


def float64_product(X, U, mean=None):
    """``(X - mean) U`` summed in float64 and rounded to float32, block of rows by block.

    Dense BLAS (``sgemm``) splits and orders its float32 sums by the shape of the batch
    and by the kernel OpenBLAS picks for the CPU (Haswell, SkylakeX...), so a row's
    projection changed in its last bits with its batch-mates. Here the products of
    float32 values are exact in float64 and the float64 sums differ between orders by
    about 1e-16 relative: rounded to float32, a row's result no longer depends on the
    batch except for a value that falls within that distance of a float32 rounding
    tie. Twice the time of the float32 product.

    Parameters
    ----------
    X : (n, D) float32 array, one signature per row.
    U : (D, R) array, dense projectors (converted to float64 once: 8 D R bytes).
    mean : (D,) array or None, subtracted from each row first (in float64).

    Returns
    -------
    (n, R) float32 array; rows are taken :data:`FLOAT64_BLOCK_BYTES` of float64 at a
    time, so X is never copied whole.
    """
    X = np.asarray(X, dtype=np.float32)
    U = np.asarray(U, dtype=np.float64)
    n_rows, n_features = X.shape
    Y = np.empty((n_rows, U.shape[1]), dtype=np.float32)
    step = max(1, FLOAT64_BLOCK_BYTES // (8 * max(n_features, 1)))
    for first in range(0, n_rows, step):
        block = X[first : first + step].astype(np.float64)
        if mean is not None:
            block -= mean
        Y[first : first + step] = block @ U
    return Y


def float64_inner(A, B=None):
    """``A B^T`` (m, n) float64, summed in float64 block of features by block.

    As in :func:`float64_product`, the products of float32 values are exact in float64
    and a block's float64 sums differ between BLAS kernels (and block shapes) by about
    1e-16 relative, where float32 BLAS's differed by about 1e-7: the scores, the Gram
    matrices and what is decided from them (rankings, pivots, principal axes) are set by
    the signatures, not by the kernel OpenBLAS picks for the CPU.

    Parameters
    ----------
    A : (m, D) array, one signature per row (float32 signatures: their products are
        exact; any real dtype is taken in float64).
    B : (n, D) array or None; None computes the Gram matrix ``A A^T`` (by a symmetric
        product, each block converted once).

    Returns
    -------
    (m, n) float64 array; the features are taken :data:`FLOAT64_BLOCK_BYTES` of float64
    rows at a time, so neither operand is copied whole.
    """
    A = np.asarray(A)
    B = A if B is None else np.asarray(B)
    inner = np.zeros((A.shape[0], B.shape[0]))
    step = max(1, FLOAT64_BLOCK_BYTES // (8 * max(A.shape[0], B.shape[0], 1)))
    for start in range(0, A.shape[1], step):
        block_a = A[:, start : start + step].astype(np.float64)
        block_b = block_a if B is A else B[:, start : start + step].astype(np.float64)
        inner += block_a @ block_b.T
    return inner
