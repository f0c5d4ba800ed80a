"""Aggregation of an image's local descriptors into one signature: VLAD and Fisher Vector.

The pure formulas behind the codebooks of :mod:`ndir.codebooks` (which learn the
parameters these functions take) and the power + L2 normalisation applied to both
signatures (Negrel et al. 2014, §V-B: "power-normalization (... set to 0.1) and
l2-normalization on both signatures").

Everything works on float32 arrays; the costly parts are matrix products over
blocks of ``chunk_size`` descriptors, so memory stays bounded (a block's
``(chunk_size, K)`` posterior or score matrix) whatever the number of descriptors;
the GMM statistics are accumulated across blocks in float64.

:func:`vlad_signatures` and :func:`fisher_vectors` encode one image's descriptors
under several codebooks at once (the workflow's VLAD and FV codebooks of every
K); :func:`vlad` and :func:`fisher_vector` are their one-codebook cases.
"""

import cv2
import numpy as np
import scipy.sparse

CHUNK_SIZE = 4096
"""Descriptors per block: a (4096, 512) float32 block is 8 MiB and stays in cache.

For :func:`fisher_vectors` on one thread, blocks of 1,024, 2,048 and 4,096 time the
same within the noise (±5 %); on two BLAS threads of a shared machine every block's
GEMMs wait for both threads to be scheduled, and the FV of 20k descriptors at K = 512
took 162-176 ms in blocks of 4,096, 236 ms in blocks of 2,048, 470 ms in blocks of 1,024."""

EXP_SHIFT = np.float32(64.0)
""":func:`fisher_vectors` exponentiates ``log joint - max over components + EXP_SHIFT``:
the largest term is e^64 and a sum of up to 1e10 of them stays finite."""

EXP_FLOOR = np.float32(-87.0)
"""Exponents are raised to this before ``cv2.exp``: exp(-87) = 1.6e-38 is still a
normal float32, and ``cv2.exp`` is 40 times slower on results that are not."""


def nearest_centroids(descriptors, centroids, chunk_size=CHUNK_SIZE):
    """Index of the nearest centroid (squared Euclidean distance) of each descriptor.

    Parameters
    ----------
    descriptors : (N, D) float32
    centroids : (K, D) float32

    Returns
    -------
    (N,) int64 in [0, K). Computed as ``argmax_k(x.c_k - |c_k|^2 / 2)`` (one GEMM
    per block), so ties between equidistant centroids go to the lower index.
    """
    descriptors = np.asarray(descriptors, dtype=np.float32)
    centroids = np.asarray(centroids, dtype=np.float32)
    # |x|^2 is the same for every centroid, so it does not change the argmin.
    half_sq_norms = 0.5 * np.einsum("kd,kd->k", centroids, centroids)
    labels = np.empty(len(descriptors), dtype=np.int64)
    for start in range(0, len(descriptors), chunk_size):
        scores = descriptors[start : start + chunk_size] @ centroids.T
        scores -= half_sq_norms
        labels[start : start + chunk_size] = scores.argmax(axis=1)
    return labels


def cluster_sums(X, labels, n_clusters):
    """Per-cluster sum and count of the rows of X, given their cluster labels.

    Parameters
    ----------
    X : (N, D) float32 or float64
    labels : (N,) int in [0, K)
    n_clusters : int K

    Returns
    -------
    sums : (K, D) in the dtype of X, ``sums[k] = X[labels == k].sum(axis=0)``
    counts : (K,) int64
    """
    n = len(labels)
    # A (K, N) one-hot sparse matrix: one pass over the rows, unlike np.add.at.
    one_hot = scipy.sparse.csr_matrix(
        (np.ones(n, dtype=X.dtype), (labels, np.arange(n))), shape=(n_clusters, n)
    )
    return one_hot @ X, np.bincount(labels, minlength=n_clusters)


