"""Codebooks learned on a sample of local descriptors, and how they encode an image.

Negrel et al. 2014, §V-B: VLAD "with a Principal Component Analysis (PCA)
cluster-wise [20] which preserves 80 dimensions by cluster", and FV after "a PCA on
local descriptors that preserves 80 dimensions", with codebooks of 64 to 512 words
trained on the training set only.

- :func:`fit_descriptor_pca` -> :class:`DescriptorPCA` (the FV's PCA-80).
- :func:`fit_vlad_codebook` -> :class:`VladCodebook`: k-means (faiss) on the raw
  128-d descriptors, then one PCA of the residuals per cluster.
- :func:`fit_fisher_codebook` -> :class:`FisherCodebook`: diagonal GMM fitted by
  EM on the PCA-reduced descriptors, initialised by k-means.

The codebooks' ``encode`` returns the raw signature of one image (formulas in
:mod:`ndir.encoding`), :func:`encode_image` its signatures under several codebooks,
:func:`load_codebook` either codebook from its file;
each model saves to and loads from an ``.npz`` file holding a ``kind`` field, so a
file of the wrong kind is refused with a clear message.
"""

import logging
from contextlib import nullcontext
from dataclasses import dataclass

import faiss
import numpy as np
from threadpoolctl import ThreadpoolController, threadpool_limits

from ndir import names
from ndir.encoding import (
    blas_block_map,
    blocked_gmm_statistics,
    cluster_sums,
    fisher_vector,
    nearest_centroids,
    vlad,
)
from ndir.errors import NdirInputError
from ndir.model_files import KINDS, file_kind, read_model_file, write_model_file
from ndir.projection.eigen import largest_entry_positive, top_eigenpairs

logger = logging.getLogger(__name__)

CLUSTER_COVARIANCE_SHRINKAGE = 1e-6
"""Weight of the pooled within-cluster covariance added to each cluster's own.

Negligible for a populated cluster, it makes the eigenvectors of a cluster with
fewer points than kept components (or none) well defined: the cluster's own
directions first, then the pooled within-cluster directions of largest variance.
"""

VARIANCE_FLOOR = 1e-4
"""GMM variances are kept >= this fraction of the sample's variance in each dimension."""

WEIGHT_FLOOR = 1e-6
"""GMM weights are kept >= this value, so 1/sqrt(w_k) in the Fisher Vector stays finite."""

DEAD_COMPONENT_MASS = 1e-6
"""A GMM component whose posteriors sum to less (in descriptors) keeps its Gaussian."""

SCATTER_CHUNK = 65536
"""Rows per block when accumulating scatter matrices in float64."""


def _as_descriptors(sample, what):
    """``sample`` as a float32 C-contiguous (n, D) array (copied only if needed)."""
    sample = np.ascontiguousarray(sample, dtype=np.float32)
    if sample.ndim != 2 or sample.shape[0] == 0:
        raise NdirInputError(
            f"{what}: expected a non-empty (n_descriptors, dim) array, got shape "
            f"{sample.shape}; check the descriptor sample "
            "(results/codebooks/descriptor_sample.npy)"
        )
    if not np.isfinite(sample).all():
        raise NdirInputError(
            f"{what}: the descriptor sample contains NaN or infinite values; re-run the sample_descriptors rule"
        )
    return sample


def _check_sample_size(sample, n_clusters, what):
    if not 2 <= n_clusters <= len(sample):
        raise NdirInputError(
            f"{what}: cannot fit {n_clusters} clusters on {len(sample)} descriptors; "
            "use codebook sizes between 2 and the sample size "
            "(config keys signatures.codebook_sizes and codebooks.descriptors_per_image)"
        )


