"""VLAD, Fisher Vector, GMM posteriors and power + L2 normalisation against slow loops."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import multivariate_normal
from threadpoolctl import threadpool_info, threadpool_limits

from ndir import available_cpus
from ndir.encoding import (
    CHUNK_SIZE,
    LOG_POSTERIOR_FLOOR,
    blas_block_map,
    blocked_gmm_statistics,
    cluster_sums,
    fisher_vector,
    gmm_posteriors,
    gmm_statistics,
    nearest_centroids,
    power_l2_normalise,
    single_threaded_blas_pool,
    vlad,
)


def random_gmm(rng, n_components=3, dim=6, spread=2.0):
    weights = rng.uniform(0.5, 1.5, n_components)
    weights /= weights.sum()
    means = rng.normal(0, spread, (n_components, dim))
    variances = rng.uniform(0.3, 2.0, (n_components, dim))
    return weights, means, variances


def sample_gmm(rng, weights, means, variances, n):
    labels = rng.choice(len(weights), size=n, p=weights)
    return means[labels] + rng.normal(size=(n, means.shape[1])) * np.sqrt(variances[labels])


def slow_posteriors(X, weights, means, variances):
    """gamma_t(k) by explicit densities, one descriptor and one component at a time."""
    gamma = np.zeros((len(X), len(weights)))
    for t, x in enumerate(X):
        for k in range(len(weights)):
            quad = np.sum((x - means[k]) ** 2 / variances[k])
            norm = np.prod(2 * np.pi * variances[k]) ** -0.5
            gamma[t, k] = weights[k] * norm * np.exp(-0.5 * quad)
        gamma[t] /= gamma[t].sum()
    return gamma


def test_gmm_posteriors_match_scipy_densities():
    rng = np.random.default_rng(0)
    weights, means, variances = random_gmm(rng)
    X = sample_gmm(rng, weights, means, variances, 40).astype(np.float32)
    log_joint = np.stack(
        [
            np.log(w) + multivariate_normal(m, np.diag(v)).logpdf(X.astype(np.float64))
            for w, m, v in zip(weights, means, variances)
        ],
        axis=1,
    )
    expected = np.exp(log_joint - logsumexp(log_joint, axis=1, keepdims=True))
    gamma = gmm_posteriors(X, weights, means, variances)
    assert gamma.dtype == np.float32 and gamma.shape == (40, 3)
    np.testing.assert_allclose(gamma, expected, atol=2e-6)
    np.testing.assert_allclose(gamma.sum(axis=1), 1.0, rtol=1e-6)


def test_gmm_posteriors_are_finite_far_from_every_component():
    # Densities underflow to 0 for all components: a naive ratio gives 0/0.
    weights = np.array([0.5, 0.5])
    means = np.array([[0.0, 0.0], [1.0, 0.0]])
    variances = np.full((2, 2), 1e-2)
    X = np.array([[300.0, 0.0], [-300.0, 0.0]], dtype=np.float32)
    gamma = gmm_posteriors(X, weights, means, variances)
    # log-joint difference between the components is (2x - 1) / (2 * 1e-2).
    np.testing.assert_allclose(gamma, [[0.0, 1.0], [1.0, 0.0]], atol=1e-6)
    assert np.isfinite(gamma).all()


@pytest.mark.parametrize("gap", [40.0, 49.5, 50.5, 60.0, 120.0])
def test_posteriors_below_the_floor_are_zero_and_none_is_subnormal(gap):
    # Two unit-variance components in 1-d: a descriptor at x has log-joint difference
    # (mean_b - mean_a) * (x - (mean_a + mean_b) / 2) between them; choose x for ``gap``.
    weights, variances = np.array([0.5, 0.5]), np.ones((2, 1))
    means = np.array([[0.0], [10.0]])
    X = np.array([[5.0 - gap / 10.0]], dtype=np.float32)  # component 0 ahead by ``gap``
    gamma = gmm_posteriors(X, weights, means, variances)[0]
    tiny = np.finfo(np.float32).tiny
    assert not np.any((gamma > 0) & (gamma < tiny))
    # Kept down to e^-50 (2e-22), far below what float32 resolves in a row sum >= 1.
    assert LOG_POSTERIOR_FLOOR <= -45
    if gap < -LOG_POSTERIOR_FLOOR:
        assert gamma[1] == pytest.approx(np.exp(-gap), rel=1e-3)
    else:
        assert gamma[1] == 0.0
    assert gamma[0] == pytest.approx(1.0)


def test_a_gaussian_no_descriptor_reaches_gets_exact_zeros_after_the_power_normalisation():
    """Posteriors below the floor are 0, not e^-50: the power normalisation (|v|^0.1) would
    lift the e^-50-sized gradients of a Gaussian no descriptor reaches to about 1 % of a
    visited Gaussian's entries (0.003-0.007 against 0.35-0.6 here)."""
    weights, variances = np.array([0.5, 0.5]), np.ones((2, 2))
    means = np.array([[0.0, 0.0], [12.0, 0.0]])
    rng = np.random.default_rng(7)
    # Within 0.5 of component 0: component 1's log joint is at least 12 * 5.5 = 66 below.
    X = rng.uniform(-0.5, 0.5, (200, 2)).astype(np.float32)
    fv = power_l2_normalise(fisher_vector(X, weights, means, variances)[None])[0]
    # Layout [G_mu,0 G_mu,1 G_sigma,0 G_sigma,1], D = 2 each.
    assert np.all(fv[[2, 3, 6, 7]] == 0.0)
    assert np.all(np.abs(fv[[0, 1, 4, 5]]) > 0.1)