def vlad_signatures(descriptors, codebooks, chunk_size=CHUNK_SIZE):
    """VLAD signatures of one set of descriptors under several codebooks.

    Per codebook, the formula of :func:`vlad`. The descriptors are assigned by
    :func:`nearest_centroids`; the residual sums of all codebooks then come from
    one pass over the descriptors, as ``sum_{x in k} x - n_k c_k`` accumulated in
    float64 (exact for these sums, so the subtraction cancels nothing that
    matters), by a sparse (sum_i K_i, n_block) one-hot product per block.

    Measured on the 77,309 descriptors of a 512x384 image, K = 64...512, one
    thread: 29 ms for the sums of the four codebooks, against 98 ms for a
    per-codebook gather of ``x - c_k`` and float32 sparse sum, whose rounding
    reached 1e-5 of the largest sum (enough to flip the sign of a small entry:
    0.011 in one normalised signature of the default run).

    Parameters
    ----------
    descriptors : (N, D) float32
    codebooks : sequence of ``(centroids (K_i, D), cluster_components (K_i, D, d'_i))``
    chunk_size : int, descriptors per block.

    Returns
    -------
    list of (K_i * d'_i,) float32, raw, in the order of ``codebooks``.
    """
    descriptors = np.asarray(descriptors, dtype=np.float32)
    centroids = [np.asarray(c, dtype=np.float32) for c, _ in codebooks]
    components = [np.asarray(p, dtype=np.float32) for _, p in codebooks]
    n = len(descriptors)
    if n == 0:
        return [np.zeros(p.shape[0] * p.shape[2], dtype=np.float32) for p in components]
    sizes = [len(c) for c in centroids]
    # Row of each codebook's first cluster in the stacked one-hot matrix.
    first_row = np.cumsum([0] + sizes[:-1])
    # rows[t, i]: row of descriptor t's cluster under codebook i (column t of the one-hot).
    rows = np.stack(
        [nearest_centroids(descriptors, c, chunk_size) + r for c, r in zip(centroids, first_row)],
        axis=1,
    )
    ones = np.ones(rows.size)
    column_starts = np.arange(0, rows.size + 1, len(codebooks))
    sums = np.zeros((sum(sizes), descriptors.shape[1]), dtype=np.float64)
    for start in range(0, n, chunk_size):
        block = rows[start : start + chunk_size]
        one_hot = scipy.sparse.csc_matrix(
            (ones[: block.size], block.ravel(), column_starts[: len(block) + 1]),
            shape=(len(sums), len(block)),
        )
        sums += one_hot @ descriptors[start : start + chunk_size].astype(np.float64)
    counts = np.bincount(rows.ravel(), minlength=len(sums))
    signatures = []
    for c, p, r, k in zip(centroids, components, first_row, sizes):
        residual_sums = (sums[r : r + k] - counts[r : r + k, None] * c).astype(np.float32)
        signatures.append(np.matmul(residual_sums[:, None, :], p).ravel())
    return signatures