def _image_descriptors(descriptors, dim):
    """One image's descriptors as float32 (n, dim); an empty array of any shape is (0, dim)."""
    descriptors = np.asarray(descriptors, dtype=np.float32)
    if descriptors.size == 0:
        return descriptors.reshape(0, dim)
    if descriptors.ndim != 2 or descriptors.shape[1] != dim:
        raise ValueError(f"expected (n, {dim}) descriptors for this codebook, got shape {descriptors.shape}")
    return descriptors


def _scatter(X, center):
    """``sum_i (x_i - center)(x_i - center)^T`` (D, D) float64, accumulated over row blocks."""
    scatter = np.zeros((X.shape[1], X.shape[1]), dtype=np.float64)
    for start in range(0, len(X), SCATTER_CHUNK):
        block = X[start : start + SCATTER_CHUNK].astype(np.float64) - center
        scatter += block.T @ block
    return scatter


@dataclass(frozen=True, eq=False)
class DescriptorPCA:
    """PCA of local descriptors (the FV's reduction of HOG-128 to 80 dimensions).

    Attributes
    ----------
    mean_ : (D,) float32, mean of the training descriptors.
    components_ : (D, d') float32, orthonormal principal axes (columns), by
        decreasing variance.
    explained_variance_ : (d',) float32, variance of the sample along each axis.
    """

    mean_: np.ndarray
    components_: np.ndarray
    explained_variance_: np.ndarray

    @property
    def n_components(self):
        return self.components_.shape[1]

    def transform(self, X):
        """Coordinates ``(X - mean_) @ components_`` (n, d') float32 of descriptors X (n, D)."""
        return (np.asarray(X, dtype=np.float32) - self.mean_) @ self.components_

    def save(self, path):
        """Write the model to the ``.npz`` file ``path`` (kind ``"descriptor_pca"``)."""
        write_model_file(
            path,
            "descriptor_pca",
            mean=self.mean_,
            components=self.components_,
            explained_variance=self.explained_variance_,
        )

    @classmethod
    def load(cls, path):
        """Read a model written by :meth:`save`; NdirInputError if ``path`` is not one."""
        arrays = read_model_file(path, "descriptor_pca", ["mean", "components", "explained_variance"])
        return cls(arrays["mean"], arrays["components"], arrays["explained_variance"])


def fit_descriptor_pca(sample, n_components=80):
    """PCA of a sample of local descriptors, by eigendecomposition of its covariance.

    Parameters
    ----------
    sample : (n, D) float32 descriptors (D = 128 for dense HOG), n >= 2.
    n_components : int, 1 <= n_components <= D (80 in the paper).

    Returns
    -------
    DescriptorPCA
    """
    sample = _as_descriptors(sample, "fit_descriptor_pca")
    n, dim = sample.shape
    if not 1 <= n_components <= dim or n < 2:
        raise NdirInputError(
            f"fit_descriptor_pca: need 1 <= n_components <= {dim} and at least 2 "
            f"descriptors, got n_components={n_components} and {n} descriptors "
            "(config key codebooks.pca_dims)"
        )
    mean = sample.mean(axis=0, dtype=np.float64)
    covariance = _scatter(sample, mean) / (n - 1)
    variances, components = top_eigenpairs(covariance, n_components)
    components = largest_entry_positive(components)
    logger.info(
        "descriptor PCA: %d of %d dimensions keep %.1f%% of the variance",
        n_components,
        dim,
        100 * variances.sum() / np.trace(covariance),
    )
    return DescriptorPCA(
        mean.astype(np.float32),
        components.astype(np.float32),
        variances.astype(np.float32),
    )