def test_fisher_vector_with_floored_posteriors_matches_the_exact_posteriors():
    # Many tight components: most of a descriptor's posteriors are far below the floor,
    # a twentieth of them subnormal without it, as on real FV-256 blocks.
    rng = np.random.default_rng(4)
    K, D = 64, 16
    weights = np.full(K, 1 / K)
    means = rng.normal(0, 1.0, (K, D))
    variances = rng.uniform(0.02, 0.1, (K, D))
    X = sample_gmm(rng, weights, means, variances, 2000)
    # The exact gradients in float64, no posterior dropped (vectorised Perronnin et al.).
    u = (X[:, None, :] - means) / np.sqrt(variances)  # (n, K, D)
    log_joint = np.log(weights) - 0.5 * np.sum(u**2 + np.log(2 * np.pi * variances), axis=2)
    gamma = np.exp(log_joint - logsumexp(log_joint, axis=1, keepdims=True))[:, :, None]
    assert np.mean((gamma > 0) & (gamma < np.finfo(np.float32).tiny)) > 0.02
    grad_mu = (gamma * u).sum(axis=0) / (len(X) * np.sqrt(weights)[:, None])
    grad_sigma = (gamma * (u**2 - 1)).sum(axis=0) / (len(X) * np.sqrt(2 * weights)[:, None])
    fv = fisher_vector(X.astype(np.float32), weights, means, variances)
    expected = np.concatenate([grad_mu.ravel(), grad_sigma.ravel()])
    assert np.max(np.abs(fv - expected)) < 1e-4 * np.max(np.abs(expected))
    # After the power normalisation too, as the signatures are stored.
    np.testing.assert_allclose(power_l2_normalise(fv), power_l2_normalise(expected), atol=2e-3)


