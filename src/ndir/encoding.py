"""Aggregation of an image's local descriptors into one signature: VLAD and Fisher Vector.

The pure formulas behind the codebooks of :mod:`ndir.codebooks` (which learn the
parameters these functions take) and the power + L2 normalisation applied to both
signatures (Negrel et al. 2014, §V-B: "power-normalization (... set to 0.1) and
l2-normalization on both signatures").

Everything works on float32 arrays; the costly parts are matrix products over
blocks of ``chunk_size`` descriptors, so memory stays bounded (a block's
``(chunk_size, K)`` posterior or score matrix) whatever the number of descriptors;
the GMM statistics are accumulated across blocks in float64.

The blocks may run on threads (:func:`blas_block_map`), each block with
single-threaded BLAS, its results combined in block order: the signatures are then
the same to the bit whatever the number of threads. A multi-threaded BLAS would not
give that: OpenBLAS's float32 products differ in their last bits between one and
two threads, and between one product and the same rows cut into blocks.
"""

import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import scipy.sparse
from threadpoolctl import ThreadpoolController, threadpool_info

CHUNK_SIZE = 4096
"""Descriptors per block: a (4096, 512) float32 block is 8 MiB and stays in cache."""

LOG_POSTERIOR_FLOOR = np.float32(-50.0)
"""Log of the smallest posterior kept, relative to its descriptor's largest (e^-50 is
2e-22): smaller ones are set to 0. They are 15 orders of magnitude below float32's
rounding of the row sum (>= 1), but below 1e-38 they are subnormal floats, on which
the exponential and the statistics' GEMM take a slow path: 16x slower (38 against 2.4
ms) for a (4096, 256) block of an image's posteriors, a twentieth of them subnormal
(``benchmarks/bench_encoding.py`` times the encoders). Set to 0 rather than left at
e^-50, which would save two passes over the block (0.86 of 11.9 ms at K = 512, one Xeon
thread): the power normalisation (``|v|^0.1``) would lift a Gaussian that no descriptor
reaches from exact zeros to about 1 % of a visited one's entries."""

# threadpoolctl's limits are process-wide: one context that changes them at a time.
_BLAS_LIMITS = threading.RLock()
_worker = threading.local()


def _mark_single_threaded_worker():
    _worker.single_threaded_blas = True