def kmeans(X, n_clusters, seed, n_iter, n_threads):
    """Lloyd k-means centroids (K, D) float32 of X (n, D) float32, with faiss.

    All points are used (faiss subsamples to 256 per centroid by default), and the
    initial centroids are drawn with ``seed``. faiss's centroids also depend on its
    number of threads (its BLAS distance products round by the threads' blocking:
    the default run's VLAD-64 centroids differ by up to 1.4e-3 between one and two
    threads), so ``n_threads`` is part of what is computed, fixed by the caller
    rather than taken from the cores: the same centroids with ``--cores 1`` (the
    threads then share one core) as with ``--cores 16``.
    """
    if len(X) < 39 * n_clusters:
        logger.warning(
            "k-means: %d points for %d clusters (fewer than 39 per cluster)",
            len(X),
            n_clusters,
        )
    clustering = faiss.Kmeans(
        X.shape[1],
        n_clusters,
        niter=n_iter,
        seed=seed,
        max_points_per_centroid=len(X) // n_clusters + 1,
        min_points_per_centroid=1,
        verbose=False,
    )
    with threadpool_limits(limits=n_threads):
        clustering.train(X)
    logger.info(
        "k-means K=%d: mean squared distance to the nearest centroid %.4g",
        n_clusters,
        clustering.obj[-1] / len(X),
    )
    return clustering.centroids.copy()


@dataclass(frozen=True, eq=False)
class VladCodebook:
    """k-means centroids and per-cluster PCA axes for VLAD with cluster-wise PCA.

    Attributes
    ----------
    centroids_ : (K, D) float32, k-means centroids of the raw descriptors.
    components_ : (K, D, d') float32, orthonormal principal axes P_k (columns) of
        the residuals x - c_k of each cluster, by decreasing variance.
    seed, n_iter : the k-means settings it was fitted with.
    """

    centroids_: np.ndarray
    components_: np.ndarray
    seed: int
    n_iter: int

    @property
    def n_clusters(self):
        return self.centroids_.shape[0]

    @property
    def n_components(self):
        return self.components_.shape[2]

    @property
    def dim(self):
        """Signature length K * d'."""
        return self.n_clusters * self.n_components

    def encode(self, descriptors, block_map=None):
        """Raw VLAD signature (K * d',) float32 of one image's descriptors (n, D).

        See :func:`ndir.encoding.vlad`; no descriptors give the zero vector. The
        blocks of descriptors run on ``block_map``, by default that of a
        :func:`ndir.encoding.blas_block_map` opened for the call: the same bits on
        any number of threads. A ``block_map`` given must come from an open
        ``blas_block_map`` (whose BLAS limit the descriptor PCA relies on too).
        """
        descriptors = _image_descriptors(descriptors, self.centroids_.shape[1])
        with _encoding_map(block_map) as block_map:
            return vlad(descriptors, self.centroids_, self.components_, block_map)

    def save(self, path):
        """Write the codebook to the ``.npz`` file ``path`` (kind ``"vlad"``)."""
        write_model_file(
            path,
            "vlad",
            centroids=self.centroids_,
            components=self.components_,
            seed=self.seed,
            n_iter=self.n_iter,
        )

    @classmethod
    def load(cls, path):
        """Read a codebook written by :meth:`save`; NdirInputError if ``path`` is not one."""
        arrays = read_model_file(path, "vlad", ["centroids", "components", "seed", "n_iter"])
        return cls(
            arrays["centroids"],
            arrays["components"],
            int(arrays["seed"]),
            int(arrays["n_iter"]),
        )