def test_gmm_statistics_against_loops_and_independent_of_chunking():
    rng = np.random.default_rng(1)
    weights, means, variances = random_gmm(rng, n_components=4, dim=5)
    X = sample_gmm(rng, weights, means, variances, 53).astype(np.float32)
    gamma = slow_posteriors(X.astype(np.float64), weights, means, variances)
    log_p = logsumexp(
        [
            np.log(w) + multivariate_normal(m, np.diag(v)).logpdf(X.astype(np.float64))
            for w, m, v in zip(weights, means, variances)
        ],
        axis=0,
    )
    for chunk_size in (7, 4096):
        s0, s1, s2, log_likelihood = gmm_statistics(X, weights, means, variances, chunk_size=chunk_size)
        np.testing.assert_allclose(s0, gamma.sum(axis=0), rtol=1e-5)
        np.testing.assert_allclose(s1, gamma.T @ X, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(s2, gamma.T @ X**2, rtol=1e-5, atol=1e-5)
        assert log_likelihood == pytest.approx(log_p.sum(), rel=1e-6)


def slow_fisher_vector(X, weights, means, variances):
    """Perronnin et al. 2010 gradients, summed descriptor by descriptor."""
    n, dim = X.shape
    gamma = slow_posteriors(X, weights, means, variances)
    grad_mu = np.zeros_like(means)
    grad_sigma = np.zeros_like(means)
    for k in range(len(weights)):
        sigma = np.sqrt(variances[k])
        for t in range(n):
            u = (X[t] - means[k]) / sigma
            grad_mu[k] += gamma[t, k] * u
            grad_sigma[k] += gamma[t, k] * (u**2 - 1)
        grad_mu[k] /= n * np.sqrt(weights[k])
        grad_sigma[k] /= n * np.sqrt(2 * weights[k])
    return grad_mu, grad_sigma


def test_fisher_vector_matches_slow_loop_and_layout():
    rng = np.random.default_rng(2)
    weights, means, variances = random_gmm(rng, n_components=3, dim=6)
    X = sample_gmm(rng, weights, means, variances, 50).astype(np.float32)
    grad_mu, grad_sigma = slow_fisher_vector(X.astype(np.float64), weights, means, variances)
    fv = fisher_vector(X, weights, means, variances)
    assert fv.dtype == np.float32 and fv.shape == (2 * 3 * 6,)
    # Layout: [G_mu,1 .. G_mu,K, G_sigma,1 .. G_sigma,K], each block of D values.
    K, D = means.shape
    np.testing.assert_allclose(fv[: K * D].reshape(K, D), grad_mu, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(fv[K * D :].reshape(K, D), grad_sigma, rtol=1e-4, atol=1e-6)
    # entry k*D + d is G_mu,k[d]: spot-check one index against the loop
    assert fv[1 * D + 4] == pytest.approx(grad_mu[1, 4], rel=1e-4)


def test_fisher_vector_in_float32_is_accurate_on_distant_tight_components():
    # Realistic scales: PCA coordinates ~0.1, tight components a few sigma away
    # from the origin, where the expanded quadratic form cancels most.
    rng = np.random.default_rng(3)
    K, D = 8, 80
    weights = np.full(K, 1 / K)
    means = rng.normal(0, 0.1, (K, D))
    variances = rng.uniform(0.05, 0.5, (K, D)) * 1e-2
    X = sample_gmm(rng, weights, means, variances, 300)
    grad_mu, grad_sigma = slow_fisher_vector(X, weights, means, variances)
    fv = fisher_vector(X.astype(np.float32), weights, means, variances)
    expected = np.concatenate([grad_mu.ravel(), grad_sigma.ravel()])
    assert np.max(np.abs(fv - expected)) < 1e-4 * np.max(np.abs(expected))


def test_fisher_vector_of_the_model_own_samples_has_zero_mean_gradient():
    # E_x~GMM[grad log p(x)] = 0 and the Fisher normalisation makes each entry
    # of the mean over N samples have a standard deviation of about 1/sqrt(N).
    rng = np.random.default_rng(4)
    weights, means, variances = random_gmm(rng, n_components=3, dim=4, spread=3.0)
    n = 40000
    X = sample_gmm(rng, weights, means, variances, n).astype(np.float32)
    fv = fisher_vector(X, weights, means, variances)
    assert np.max(np.abs(fv)) < 4.5 / np.sqrt(n)
    # ... while data from a shifted model gives gradients of order 1.
    shifted = fisher_vector(X + 0.5, weights, means, variances)
    assert np.max(np.abs(shifted)) > 0.2


def slow_vlad(X, centroids, components):
    K, D, d = components.shape
    blocks = np.zeros((K, d))
    for x in X:
        k = int(np.argmin([np.sum((x - c) ** 2) for c in centroids]))
        blocks[k] += components[k].T @ (x - centroids[k])
    return blocks.ravel()


def random_orthonormal(rng, n_clusters, dim, n_components):
    return np.stack([np.linalg.qr(rng.normal(size=(dim, n_components)))[0] for _ in range(n_clusters)])


def test_vlad_matches_slow_loop():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(50, 6)).astype(np.float32)
    centroids = rng.normal(size=(3, 6)).astype(np.float32)
    components = random_orthonormal(rng, 3, 6, 4).astype(np.float32)
    v = vlad(X, centroids, components)
    assert v.dtype == np.float32 and v.shape == (3 * 4,)
    expected = slow_vlad(
        X.astype(np.float64),
        centroids.astype(np.float64),
        components.astype(np.float64),
    )
    np.testing.assert_allclose(v, expected, rtol=1e-5, atol=1e-5)


def test_vlad_over_several_blocks_on_threads_matches_slow_loop():
    """Beyond one block of CHUNK_SIZE descriptors, with the blocks and the clusters'
    residual sums on threads: still the slow loop's VLAD."""
    from ndir.encoding import CHUNK_SIZE, blas_block_map

    rng = np.random.default_rng(6)
    X = rng.normal(size=(2 * CHUNK_SIZE + 77, 6)).astype(np.float32)
    centroids = rng.normal(size=(3, 6)).astype(np.float32)
    components = random_orthonormal(rng, 3, 6, 4).astype(np.float32)
    with blas_block_map() as block_map:
        v = vlad(X, centroids, components, block_map)
    expected = slow_vlad(*(a.astype(np.float64) for a in (X, centroids, components)))
    np.testing.assert_allclose(v, expected, rtol=1e-4, atol=1e-3)


def test_vlad_with_identity_projection_is_plain_vlad_residual_sum():
    X = np.array([[0.0, 0.0], [0.2, 0.0], [3.0, 1.0], [2.0, 1.0]], dtype=np.float32)
    centroids = np.array([[0.0, 0.0], [2.0, 1.0]], dtype=np.float32)
    components = np.stack([np.eye(2), np.eye(2)]).astype(np.float32)
    # Cluster 0: residuals (0,0) + (0.2,0); cluster 1: (1,0) + (0,0).
    np.testing.assert_allclose(vlad(X, centroids, components), [0.2, 0.0, 1.0, 0.0], atol=1e-7)


def test_empty_descriptor_sets_encode_to_zeros():
    rng = np.random.default_rng(6)
    weights, means, variances = random_gmm(rng, n_components=3, dim=4)
    fv = fisher_vector(np.zeros((0, 4), np.float32), weights, means, variances)
    assert fv.shape == (24,) and not fv.any()
    v = vlad(
        np.zeros((0, 4), np.float32),
        means.astype(np.float32),
        random_orthonormal(rng, 3, 4, 2),
    )
    assert v.shape == (6,) and not v.any()


def test_nearest_centroids_and_cluster_sums_against_brute_force():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(101, 5)).astype(np.float32)
    centroids = rng.normal(size=(7, 5)).astype(np.float32)
    distances = ((X[:, None, :] - centroids[None]) ** 2).sum(axis=2)
    labels = nearest_centroids(X, centroids, chunk_size=16)
    np.testing.assert_array_equal(labels, distances.argmin(axis=1))
    sums, counts = cluster_sums(X, labels, 7)
    for k in range(7):
        assert counts[k] == np.sum(labels == k)
        np.testing.assert_allclose(sums[k], X[labels == k].sum(axis=0), rtol=1e-6)