@contextmanager
def single_threaded_blas_pool(n_threads):
    """A ``ThreadPoolExecutor`` of ``n_threads`` workers with single-threaded BLAS.

    BLAS is limited to one thread for the process while the context is open (one
    such context at a time: threadpoolctl's limits are process-wide, so other
    threads entering one wait). On leaving, even by an exception, work not yet
    started is cancelled and running work finished before the limits are restored.
    Inside the workers :func:`blas_block_map` yields the builtin ``map``.
    """
    with _BLAS_LIMITS, ThreadpoolController().limit(limits=1, user_api="blas"):
        pool = ThreadPoolExecutor(n_threads, initializer=_mark_single_threaded_worker)
        try:
            yield pool
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def blas_threads():
    """The threads BLAS may use now: the fewest of the BLAS libraries loaded (1 when
    none is). One loaded after a limit was set keeps its own default (SciPy's, loaded
    by the first import of ``scipy.linalg``, as reading an image does) and must not
    undo the limit."""
    return min((pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"), default=1)


@contextmanager
def blas_block_map():
    """A ``map`` for blocks of rows, on as many threads as BLAS may use now
    (:func:`blas_threads`).

    The ``map`` it yields runs its calls on that many Python threads (NumPy and
    BLAS release the GIL), each with single-threaded BLAS
    (:func:`single_threaded_blas_pool`), and returns their results in order; it is
    the builtin ``map`` when BLAS was limited to one thread (as in a workflow rule
    with ``threads: 1``) or inside a worker of such a pool. Blocks of fixed size
    summed in order then give the same bits on any number of threads, where
    threadpoolctl can limit NumPy's BLAS (OpenBLAS, as pip's NumPy ships on Linux:
    tested here; not Apple's Accelerate, which it cannot see).

    Yields
    ------
    callable ``map(function, blocks)`` -> iterator of ``function(block)``.
    """
    if getattr(_worker, "single_threaded_blas", False):
        yield map
        return
    with _BLAS_LIMITS:
        n_threads = blas_threads()
        if n_threads == 1:
            yield map
            return
        with single_threaded_blas_pool(n_threads) as pool:
            yield pool.map


def row_slices(n_rows, size=CHUNK_SIZE):
    """Slices cutting ``n_rows`` rows into consecutive blocks of ``size`` rows, the
    last one shorter: the blocks every encoder works on."""
    return [slice(start, start + size) for start in range(0, n_rows, size)]


def row_blocks(X, size=CHUNK_SIZE):
    """The blocks of :func:`row_slices` of the rows of X (views)."""
    return [X[rows] for rows in row_slices(len(X), size)]


def nearest_centroids(descriptors, centroids, chunk_size=CHUNK_SIZE, block_map=map):
    """Index of the nearest centroid (squared Euclidean distance) of each descriptor.

    Parameters
    ----------
    descriptors : (N, D) float32
    centroids : (K, D) float32
    chunk_size : int, descriptors per block.
    block_map : callable, default the builtin ``map``
        Runs the blocks of ``chunk_size`` descriptors, e.g. the ``map`` of
        :func:`blas_block_map` to run them on threads.

    Returns
    -------
    (N,) int64 in [0, K). Computed as ``argmax_k(x.c_k - |c_k|^2 / 2)`` (one GEMM
    per block), so ties between equidistant centroids go to the lower index.
    """
    descriptors = np.asarray(descriptors, dtype=np.float32)
    centroids = np.asarray(centroids, dtype=np.float32)
    # |x|^2 is the same for every centroid, so it does not change the argmin.
    half_sq_norms = 0.5 * np.einsum("kd,kd->k", centroids, centroids)

    def block_labels(block):
        scores = block @ centroids.T
        scores -= half_sq_norms
        return scores.argmax(axis=1)

    labels = list(block_map(block_labels, row_blocks(descriptors, chunk_size)))
    return np.concatenate(labels) if labels else np.empty(0, dtype=np.int64)


CLUSTER_RANGES = 8
"""Ranges of clusters :func:`cluster_sums` sums separately (on threads if asked)."""


def cluster_sums(X, labels, n_clusters, block_map=map):
    """Per-cluster sum and count of the rows of X, given their cluster labels.

    Parameters
    ----------
    X : (N, D) float32 or float64
    labels : (N,) int in [0, K)
    n_clusters : int K
    block_map : callable, default the builtin ``map``
        Runs the ``CLUSTER_RANGES`` ranges of clusters, e.g. the ``map`` of
        :func:`blas_block_map` to run them on threads. Each cluster's rows are
        summed in their order whatever the ranges, so the sums are the same to the bit.

    Returns
    -------
    sums : (K, D) in the dtype of X, ``sums[k] = X[labels == k].sum(axis=0)``
    counts : (K,) int64
    """
    n = len(labels)
    bounds = np.linspace(0, n_clusters, min(CLUSTER_RANGES, n_clusters) + 1).astype(int)

    def range_sums(first, stop):
        # A one-hot sparse matrix of the range's clusters against all N rows: one
        # pass over the rows it holds, unlike np.add.at.
        rows = np.flatnonzero((labels >= first) & (labels < stop))
        one_hot = scipy.sparse.csr_matrix(
            (np.ones(len(rows), dtype=X.dtype), (labels[rows] - first, rows)),
            shape=(stop - first, n),
        )
        return one_hot @ X

    parts = list(block_map(range_sums, bounds[:-1], bounds[1:]))
    sums = np.concatenate(parts) if parts else np.zeros((0, X.shape[1]), dtype=X.dtype)
    return sums, np.bincount(labels, minlength=n_clusters)


def vlad(descriptors, centroids, cluster_components, block_map=map):
    """VLAD signature with cluster-wise PCA (Jégou et al. 2010; Negrel et al. 2012).

    Each descriptor x is hard-assigned to its nearest centroid c_k; block k of the
    signature is the sum of the residuals of the descriptors assigned to k,
    projected on the cluster's principal axes P_k (the "compacted VLAT" of ref. [20]
    of Negrel et al. 2014, at first order)::

        v_k = P_k^T  sum_{x : NN(x) = k} (x - c_k)          (K blocks of d')

    Parameters
    ----------
    descriptors : (N, D) float32, local descriptors (D = 128 for dense HOG).
    centroids : (K, D) float32, k-means centroids.
    cluster_components : (K, D, d') float32, orthonormal columns P_k per cluster.
    block_map : callable, default ``map``; see :func:`nearest_centroids`.

    Returns
    -------
    (K * d',) float32, raw (not normalised); block k is ``v[k*d' : (k+1)*d']``.
    An empty descriptor set gives the zero vector.
    """
    n_clusters, _, n_components = cluster_components.shape
    if len(descriptors) == 0:
        return np.zeros(n_clusters * n_components, dtype=np.float32)
    descriptors = np.asarray(descriptors, dtype=np.float32)
    centroids = np.asarray(centroids, dtype=np.float32)
    labels = nearest_centroids(descriptors, centroids, block_map=block_map)
    # Summing x - c_k rather than subtracting n_k c_k from sum x avoids the
    # cancellation of a large sum against n_k c_k.
    residuals = np.empty_like(descriptors)

    def block_residuals(rows):
        np.subtract(descriptors[rows], centroids[labels[rows]], out=residuals[rows])

    # Each block fills its rows of residuals.
    list(block_map(block_residuals, row_slices(len(descriptors))))
    residual_sums, _ = cluster_sums(residuals, labels, n_clusters, block_map)
    blocks = np.matmul(residual_sums[:, None, :], cluster_components)
    return blocks.astype(np.float32, copy=False).ravel()


def _log_joint_coefficients(weights, means, variances):
    """Coefficients A (2D+1, K) with ``[x^2, x, 1] @ A = log w_k + log N(x; mu_k, diag(var_k))``.

    Expanding the quadratic form turns the N x K x D evaluation into one GEMM.
    The coefficients are computed in float64, then rounded once to float32.
    """
    weights, means, variances = (np.asarray(a, dtype=np.float64) for a in (weights, means, variances))
    n_components, dim = means.shape
    precisions = 1.0 / variances
    bias = (
        np.log(weights)
        - 0.5 * np.sum(means**2 * precisions + np.log(variances), axis=1)
        - 0.5 * dim * np.log(2.0 * np.pi)
    )
    coefficients = np.empty((2 * dim + 1, n_components), dtype=np.float32)
    coefficients[:dim] = -0.5 * precisions.T
    coefficients[dim : 2 * dim] = (means * precisions).T
    coefficients[2 * dim] = bias
    return coefficients


def _augment(block):
    """``[x^2, x, 1]`` (n, 2D+1) float32 of a block of descriptors (n, D)."""
    n, dim = block.shape
    augmented = np.empty((n, 2 * dim + 1), dtype=np.float32)
    np.square(block, out=augmented[:, :dim])
    augmented[:, dim : 2 * dim] = block
    augmented[:, 2 * dim] = 1.0
    return augmented


def _unnormalised_posteriors(joint, axis):
    """exp(log joint - its maximum) in place, over the components along ``axis`` of
    ``joint``; returns it, its sums (n,) and the maxima (n,) over that axis.

    joint : the log joint of n descriptors and K components, (n, K) with ``axis=1`` or
    (K, n) with ``axis=0``. Subtracting each descriptor's maximum before
    exponentiating (log-sum-exp) keeps its largest term at 1, so nothing overflows and
    each sum is >= 1; the log-likelihood of descriptor t is ``row_max[t] +
    log(row_sum[t])``. Terms below ``exp(LOG_POSTERIOR_FLOOR)`` of their descriptor's
    largest are set to 0 (see there).
    """
    row_max = joint.max(axis=axis)
    joint -= np.expand_dims(row_max, axis)
    kept = joint >= LOG_POSTERIOR_FLOOR
    np.maximum(joint, LOG_POSTERIOR_FLOOR, out=joint)
    np.exp(joint, out=joint)
    joint *= kept
    return joint, joint.sum(axis=axis), row_max


def gmm_posteriors(descriptors, weights, means, variances):
    """Posterior probabilities gamma_t(k) of the components of a diagonal GMM.

    ``gamma_t(k) = w_k N(x_t; mu_k, diag(var_k)) / sum_j w_j N(x_t; mu_j, diag(var_j))``,
    computed in the log domain (log-sum-exp).

    Parameters
    ----------
    descriptors : (N, D) float32
    weights : (K,) mixture weights, positive, summing to 1.
    means : (K, D)
    variances : (K, D), positive (diagonal covariances).

    Returns
    -------
    (N, K) float32, rows summing to 1 (held whole: for moderate N; the encoders
    stream through :func:`gmm_statistics` instead).
    """
    coefficients = _log_joint_coefficients(weights, means, variances)
    augmented = _augment(np.asarray(descriptors, dtype=np.float32))
    posteriors, row_sum, _ = _unnormalised_posteriors(augmented @ coefficients, axis=1)
    posteriors /= row_sum[:, None]
    return posteriors


def gmm_statistics(descriptors, weights, means, variances, chunk_size=CHUNK_SIZE):
    """Zeroth, first and second order soft statistics of descriptors under a diagonal GMM.

    ``S0_k = sum_t gamma_t(k)``, ``S1_k = sum_t gamma_t(k) x_t``,
    ``S2_k = sum_t gamma_t(k) x_t^2`` (element-wise square): what both the EM
    M-step and the Fisher Vector need. Two GEMMs per block of descriptors: the log
    joint ``[x^2, x, 1] @ A`` and ``gamma^T [x^2, x, 1]``, the posteriors'
    normalisation being folded into the rows of the right-hand factor.

    Parameters
    ----------
    descriptors : (N, D) float32
    weights, means, variances : (K,), (K, D), (K, D), as in :func:`gmm_posteriors`.

    Returns
    -------
    s0 : (K,) float64
    s1 : (K, D) float64
    s2 : (K, D) float64
    log_likelihood : float, ``sum_t log p(x_t)``.
    """
    return _summed_statistics(descriptors, weights, means, variances, map, chunk_size)


def _summed_statistics(descriptors, weights, means, variances, block_map, chunk_size):
    """:func:`gmm_statistics` of the blocks of ``chunk_size`` descriptors run by
    ``block_map``, summed in block order; the log joint's coefficients computed once."""
    coefficients = _log_joint_coefficients(weights, means, variances)
    parts = block_map(lambda block: _block_statistics(block, coefficients), row_blocks(descriptors, chunk_size))
    totals = np.zeros((coefficients.shape[1], coefficients.shape[0]), dtype=np.float64)
    log_likelihood = 0.0
    for block_totals, block_log_likelihood in parts:
        totals += block_totals
        log_likelihood += block_log_likelihood
    return _split_statistics(totals, log_likelihood)


def _block_statistics(block, coefficients):
    """``gamma^T [x^2, x, 1]`` (K, 2D+1) float64 and the log-likelihood (float) of one
    block of descriptors (n, D), given the log joint's coefficients (2D+1, K) of
    :func:`_log_joint_coefficients` (computed once per signature, not per block)."""
    n_components = coefficients.shape[1]
    augmented = _augment(np.asarray(block, dtype=np.float32))
    # Components by row, (K, n): the maxima and sums over the components are then
    # element-wise operations between rows, faster than reductions along the rows
    # of (n, K), and the posteriors are the second GEMM's left factor as they are
    # (a block of the default run's FV: 2.8 against 2.3 ms at K = 64, 7.5 against
    # 7.0 at K = 256; one thread).
    unnormalised, row_sum, row_max = _unnormalised_posteriors(coefficients.T @ augmented.T, axis=0)
    log_likelihood = float(np.sum(row_max, dtype=np.float64) + np.sum(np.log(row_sum), dtype=np.float64))
    # gamma = unnormalised / row_sum: normalise whichever factor of the second
    # GEMM is smaller, the (K, n) posteriors or the (n, 2D+1) descriptors.
    if n_components > augmented.shape[1]:
        augmented /= row_sum[:, None]
    else:
        unnormalised /= row_sum
    return (unnormalised @ augmented).astype(np.float64), log_likelihood


def _split_statistics(totals, log_likelihood):
    """(s0, s1, s2, log_likelihood) of :func:`gmm_statistics` from the summed (K, 2D+1)
    ``gamma^T [x^2, x, 1]``."""
    dim = totals.shape[1] // 2
    return totals[:, 2 * dim], totals[:, dim : 2 * dim], totals[:, :dim], log_likelihood


def blocked_gmm_statistics(descriptors, weights, means, variances, block_map=map):
    """:func:`gmm_statistics` of the descriptors, computed block by block by
    ``block_map`` (e.g. on threads, :func:`blas_block_map`) and summed in block order:
    the same values, to the bit, as one call of :func:`gmm_statistics` (which sums
    the same blocks in the same order).
    """
    return _summed_statistics(descriptors, weights, means, variances, block_map, CHUNK_SIZE)


def fisher_vector(descriptors, weights, means, variances, block_map=map):
    """Fisher Vector of a set of descriptors under a diagonal GMM.

    Gradients of the average log-likelihood with respect to the means and the
    standard deviations, normalised by the diagonal closed-form approximation of
    the Fisher information (Perronnin, Sánchez & Mensink, ECCV 2010; Perronnin
    et al., CVPR 2010, ref. [2] of Negrel et al. 2014). Followed by
    :func:`power_l2_normalise`, this is their "improved" Fisher Vector. With
    posteriors gamma_t(k) and N descriptors::

        G_mu,k    = 1 / (N sqrt(w_k))   sum_t gamma_t(k) (x_t - mu_k) / sigma_k
        G_sigma,k = 1 / (N sqrt(2 w_k)) sum_t gamma_t(k) [((x_t - mu_k) / sigma_k)^2 - 1]

    evaluated from the soft statistics of :func:`gmm_statistics`
    (``sum_t gamma (x - mu)^2 = S2 - 2 mu S1 + mu^2 S0``, in float64).

    Parameters
    ----------
    descriptors : (N, D) float32 (PCA-reduced local descriptors, D = 80 in the paper).
    weights : (K,) mixture weights w_k.
    means : (K, D) mu_k.
    variances : (K, D) sigma_k^2 (diagonal covariances).
    block_map : callable, default ``map``
        Runs :func:`gmm_statistics` on the blocks of ``CHUNK_SIZE`` descriptors,
        e.g. the ``map`` of :func:`blas_block_map`; their statistics are summed in
        block order.

    Returns
    -------
    (2 * K * D,) float32, raw (the power and L2 normalisations are separate), laid
    out as ``[G_mu,1 ... G_mu,K, G_sigma,1 ... G_sigma,K]``: entry ``k*D + d`` is
    G_mu,k[d] and entry ``K*D + k*D + d`` is G_sigma,k[d]. An empty descriptor set
    gives the zero vector (no gradient information).
    """
    n_components, dim = means.shape
    n = len(descriptors)
    if n == 0:
        return np.zeros(2 * n_components * dim, dtype=np.float32)
    s0, s1, s2, _ = blocked_gmm_statistics(descriptors, weights, means, variances, block_map)
    weights = np.asarray(weights, dtype=np.float64)[:, None]
    means = np.asarray(means, dtype=np.float64)
    variances = np.asarray(variances, dtype=np.float64)
    s0 = s0[:, None]
    grad_means = (s1 - s0 * means) / (np.sqrt(variances) * n * np.sqrt(weights))
    sq_deviations = (s2 - 2.0 * means * s1 + means**2 * s0) / variances
    grad_sigmas = (sq_deviations - s0) / (n * np.sqrt(2.0 * weights))
    return np.concatenate([grad_means.ravel(), grad_sigmas.ravel()]).astype(np.float32)


def l2_normalise_rows(Y):
    """Rows of ``Y`` ((n, D), or one (D,) row) scaled to unit L2 norm, in a new array of
    Y's dtype; rows that are entirely zero stay zero. How reduced signatures are scored
    by Table I and Table II, and cosine similarity's normalisation."""
    norms = np.linalg.norm(Y, axis=-1, keepdims=True)
    return np.divide(Y, norms, out=np.zeros_like(Y), where=norms > 0)


def power_l2_normalise(X, alpha=0.1):
    """Signed power normalisation followed by L2 normalisation of each row.

    ``y = sign(x) |x|^alpha``, then ``y / ||y||_2`` (Perronnin et al. 2010;
    Negrel et al. 2014, §V-B, alpha = 0.1). Rows that are entirely zero stay zero
    (an image without descriptors keeps a zero signature rather than NaNs).

    Parameters
    ----------
    X : (D,) or (n, D) array of signatures.
    alpha : float in (0, 1].

    Returns
    -------
    float32 array of the shape of X.
    """
    Y = np.asarray(X, dtype=np.float32)
    Y = np.sign(Y) * np.abs(Y) ** np.float32(alpha)
    return l2_normalise_rows(Y)