def fit_vlad_codebook(sample, n_clusters, n_components=80, seed=0, n_iter=20, kmeans_threads=2):
    """k-means codebook with one PCA of the residuals per cluster (Negrel et al. 2012).

    1. k-means (faiss, all points, ``n_iter`` Lloyd iterations from centroids drawn
       with ``seed``) on the raw descriptors.
    2. :func:`fit_cluster_pca`: per cluster, the ``n_components`` principal axes of
       the residuals x - c_k of its descriptors (see there for clusters with fewer
       points than axes).

    Parameters
    ----------
    sample : (n, D) float32 training descriptors, n >= n_clusters.
    n_clusters : int K >= 2.
    n_components : int d' <= D (80 in the paper).
    seed : int, seed of the k-means initialisation.
    n_iter : int, k-means iterations.
    kmeans_threads : int, threads of the k-means, which set its last bits
        (:func:`kmeans`); 2, the count the default run's codebooks were fitted with.

    Returns
    -------
    VladCodebook with ``dim = K * d'``.
    """
    sample = _as_descriptors(sample, "fit_vlad_codebook")
    _check_sample_size(sample, n_clusters, "fit_vlad_codebook")
    dim = sample.shape[1]
    if not 1 <= n_components <= dim:
        raise NdirInputError(
            f"fit_vlad_codebook: n_components={n_components} must be in [1, {dim}] (config key codebooks.pca_dims)"
        )
    centroids = kmeans(sample, n_clusters, seed, n_iter, kmeans_threads)
    components = fit_cluster_pca(sample, centroids, n_components)
    return VladCodebook(centroids, components, seed, n_iter)


def fit_cluster_pca(sample, centroids, n_components):
    """Principal axes of the residuals of each cluster (cluster-wise PCA, ref. [20]).

    Each descriptor is assigned to its nearest centroid (as in
    :func:`ndir.encoding.vlad`). P_k holds the ``n_components`` leading
    eigenvectors of the residual second-moment matrix
    ``C_k = 1/n_k sum_{x in k} (x - c_k)(x - c_k)^T``: the axes that keep most of
    the energy of the residuals the VLAD block k sums.

    Clusters with few points: ``C_k`` has rank <= n_k, so we decompose
    ``C_k + 1e-6 C_pooled`` (``C_pooled``: all clusters' residuals). The shift is
    negligible for a populated cluster and makes the basis of a cluster with fewer
    than ``n_components`` points (or none) well defined: its own directions first,
    then the pooled directions of largest residual variance.

    Parameters
    ----------
    sample : (n, D) float32 descriptors.
    centroids : (K, D) float32.
    n_components : int d' <= D.

    Returns
    -------
    (K, D, d') float32, orthonormal columns per cluster, by decreasing variance,
    each column's largest-magnitude entry positive.
    """
    n_clusters = len(centroids)
    labels = nearest_centroids(sample, centroids)
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(n_clusters + 1))
    scatters = np.stack(
        [
            _scatter(
                sample[order[bounds[k] : bounds[k + 1]]],
                centroids[k].astype(np.float64),
            )
            for k in range(n_clusters)
        ]
    )
    counts = np.diff(bounds)
    pooled = scatters.sum(axis=0) / len(sample)
    covariances = scatters / np.maximum(counts, 1)[:, None, None]
    covariances += CLUSTER_COVARIANCE_SHRINKAGE * pooled
    _, components = top_eigenpairs(covariances, n_components)
    components = largest_entry_positive(components)
    logger.info(
        "cluster-wise PCA K=%d: cluster sizes %d..%d, %d clusters with fewer than %d points",
        n_clusters,
        counts.min(),
        counts.max(),
        int((counts < n_components).sum()),
        n_components,
    )
    return components.astype(np.float32)