@pytest.mark.parametrize("n_clusters", [3, 8, 21])
def test_cluster_sums_in_ranges_of_clusters_add_each_clusters_rows_in_order(n_clusters):
    """cluster_sums splits the clusters into up to CLUSTER_RANGES ranges (fewer
    clusters than ranges, as many, more; some clusters empty): each cluster's rows
    are still added one after the other in row order, so the float32 sums equal
    np.add.at's sequential sums to the bit, with the thread map as with ``map``."""
    rng = np.random.default_rng(n_clusters)
    X = (rng.normal(size=(500, 4)) * 10.0 ** rng.integers(-3, 4, (500, 1))).astype(np.float32)
    labels = rng.integers(0, n_clusters - 1, 500)  # the last cluster stays empty
    expected = np.zeros((n_clusters, 4), dtype=np.float32)
    np.add.at(expected, labels, X)
    with threadpool_limits(limits=2, user_api="blas"), blas_block_map() as block_map:
        threaded, _ = cluster_sums(X, labels, n_clusters, block_map)
    sums, counts = cluster_sums(X, labels, n_clusters)
    np.testing.assert_array_equal(sums, expected)
    np.testing.assert_array_equal(threaded, expected)
    np.testing.assert_array_equal(counts, np.bincount(labels, minlength=n_clusters))
    assert sums.dtype == np.float32 and not sums[-1].any()