def vlad(descriptors, centroids, cluster_components):
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

    Returns
    -------
    (K * d',) float32, raw (not normalised); block k is ``v[k*d' : (k+1)*d']``.
    An empty descriptor set gives the zero vector. See :func:`vlad_signatures`.
    """
    return vlad_signatures(descriptors, [(centroids, cluster_components)])[0]


def _log_joint_coefficients(weights, means, variances):
    """Coefficients A (2D+1, K) with ``[x^2, x, 1] @ A = log w_k + log N(x; mu_k, diag(var_k))``.

    Expanding the quadratic form turns the N x K x D evaluation into one GEMM.
    The coefficients are computed in float64, then rounded once to float32.
    """
    weights, means, variances = (
        np.asarray(a, dtype=np.float64) for a in (weights, means, variances)
    )
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


def _augment(block, buffer=None):
    """``[x^2, x, 1]`` (n, 2D+1) float32 of a block of descriptors (n, D).

    Written into the first n rows of ``buffer`` (m >= n, 2D+1) float32 if given.
    """
    n, dim = block.shape
    if buffer is None:
        augmented = np.empty((n, 2 * dim + 1), dtype=np.float32)
    else:
        augmented = buffer[:n]
    np.square(block, out=augmented[:, :dim])
    augmented[:, dim : 2 * dim] = block
    augmented[:, 2 * dim] = 1.0
    return augmented


def _unnormalised_posteriors(augmented, coefficients):
    """exp(log joint - row max) (n, K) float32, its row sums (n,) and the row maxima (n,).

    Subtracting the row maximum before exponentiating (log-sum-exp) keeps the
    largest term at 1, so nothing overflows and each row sum is >= 1; the
    log-likelihood of row t is ``row_max[t] + log(row_sum[t])``.
    """
    joint = augmented @ coefficients
    row_max = joint.max(axis=1)
    joint -= row_max[:, None]
    np.exp(joint, out=joint)
    return joint, joint.sum(axis=1), row_max


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
    posteriors, row_sum, _ = _unnormalised_posteriors(augmented, coefficients)
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
    n_components, dim = means.shape
    coefficients = _log_joint_coefficients(weights, means, variances)
    totals = np.zeros((n_components, 2 * dim + 1), dtype=np.float64)
    log_likelihood = 0.0
    for start in range(0, len(descriptors), chunk_size):
        block = np.asarray(descriptors[start : start + chunk_size], dtype=np.float32)
        augmented = _augment(block)
        unnormalised, row_sum, row_max = _unnormalised_posteriors(
            augmented, coefficients
        )
        log_likelihood += float(
            np.sum(row_max, dtype=np.float64)
            + np.sum(np.log(row_sum), dtype=np.float64)
        )
        # gamma = unnormalised / row_sum: dividing the rows of the (n, 2D+1) factor
        # instead of the (n, K) posteriors is cheaper when K > 2D + 1.
        augmented /= row_sum[:, None]
        totals += unnormalised.T @ augmented
    return totals[:, 2 * dim], totals[:, dim : 2 * dim], totals[:, :dim], log_likelihood


def fisher_vectors(descriptors, mixtures, projection=None, chunk_size=CHUNK_SIZE):
    """Fisher Vectors of one set of descriptors under several diagonal GMMs.

    Per GMM, the formula of :func:`fisher_vector`, from the soft statistics
    S0, S1, S2 of :func:`gmm_statistics` computed the same way (two GEMMs per block
    of descriptors and GMM, float32, summed across blocks in float64), except for
    how the posteriors are exponentiated. Of the log joint ``L`` of a descriptor
    we exponentiate ``L - max_k L + EXP_SHIFT``, raised to ``EXP_FLOOR``, with
    ``cv2.exp``; the posterior normalisation divides the shift out. The shift
    keeps the exponents of all but negligible posteriors where the result is a
    normal float32, and the floor catches the rest: an exponent raised to it had a
    posterior below exp(-151), zero in float32 whatever we do, and it stays zero
    in the statistics (its product with ``[x^2, x, 1] / row sum``, row sum
    >= exp(64), underflows). So the posteriors are those of the log-sum-exp to
    float32 rounding (cv2.exp is within 2 ulp of the exact exponential).

    Why ``cv2.exp``: on (2048, 512) float32 blocks, one thread, it takes 0.27 ns
    per entry against numpy's 1.4 ns, and numpy's rises to 3.5 ns once some
    entries underflow, as a GMM's posteriors do (cv2's to 11 ns: hence the floor).

    Parameters
    ----------
    descriptors : (N, D) float32, or (N, D0) with ``projection``.
    mixtures : sequence of ``(weights (K_i,), means (K_i, D), variances (K_i, D))``.
    projection : optional ``(mean (D0,), components (D0, D))`` float32: the
        descriptors are reduced to ``(x - mean) @ components`` block by block
        (what :meth:`ndir.codebooks.DescriptorPCA.transform` does to all of them,
        without its two (N, D0) and (N, D) temporaries).
    chunk_size : int, descriptors per block.

    Returns
    -------
    list of (2 * K_i * D,) float32, raw, in the order of ``mixtures``, laid out as
    in :func:`fisher_vector`.
    """
    descriptors = np.asarray(descriptors, dtype=np.float32)
    n = len(descriptors)
    dim = mixtures[0][1].shape[1]
    sizes = [len(weights) for weights, _, _ in mixtures]
    if n == 0:
        return [np.zeros(2 * k * dim, dtype=np.float32) for k in sizes]
    # Transposed, (K_i, 2D+1): a block's log joint comes out as (K_i, n_block), so
    # that the maximum and the sum over the components are element-wise operations
    # between rows (0.1-0.2 ns per entry, against 0.2-0.8 ns for numpy's reductions
    # along rows of 64-512 entries).
    coefficients = [
        np.ascontiguousarray(_log_joint_coefficients(*mixture).T) for mixture in mixtures
    ]
    # All GMMs' (K_i, n_block) blocks, one after the other, so that the floor and the
    # exponential run once over all of them; buffers are reused across blocks (fresh
    # ones cost page faults).
    n_rows = min(chunk_size, n)
    exponents = np.empty(n_rows * sum(sizes), dtype=np.float32)
    augmented_buffer = np.empty((n_rows, 2 * dim + 1), dtype=np.float32)
    normalised_buffer = np.empty_like(augmented_buffer)
    if projection is not None:
        mean, components = (np.asarray(a, dtype=np.float32) for a in projection)
        centred_buffer = np.empty((n_rows, len(mean)), dtype=np.float32)
        reduced_buffer = np.empty((n_rows, dim), dtype=np.float32)
    totals = [np.zeros((k, 2 * dim + 1), dtype=np.float64) for k in sizes]
    for start in range(0, n, chunk_size):
        block = descriptors[start : start + chunk_size]
        n_block = len(block)
        if projection is not None:
            centred = np.subtract(block, mean, out=centred_buffer[:n_block])
            block = np.matmul(centred, components, out=reduced_buffer[:n_block])
        augmented = _augment(block, augmented_buffer)
        joints, end = [], 0
        for a in coefficients:
            joint = exponents[end : end + a.shape[0] * n_block].reshape(a.shape[0], n_block)
            end += joint.size
            np.matmul(a, augmented.T, out=joint)
            shift = joint.max(axis=0)
            shift -= EXP_SHIFT
            joint -= shift
            joints.append(joint)
        used = exponents[:end]
        # cv2.max: 0.15 ns per entry against numpy's 0.47 (one thread, 2M entries).
        cv2.max(used, float(EXP_FLOOR), dst=used)
        cv2.exp(used, dst=used)
        for unnormalised, total in zip(joints, totals):
            # gamma = unnormalised / its column sum: dividing the rows of the
            # (n_block, 2D+1) factor instead costs 3 times less than normalising
            # the posteriors (47 against 142 ms per image at K = 64...512).
            normalised = np.divide(
                augmented,
                unnormalised.sum(axis=0)[:, None],
                out=normalised_buffer[:n_block],
            )
            total += unnormalised @ normalised
    return [
        _fisher_gradients(total[:, 2 * dim], total[:, dim : 2 * dim], total[:, :dim], n, *mixture)
        for total, mixture in zip(totals, mixtures)
    ]



def _fisher_gradients(s0, s1, s2, n, weights, means, variances):
    """The Fisher Vector (2 K D,) float32 of :func:`fisher_vector` from its soft
    statistics: s0 (K,), s1 and s2 (K, D), float64, over n descriptors."""
    weights = np.asarray(weights, dtype=np.float64)[:, None]
    means = np.asarray(means, dtype=np.float64)
    variances = np.asarray(variances, dtype=np.float64)
    s0 = s0[:, None]
    grad_means = (s1 - s0 * means) / (np.sqrt(variances) * n * np.sqrt(weights))
    sq_deviations = (s2 - 2.0 * means * s1 + means**2 * s0) / variances
    grad_sigmas = (sq_deviations - s0) / (n * np.sqrt(2.0 * weights))
    return np.concatenate([grad_means.ravel(), grad_sigmas.ravel()]).astype(np.float32)


def fisher_vector(descriptors, weights, means, variances):
    """Fisher Vector of a set of descriptors under a diagonal GMM.

    Gradients of the average log-likelihood with respect to the means and the
    standard deviations, normalised by the diagonal closed-form approximation of
    the Fisher information (Perronnin, Sánchez & Mensink, ECCV 2010; Perronnin
    et al., CVPR 2010, ref. [2] of Negrel et al. 2014). Followed by
    :func:`power_l2_normalise`, this is their "improved" Fisher Vector. With
    posteriors gamma_t(k) and N descriptors::

        G_mu,k    = 1 / (N sqrt(w_k))   sum_t gamma_t(k) (x_t - mu_k) / sigma_k
        G_sigma,k = 1 / (N sqrt(2 w_k)) sum_t gamma_t(k) [((x_t - mu_k) / sigma_k)^2 - 1]

    evaluated from the soft statistics S0, S1, S2 (see :func:`gmm_statistics`)
    as ``sum_t gamma (x - mu)^2 = S2 - 2 mu S1 + mu^2 S0``, in float64. Computed
    by :func:`fisher_vectors`.

    Parameters
    ----------
    descriptors : (N, D) float32 (PCA-reduced local descriptors, D = 80 in the paper).
    weights : (K,) mixture weights w_k.
    means : (K, D) mu_k.
    variances : (K, D) sigma_k^2 (diagonal covariances).

    Returns
    -------
    (2 * K * D,) float32, raw (the power and L2 normalisations are separate), laid
    out as ``[G_mu,1 ... G_mu,K, G_sigma,1 ... G_sigma,K]``: entry ``k*D + d`` is
    G_mu,k[d] and entry ``K*D + k*D + d`` is G_sigma,k[d]. An empty descriptor set
    gives the zero vector (no gradient information).
    """
    return fisher_vectors(descriptors, [(weights, means, variances)])[0]


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
    norms = np.linalg.norm(Y, axis=-1, keepdims=True)
    np.divide(Y, norms, out=Y, where=norms > 0)
    return Y