@dataclass(frozen=True, eq=False)
class FisherCodebook:
    """Diagonal GMM on PCA-reduced descriptors, for the Fisher Vector.

    Attributes
    ----------
    pca_ : DescriptorPCA applied to the descriptors before the GMM.
    weights_ : (K,) float32 mixture weights (sum 1).
    means_ : (K, d') float32.
    variances_ : (K, d') float32 diagonal covariances.
    seed, n_iter : the fit settings (k-means seed, EM iterations).
    """

    pca_: DescriptorPCA
    weights_: np.ndarray
    means_: np.ndarray
    variances_: np.ndarray
    seed: int
    n_iter: int

    @property
    def n_clusters(self):
        return self.means_.shape[0]

    @property
    def dim(self):
        """Signature length 2 * K * d'."""
        return 2 * self.means_.size

    def encode(self, descriptors, block_map=None):
        """Raw Fisher Vector (2 K d',) float32 of one image's descriptors (n, D).

        The descriptors go through ``pca_`` first; see
        :func:`ndir.encoding.fisher_vector` for the formula and the layout
        ``[G_mu, G_sigma]``. No descriptors give the zero vector. ``block_map``: as
        in :meth:`VladCodebook.encode`.
        """
        descriptors = _image_descriptors(descriptors, self.pca_.mean_.shape[0])
        with _encoding_map(block_map) as block_map:
            return self.encode_reduced(self.pca_.transform(descriptors), block_map)

    def encode_reduced(self, reduced, block_map=None):
        """Raw Fisher Vector (2 K d',) float32 of descriptors already through ``pca_``
        (``reduced = pca_.transform(descriptors)``, (n, d')): what :meth:`encode`
        computes after its PCA, for codebooks sharing one PCA (:func:`encode_image`)."""
        with _encoding_map(block_map) as block_map:
            return fisher_vector(reduced, self.weights_, self.means_, self.variances_, block_map)

    def save(self, path):
        """Write the codebook and its PCA to the ``.npz`` file ``path`` (kind ``"fv"``)."""
        write_model_file(
            path,
            "fv",
            weights=self.weights_,
            means=self.means_,
            variances=self.variances_,
            pca_mean=self.pca_.mean_,
            pca_components=self.pca_.components_,
            pca_explained_variance=self.pca_.explained_variance_,
            seed=self.seed,
            n_iter=self.n_iter,
        )

    @classmethod
    def load(cls, path):
        """Read a codebook written by :meth:`save`; NdirInputError if ``path`` is not one."""
        keys = ["weights", "means", "variances", "pca_mean", "pca_components"]
        arrays = read_model_file(path, "fv", keys + ["pca_explained_variance", "seed", "n_iter"])
        pca = DescriptorPCA(
            arrays["pca_mean"],
            arrays["pca_components"],
            arrays["pca_explained_variance"],
        )
        return cls(
            pca,
            arrays["weights"],
            arrays["means"],
            arrays["variances"],
            int(arrays["seed"]),
            int(arrays["n_iter"]),
        )


def _m_step(s0, s1, s2, n, previous_means, previous_variances, variance_floor):
    """GMM parameters (float64) from soft statistics; dead components keep their Gaussian."""
    weights = np.maximum(s0 / n, WEIGHT_FLOOR)
    weights /= weights.sum()
    alive = s0 > DEAD_COMPONENT_MASS
    means = np.array(previous_means, dtype=np.float64)
    variances = np.array(previous_variances, dtype=np.float64)
    means[alive] = s1[alive] / s0[alive, None]
    variances[alive] = s2[alive] / s0[alive, None] - means[alive] ** 2
    return weights, means, np.maximum(variances, variance_floor)


def gmm_em(X, weights, means, variances, n_iter, variance_floor):
    """``n_iter`` EM iterations of a diagonal GMM on X, from the given parameters.

    E-step: :func:`ndir.encoding.gmm_statistics` (posteriors in the log domain,
    float32 GEMMs, float64 sums). M-step: ``w_k = S0_k / n``,
    ``mu_k = S1_k / S0_k``, ``var_k = S2_k / S0_k - mu_k^2``, then variances floored
    at ``variance_floor`` and weights at ``WEIGHT_FLOOR`` (renormalised); a
    component with a total posterior mass below ``DEAD_COMPONENT_MASS`` keeps its
    mean and variance.

    The E-step runs on fixed blocks of ``CHUNK_SIZE`` rows, each with single-threaded
    BLAS, on as many threads as BLAS was allowed (:func:`ndir.encoding.blas_block_map`),
    and sums the blocks in order: a multi-threaded BLAS splits the long reduction of
    the statistics GEMM by thread count, which changed the codebook in its last bits
    between a 1- and a 2-core run (and, through the rankings, the learned projectors).

    Parameters
    ----------
    X : (n, d) float32
    weights, means, variances : (K,), (K, d), (K, d) initial parameters.
    n_iter : int >= 0
    variance_floor : (d,) or scalar, lower bound on the variances.

    Returns
    -------
    weights (K,), means (K, d), variances (K, d), float64.
    """
    n = len(X)
    with blas_block_map() as block_map:
        for iteration in range(n_iter):
            s0, s1, s2, log_likelihood = blocked_gmm_statistics(X, weights, means, variances, block_map)
            weights, means, variances = _m_step(s0, s1, s2, n, means, variances, variance_floor)
            logger.info(
                "EM iteration %d, K=%d: mean log-likelihood %.6g",
                iteration + 1,
                len(weights),
                log_likelihood / n,
            )
    return weights, means, variances