def test_blas_block_map_runs_blocks_on_threads_with_single_threaded_blas():
    """Under a BLAS limit of two threads the map runs its calls on two Python
    threads, in order, with BLAS at one thread inside and two again after; under
    one thread it is the builtin map. (A BLAS threaded by OpenMP, such as faiss's,
    keeps its limits per thread: only the pthreads ones, NumPy's, are read in the
    workers.)"""

    def blas_threads(layers=("pthreads", "openmp")):
        blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
        return {i["num_threads"] for i in blas if i.get("threading_layer") in layers}

    with threadpool_limits(limits=1, user_api="blas"), blas_block_map() as block_map:
        assert block_map is map
    with threadpool_limits(limits=2, user_api="blas"):
        if max(blas_threads()) < 2:
            pytest.skip("BLAS cannot use two threads here")
        with blas_block_map() as block_map:
            assert blas_threads() == {1}
            seen = list(
                block_map(
                    lambda i: (i, threading.get_ident(), blas_threads(["pthreads"])),
                    range(40),
                )
            )
        assert [i for i, _, _ in seen] == list(range(40))
        assert all(threads == {1} for _, _, threads in seen)
        assert threading.get_ident() not in {ident for _, ident, _ in seen}
        assert blas_threads() == {2}


def test_a_blas_loaded_after_a_one_thread_limit_does_not_undo_it():
    """A rule limits BLAS to one thread, then reading its first image imports
    scipy.linalg, whose own OpenBLAS starts with its default threads: the encoders'
    map must stay the builtin one (it ran two threads in a one-thread job outside
    Snakemake, which sets OPENBLAS_NUM_THREADS, and in ``ndir`` used as a library)."""
    script = (
        "from threadpoolctl import threadpool_limits\n"
        "from ndir.encoding import blas_block_map\n"
        "with threadpool_limits(limits=1, user_api='blas'):\n"
        "    import scipy.linalg\n"
        "    with blas_block_map() as block_map:\n"
        "        print(block_map is map)\n"
        "with blas_block_map() as block_map:\n"
        "    print(block_map is map)\n"
    )
    variables = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "GOTO_NUM_THREADS", "MKL_NUM_THREADS")
    env = {name: value for name, value in os.environ.items() if name not in variables}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    limited, unlimited = result.stdout.split()
    assert limited == "True"
    if available_cpus() > 1:
        assert unlimited == "False", "without a limit the blocks run on threads"


def numpy_blas_threads():
    """Thread counts of the pthreads BLAS libraries (NumPy's): their limits are
    process-wide, unlike those of an OpenMP-threaded BLAS such as faiss's."""
    return {
        i["num_threads"]
        for i in threadpool_info()
        if i["user_api"] == "blas" and i.get("threading_layer") == "pthreads"
    }