def fit_fisher_codebook(sample, n_clusters, pca, seed=0, n_iter=20, kmeans_iter=10, kmeans_threads=1):
    """Diagonal GMM of PCA-reduced descriptors, by EM initialised from k-means.

    The descriptors are reduced by ``pca``; k-means (faiss, ``kmeans_iter``
    iterations, ``seed``) gives a hard partition whose counts, means and variances
    start EM; then ``n_iter`` iterations of :func:`gmm_em`, variances floored at
    ``VARIANCE_FLOOR`` (1e-4) times the sample variance of their dimension.

    Why this EM rather than scikit-learn's ``GaussianMixture(covariance_type="diag")``:
    same algorithm, but float32 GEMMs with the posterior normalisation folded into
    the statistics GEMM, against float64 and several passes over the (n, K)
    posteriors. Measured on 200k x 80, K = 256, one thread: 0.85 s per EM
    iteration against 3.1 s (benchmarks/bench_encoding.py); and it shares
    :func:`ndir.encoding.gmm_statistics` with the Fisher Vector.

    Parameters
    ----------
    sample : (n, D) float32 training descriptors (raw, D = 128), n >= n_clusters.
    n_clusters : int K >= 2.
    pca : DescriptorPCA fitted on the same kind of descriptors.
    seed : int, seed of the k-means initialisation.
    n_iter : int, EM iterations.
    kmeans_iter : int, k-means iterations of the initialisation.
    kmeans_threads : int, threads of that k-means, which set its last bits
        (:func:`kmeans`); 1, the count the default run's codebooks were fitted with.

    Returns
    -------
    FisherCodebook with ``dim = 2 * K * pca.n_components``.
    """
    sample = _as_descriptors(sample, "fit_fisher_codebook")
    _check_sample_size(sample, n_clusters, "fit_fisher_codebook")
    if sample.shape[1] != pca.mean_.shape[0]:
        raise NdirInputError(
            f"fit_fisher_codebook: descriptors have {sample.shape[1]} dimensions but the "
            f"PCA was fitted on {pca.mean_.shape[0]}; re-fit the descriptor PCA"
        )
    # Single-threaded BLAS: OpenBLAS rounds this product differently on 1 and 2
    # threads, and the codebook must not depend on the core count (see gmm_em).
    with ThreadpoolController().limit(limits=1, user_api="blas"):
        reduced = np.ascontiguousarray(pca.transform(sample))
    n = len(reduced)
    sample_variance = reduced.var(axis=0, dtype=np.float64)
    if not sample_variance.max() > 0:
        raise NdirInputError(
            "fit_fisher_codebook: all sampled descriptors are identical; "
            "the training images have no texture to learn a GMM from"
        )
    # A direction without variance still gets a positive floor (no 1/0).
    variance_floor = VARIANCE_FLOOR * np.maximum(sample_variance, 1e-6 * sample_variance.max())

    # Start from the k-means partition: one M-step with hard posteriors. A cluster
    # left empty keeps its centroid and the sample variance.
    centroids = kmeans(reduced, n_clusters, seed, kmeans_iter, kmeans_threads)
    labels = nearest_centroids(reduced, centroids)
    s1, counts = cluster_sums(reduced.astype(np.float64), labels, n_clusters)
    s2, _ = cluster_sums(np.square(reduced, dtype=np.float64), labels, n_clusters)
    weights, means, variances = _m_step(
        counts.astype(np.float64),
        s1,
        s2,
        n,
        centroids,
        np.broadcast_to(sample_variance, centroids.shape),
        variance_floor,
    )
    weights, means, variances = gmm_em(reduced, weights, means, variances, n_iter, variance_floor)
    return FisherCodebook(
        pca,
        weights.astype(np.float32),
        means.astype(np.float32),
        variances.astype(np.float32),
        seed,
        n_iter,
    )