def test_blas_block_map_inside_a_pool_worker_is_the_builtin_map_and_limits_come_back():
    """In a worker of single_threaded_blas_pool (as ndir index's images) the encoders'
    block map is the builtin map (no pool per image); leaving the pool early, by an
    exception, cancels what had not started and gives BLAS its threads back; two
    threads opening block maps at once leave the limits as they found them."""
    with threadpool_limits(limits=2, user_api="blas"):
        if numpy_blas_threads() != {2}:
            pytest.skip("BLAS cannot use two threads here")
        started = []

        def work(i):
            started.append(i)
            with blas_block_map() as block_map:
                return block_map is map, numpy_blas_threads()

        with pytest.raises(KeyError):
            with single_threaded_blas_pool(2) as pool:
                futures = [pool.submit(work, i) for i in range(200)]
                assert futures[0].result(timeout=60) == (True, {1})
                raise KeyError("stop")
        assert numpy_blas_threads() == {2} and len(started) < 200

        def open_block_maps(_):
            for _ in range(20):
                with blas_block_map() as block_map:
                    list(block_map(lambda i: numpy_blas_threads(), range(4)))

        users = [threading.Thread(target=open_block_maps, args=(k,)) for k in range(2)]
        for user in users:
            user.start()
        for user in users:
            user.join()
        assert numpy_blas_threads() == {2}


def test_empty_inputs_of_the_blocked_sums():
    """No descriptors: the four zero statistics of gmm_statistics; no clusters: a
    (0, D) sum."""
    rng = np.random.default_rng(2)
    weights, means, variances = random_gmm(rng, n_components=3, dim=4)
    empty = np.zeros((0, 4), dtype=np.float32)
    for part, whole in zip(
        blocked_gmm_statistics(empty, weights, means, variances),
        gmm_statistics(empty, weights, means, variances),
    ):
        np.testing.assert_array_equal(part, whole)
    sums, counts = cluster_sums(empty, np.zeros(0, dtype=np.int64), 0)
    assert sums.shape == (0, 4) and counts.shape == (0,)


def test_blocked_gmm_statistics_equal_one_call_of_gmm_statistics_to_the_bit():
    """Fisher Vectors sum gmm_statistics of blocks of CHUNK_SIZE descriptors (on
    threads): the same floats as gmm_statistics over all of them, which adds the
    same blocks in the same order."""
    rng = np.random.default_rng(5)
    weights, means, variances = random_gmm(rng, n_components=16, dim=6)
    X = rng.normal(size=(2 * CHUNK_SIZE + 77, 6)).astype(np.float32)
    with threadpool_limits(limits=1, user_api="blas"):
        expected = gmm_statistics(X, weights, means, variances)
    with threadpool_limits(limits=2, user_api="blas"), blas_block_map() as block_map:
        parts = blocked_gmm_statistics(X, weights, means, variances, block_map)
    for part, whole in zip(parts, expected):
        np.testing.assert_array_equal(part, whole)


def test_power_l2_normalise_hand_worked():
    # alpha = 0.1: 1024^0.1 = 2, so [1024, -1, 0] -> [2, -1, 0] / sqrt(5)
    np.testing.assert_allclose(
        power_l2_normalise(np.array([1024.0, -1.0, 0.0])),
        np.array([2.0, -1.0, 0.0]) / np.sqrt(5),
        rtol=1e-6,
    )
    # alpha = 0.5 on rows; an all-zero row stays zero (no NaN)
    X = np.array([[9.0, -16.0], [0.0, 0.0], [0.0, -4.0]])
    Y = power_l2_normalise(X, alpha=0.5)
    assert Y.dtype == np.float32
    np.testing.assert_allclose(Y, [[3 / 5, -4 / 5], [0.0, 0.0], [0.0, -1.0]], rtol=1e-6, atol=0)
    # alpha = 1 is plain L2 normalisation
    np.testing.assert_allclose(power_l2_normalise(np.array([[3.0, 4.0]]), alpha=1.0), [[0.6, 0.8]], rtol=1e-6)