def encode_image(descriptors, codebooks):
    """Raw signatures of one image's descriptors under several codebooks.

    Each signature equals its codebook's ``encode(descriptors)`` under single-threaded
    BLAS to the bit, whatever the number of threads: the blocks of descriptors run
    on as many threads as BLAS may use (:func:`ndir.encoding.blas_block_map`), each
    with single-threaded BLAS, so a workflow rule with one thread and a two-core
    ``ndir index`` compute the same bits. The Fisher codebooks whose descriptor PCA
    has equal arrays (a workflow fits one, ``pca.npz``, for all of them) reduce the
    descriptors once instead of once each (40-110 ms per 512-px image of 77k
    descriptors and per codebook saved).

    Parameters
    ----------
    descriptors : (n, D) float32, one image's local descriptors.
    codebooks : dict {name: VladCodebook or FisherCodebook}

    Returns
    -------
    dict {name: raw signature (codebook.dim,) float32}, in the order of ``codebooks``.
    """
    reductions = []  # (DescriptorPCA, reduced descriptors) pairs computed so far
    signatures = {}
    with blas_block_map() as block_map:
        for name, codebook in codebooks.items():
            if not isinstance(codebook, FisherCodebook):
                signatures[name] = codebook.encode(descriptors, block_map)
                continue
            pca = codebook.pca_
            reduced = next((r for p, r in reductions if _same_pca(p, pca)), None)
            if reduced is None:
                checked = _image_descriptors(descriptors, pca.mean_.shape[0])
                reduced = pca.transform(checked)
                reductions.append((pca, reduced))
            signatures[name] = codebook.encode_reduced(reduced, block_map)
    return signatures


def _same_pca(a, b):
    """Whether two DescriptorPCA reduce descriptors identically (equal mean and axes)."""
    return a is b or (np.array_equal(a.mean_, b.mean_) and np.array_equal(a.components_, b.components_))


def _encoding_map(block_map):
    """Context giving ``block_map``, or, when it is None, the ``map`` of a
    :func:`ndir.encoding.blas_block_map` opened for the call (single-threaded BLAS
    inside, so that the descriptor PCA rounds as on one core too)."""
    return blas_block_map() if block_map is None else nullcontext(block_map)


#: The codebooks of the signatures, by the ``kind`` of their model files.
CODEBOOK_CLASSES = {"vlad": VladCodebook, "fv": FisherCodebook}


def load_codebook(path):
    """A VLAD or FV codebook, its class read from the file's ``kind`` field.

    Returns
    -------
    (codebook, signature) : VladCodebook or FisherCodebook, and its name as the
        workflow spells it (``"fv-256"``: encoding and K).
    """
    kind = file_kind(path)
    if kind not in CODEBOOK_CLASSES:
        hint = (
            "the descriptor PCA is part of each FV codebook" if kind == "descriptor_pca" else f"it is a {KINDS[kind]}"
        )
        raise NdirInputError(f"{path}: not a VLAD or FV codebook ({hint}); pass --codebook {names.CODEBOOK_FILE_HINT}")
    codebook = CODEBOOK_CLASSES[kind].load(path)
    return codebook, names.signature_name(kind, codebook.n_clusters)
