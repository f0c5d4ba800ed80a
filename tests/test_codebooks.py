"""Descriptor PCA, VLAD and FV codebooks against independent computations."""

import os

# faiss's OpenMP threads and OpenBLAS's would otherwise spin against each other.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import warnings  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.mixture import GaussianMixture  # noqa: E402
from threadpoolctl import threadpool_info, threadpool_limits  # noqa: E402

from ndir import codebooks  # noqa: E402
from ndir.codebooks import (  # noqa: E402
    DEAD_COMPONENT_MASS,
    WEIGHT_FLOOR,
    DescriptorPCA,
    FisherCodebook,
    VladCodebook,
    _m_step,
    encode_image,
    fit_cluster_pca,
    fit_descriptor_pca,
    fit_fisher_codebook,
    fit_vlad_codebook,
    gmm_em,
)
from ndir.encoding import (  # noqa: E402
    CHUNK_SIZE,
    fisher_vector,
    gmm_statistics,
    nearest_centroids,
)
from ndir.errors import NdirInputError  # noqa: E402


def correlated(rng, n, dim, scales):
    """n points with principal standard deviations ``scales`` along random axes."""
    axes = np.linalg.qr(rng.normal(size=(dim, dim)))[0]
    return (rng.normal(size=(n, dim)) * scales) @ axes.T


def clustered_sample(rng, n_per_cluster=400, n_clusters=4, dim=10, gap=20.0):
    centres = rng.normal(0, gap, (n_clusters, dim))
    parts = [c + correlated(rng, n_per_cluster, dim, np.linspace(3.0, 0.3, dim)) for c in centres]
    return np.concatenate(parts).astype(np.float32), centres


def assert_orthonormal_columns(P, atol=1e-5):
    np.testing.assert_allclose(P.T @ P, np.eye(P.shape[1]), atol=atol)


def assert_same_axes_up_to_sign(P, Q, atol=1e-4):
    """Columns of P and Q (D, d) are equal up to their signs."""
    signs = np.sign(np.sum(P * Q, axis=0))
    np.testing.assert_allclose(P * signs, Q, atol=atol)


@pytest.mark.parametrize("chunk", [None, 7])
def test_descriptor_pca_equals_sklearn_up_to_sign(chunk, monkeypatch):
    """With chunk = 7 the covariance's scatter is summed over 72 blocks of rows
    (SCATTER_CHUNK), which must not change the PCA."""
    if chunk is not None:
        monkeypatch.setattr(codebooks, "SCATTER_CHUNK", chunk)
    rng = np.random.default_rng(0)
    X = (correlated(rng, 500, 12, np.linspace(4.0, 0.1, 12)) + 3.0).astype(np.float32)
    pca = fit_descriptor_pca(X, n_components=5)
    reference = PCA(n_components=5, svd_solver="full").fit(X.astype(np.float64))
    assert pca.components_.shape == (12, 5) and pca.components_.dtype == np.float32
    assert_orthonormal_columns(pca.components_)
    assert np.all(np.diff(pca.explained_variance_) < 0)
    np.testing.assert_allclose(pca.mean_, reference.mean_, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pca.explained_variance_, reference.explained_variance_, rtol=1e-5)
    assert_same_axes_up_to_sign(pca.components_, reference.components_.T)
    Y = pca.transform(X)
    assert Y.dtype == np.float32 and Y.shape == (500, 5)
    assert_same_axes_up_to_sign(Y, reference.transform(X.astype(np.float64)), atol=1e-3)


def test_scatter_over_row_blocks_equals_the_float64_scatter(monkeypatch):
    """_scatter accumulates sum_i (x_i - c)(x_i - c)^T over blocks of SCATTER_CHUNK
    rows in float64: with blocks of 7 rows (a last one of 3 of 500) it equals the
    single-block sum (and a plain loop's) to float64 rounding."""
    rng = np.random.default_rng(20)
    X = (correlated(rng, 500, 6, np.linspace(3.0, 0.5, 6)) + 2.0).astype(np.float32)
    center = rng.normal(size=6)
    R = X.astype(np.float64) - center
    expected = sum(np.outer(r, r) for r in R)
    single = codebooks._scatter(X, center)
    monkeypatch.setattr(codebooks, "SCATTER_CHUNK", 7)
    blocks = codebooks._scatter(X, center)
    np.testing.assert_allclose(blocks, single, rtol=1e-12)
    np.testing.assert_allclose(blocks, expected, rtol=1e-12)


def test_nearest_centroids_ties_go_to_the_lower_index():
    """nearest_centroids (ndir.encoding, the assignment of the VLAD codebook and of
    fit_cluster_pca) documents that equidistant centroids go to the lower index.
    Integer coordinates make every float32 distance exact, so ties are exact:
    x = (1, 1) is 4 away (squared) from (3, 1), (-1, 1) and (1, 3), at rows 2, 0, 3
    here, and farther from (5, 5) at row 1: label 0. Against a brute-force argmin
    (first index on ties) of the exact squared distances, over every point of a grid,
    in blocks of 5 descriptors and in one."""
    centroids = np.array([[-1, 1], [5, 5], [3, 1], [1, 3], [3, 1]], dtype=np.float32)
    assert nearest_centroids(np.array([[1, 1]], dtype=np.float32), centroids)[0] == 0
    # (3, 1) is both row 2 and row 4: row 2.
    assert nearest_centroids(np.array([[3, 1]], dtype=np.float32), centroids)[0] == 2
    grid = np.array([[a, b] for a in range(-2, 7) for b in range(-1, 7)], dtype=np.float32)
    distances = ((grid[:, None, :].astype(np.int64) - centroids[None].astype(np.int64)) ** 2).sum(axis=2)
    expected = distances.argmin(axis=1)  # numpy: the first of equal minima
    n_ties = int(np.sum((distances == distances.min(axis=1, keepdims=True)).sum(axis=1) > 1))
    assert n_ties > 10
    np.testing.assert_array_equal(nearest_centroids(grid, centroids), expected)
    np.testing.assert_array_equal(nearest_centroids(grid, centroids, chunk_size=5), expected)


def test_cluster_pca_axes_are_the_svd_of_each_cluster_residuals():
    rng = np.random.default_rng(1)
    X, centres = clustered_sample(rng)
    centroids = centres.astype(np.float32)
    components = fit_cluster_pca(X, centroids, n_components=4)
    assert components.shape == (4, 10, 4) and components.dtype == np.float32
    labels = ((X[:, None, :] - centroids[None]) ** 2).sum(axis=2).argmin(axis=1)
    for k in range(4):
        residuals = X[labels == k].astype(np.float64) - centroids[k]
        _, singular_values, vt = np.linalg.svd(residuals, full_matrices=False)
        P = components[k].astype(np.float64)
        assert_orthonormal_columns(P)
        assert_same_axes_up_to_sign(P, vt[:4].T)
        # and they keep the maximal residual energy
        kept = np.sum((residuals @ P) ** 2)
        assert kept == pytest.approx(np.sum(singular_values[:4] ** 2), rel=1e-5)


def test_cluster_pca_of_tiny_and_empty_clusters_is_an_orthonormal_basis():
    rng = np.random.default_rng(2)
    X, centres = clustered_sample(rng, n_clusters=2, dim=6)
    tiny_centre = np.full(6, 200.0)
    tiny = tiny_centre + rng.normal(size=(2, 6))  # 2 points, 4 axes asked
    X = np.concatenate([X, tiny.astype(np.float32)])
    empty_centre = np.full(6, -500.0)  # nearest to no point
    centroids = np.vstack([centres, tiny_centre, empty_centre]).astype(np.float32)
    components = fit_cluster_pca(X, centroids, n_components=4).astype(np.float64)
    for P in components:
        assert_orthonormal_columns(P)
    # The tiny cluster's residuals lie in the span of its first 2 axes.
    residuals = tiny - tiny_centre
    P = components[2]
    np.testing.assert_allclose(
        np.linalg.norm(residuals @ P[:, :2], axis=1),
        np.linalg.norm(residuals, axis=1),
        rtol=1e-5,
    )
    np.testing.assert_allclose(residuals @ P[:, 2:], 0.0, atol=1e-4)
    # The empty cluster falls back on the axes of all the residuals pooled.
    labels = ((X[:, None, :] - centroids[None]) ** 2).sum(axis=2).argmin(axis=1)
    pooled = X.astype(np.float64) - centroids[labels]
    _, _, vt = np.linalg.svd(pooled, full_matrices=False)
    assert_same_axes_up_to_sign(components[3], vt[:4].T, atol=1e-3)


def test_vlad_codebook_kmeans_is_deterministic_and_uses_every_point():
    rng = np.random.default_rng(3)
    X, _ = clustered_sample(rng, n_per_cluster=1500, n_clusters=4, dim=8)
    first = fit_vlad_codebook(X, 4, n_components=3, seed=5, n_iter=25)
    second = fit_vlad_codebook(X, 4, n_components=3, seed=5, n_iter=25)
    np.testing.assert_array_equal(first.centroids_, second.centroids_)
    np.testing.assert_array_equal(first.components_, second.components_)
    assert first.n_clusters == 4 and first.dim == 12
    # Converged Lloyd centroids are the means of ALL their points (faiss would
    # subsample 6000 points to 4 x 256 by default).
    labels = ((X[:, None, :] - first.centroids_[None]) ** 2).sum(axis=2).argmin(1)
    for k in range(4):
        np.testing.assert_allclose(first.centroids_[k], X[labels == k].mean(axis=0), atol=1e-5)
    # Without cluster structure, the seed does change the local optimum.
    U = rng.random((2000, 8), dtype=np.float32)
    same = [fit_vlad_codebook(U, 16, 3, seed=1, n_iter=3) for _ in range(2)]
    other = fit_vlad_codebook(U, 16, 3, seed=2, n_iter=3)
    np.testing.assert_array_equal(same[0].centroids_, same[1].centroids_)
    assert not np.array_equal(same[0].centroids_, other.centroids_)


def identity_pca(dim):
    return DescriptorPCA(
        np.zeros(dim, np.float32),
        np.eye(dim, dtype=np.float32),
        np.ones(dim, np.float32),
    )


def test_gmm_em_equals_sklearn_em_from_the_same_start():
    rng = np.random.default_rng(4)
    X, centres = clustered_sample(rng, n_per_cluster=300, n_clusters=3, dim=5, gap=3.0)
    weights = np.full(3, 1 / 3)
    means = centres + rng.normal(size=centres.shape)
    variances = np.ones((3, 5))
    ours = gmm_em(X, weights, means, variances, n_iter=4, variance_floor=0.0)
    reference = GaussianMixture(
        3,
        covariance_type="diag",
        reg_covar=0.0,
        max_iter=4,
        tol=0.0,
        init_params="random",
        weights_init=weights,
        means_init=means,
        precisions_init=1.0 / variances,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reference.fit(X.astype(np.float64))
    np.testing.assert_allclose(ours[0], reference.weights_, rtol=1e-5)
    np.testing.assert_allclose(ours[1], reference.means_, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours[2], reference.covariances_, rtol=1e-4)


def test_gmm_em_recovers_a_known_mixture():
    rng = np.random.default_rng(5)
    true_weights = np.array([0.5, 0.3, 0.2])
    true_means = np.array([[-6.0, 0, 0, 0], [0, 6.0, 0, 0], [6.0, 0, 0, 2.0]])
    true_variances = np.array([[1.0, 0.5, 2, 1], [0.3, 1, 1, 1], [1, 1, 0.5, 3]])
    labels = rng.choice(3, size=6000, p=true_weights)
    X = true_means[labels] + rng.normal(size=(6000, 4)) * np.sqrt(true_variances[labels])
    weights, means, variances = gmm_em(
        X.astype(np.float32),
        np.full(3, 1 / 3),
        true_means + rng.normal(size=(3, 4)),
        np.ones((3, 4)),
        n_iter=50,
        variance_floor=1e-4,
    )
    np.testing.assert_allclose(weights, true_weights, atol=0.02)
    np.testing.assert_allclose(means, true_means, atol=0.1)
    np.testing.assert_allclose(variances, true_variances, rtol=0.15)


def test_m_step_floors_and_dead_components_hand_worked():
    """The M-step from soft statistics of n = 10 points, K = 4, d' = 2: components 0
    and 1 have masses 6 and 4 and exact means and variances (component 0's second
    variance is 0: floored at 0.01); component 2 has no mass and component 3 less than
    DEAD_COMPONENT_MASS (statistics that would put its mean at 100): both keep their
    previous mean and variance (floored too), and their weights are floored at
    WEIGHT_FLOOR before the weights are renormalised."""
    tiny = DEAD_COMPONENT_MASS / 2
    s0 = np.array([6.0, 4.0, 0.0, tiny])
    # S1_k = S0_k mu_k, S2_k = S0_k (var_k + mu_k^2).
    s1 = np.array([[6.0, 12.0], [-4.0, 2.0], [0.0, 0.0], [100 * tiny, 100 * tiny]])
    s2 = np.array(
        [
            [6 * (0.5 + 1.0), 6 * (0.0 + 4.0)],
            [4 * (2.0 + 1.0), 4 * (0.25 + 0.25)],
            [0.0, 0.0],
            [tiny, tiny],
        ]
    )
    previous_means = np.array([[0.0, 0.0], [0.0, 0.0], [7.0, 7.0], [-3.0, 4.0]])
    previous_variances = np.array([[1.0, 1.0], [1.0, 1.0], [3.0, 0.002], [1.0, 1.0]])
    weights, means, variances = _m_step(s0, s1, s2, 10, previous_means, previous_variances, variance_floor=0.01)
    expected_weights = np.array([0.6, 0.4, WEIGHT_FLOOR, WEIGHT_FLOOR])
    np.testing.assert_allclose(weights, expected_weights / expected_weights.sum(), rtol=1e-12)
    np.testing.assert_allclose(means, [[1.0, 2.0], [-1.0, 0.5], [7.0, 7.0], [-3.0, 4.0]], rtol=1e-12)
    np.testing.assert_allclose(variances, [[0.5, 0.01], [2.0, 0.25], [3.0, 0.01], [1.0, 1.0]], rtol=1e-12)
    assert weights.dtype == means.dtype == variances.dtype == np.float64


def test_fisher_codebook_em_raises_likelihood_and_encodes_through_its_pca():
    rng = np.random.default_rng(5)
    X, _ = clustered_sample(rng, n_per_cluster=500, n_clusters=4, dim=12, gap=2.0)
    pca = fit_descriptor_pca(X, n_components=5)
    reduced = pca.transform(X)
    start = fit_fisher_codebook(X, 6, pca, seed=0, n_iter=0)
    fitted = fit_fisher_codebook(X, 6, pca, seed=0, n_iter=10)
    log_likelihood = [gmm_statistics(reduced, c.weights_, c.means_, c.variances_)[3] for c in (start, fitted)]
    assert log_likelihood[1] > log_likelihood[0]
    assert fitted.weights_.sum() == pytest.approx(1.0, rel=1e-6)
    assert fitted.n_clusters == 6 and fitted.dim == 2 * 6 * 5
    np.testing.assert_array_equal(
        fitted.encode(X[:100]),
        fisher_vector(pca.transform(X[:100]), fitted.weights_, fitted.means_, fitted.variances_),
    )


def test_codebooks_do_not_depend_on_the_number_of_blas_threads():
    """A 1-core and a 2-core run fit bit-identical codebooks (OpenBLAS splits some
    products by thread count and rounds them differently, which used to move the
    Fisher codebook's last bits and, through the rankings, the learned projectors)."""
    rng = np.random.default_rng(8)
    X, _ = clustered_sample(rng, n_per_cluster=3000, n_clusters=4, dim=128, gap=2.0)
    pca = fit_descriptor_pca(X, n_components=16)
    fits = []
    for n_threads in (1, 2):
        with threadpool_limits(limits=n_threads, user_api="blas"):
            fits.append(
                (
                    fit_fisher_codebook(X, 8, pca, seed=0, n_iter=5),
                    fit_vlad_codebook(X, 8, n_components=16, seed=0, n_iter=5),
                )
            )
    (fisher_1, vlad_1), (fisher_2, vlad_2) = fits
    for name in ("weights_", "means_", "variances_"):
        np.testing.assert_array_equal(getattr(fisher_1, name), getattr(fisher_2, name))
    np.testing.assert_array_equal(vlad_1.centroids_, vlad_2.centroids_)
    np.testing.assert_array_equal(vlad_1.components_, vlad_2.components_)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    rng = np.random.default_rng(6)
    X, _ = clustered_sample(rng, n_per_cluster=500, n_clusters=4, dim=16)
    pca = fit_descriptor_pca(X, n_components=6)
    vlad = fit_vlad_codebook(X, 5, n_components=6, seed=0, n_iter=5)
    fisher = fit_fisher_codebook(X, 5, pca, seed=0, n_iter=5)
    folder = tmp_path_factory.mktemp("codebooks")
    pca.save(folder / "pca.npz")
    vlad.save(folder / "vlad-5.npz")
    fisher.save(folder / "fv-5.npz")
    return X, pca, vlad, fisher, folder


def test_save_load_round_trip_gives_identical_encodings(fitted):
    X, pca, vlad, fisher, folder = fitted
    vlad_loaded = VladCodebook.load(folder / "vlad-5.npz")
    fisher_loaded = FisherCodebook.load(folder / "fv-5.npz")
    pca_loaded = DescriptorPCA.load(folder / "pca.npz")
    np.testing.assert_array_equal(vlad_loaded.encode(X[:300]), vlad.encode(X[:300]))
    np.testing.assert_array_equal(fisher_loaded.encode(X[:300]), fisher.encode(X[:300]))
    np.testing.assert_array_equal(pca_loaded.transform(X[:10]), pca.transform(X[:10]))
    assert (vlad_loaded.seed, vlad_loaded.n_iter) == (0, 5)
    assert vlad_loaded.dim == 30 and fisher_loaded.dim == 60


def test_loading_a_file_of_another_kind_names_the_file(fitted, tmp_path):
    _, _, _, _, folder = fitted
    np.save(tmp_path / "array.npy", np.zeros(3))
    (tmp_path / "notes.txt").write_text("not a codebook\n")
    cases = [
        (VladCodebook, folder / "fv-5.npz"),
        (FisherCodebook, folder / "vlad-5.npz"),
        (FisherCodebook, folder / "pca.npz"),
        (DescriptorPCA, folder / "vlad-5.npz"),
        (VladCodebook, tmp_path / "array.npy"),
        (VladCodebook, tmp_path / "notes.txt"),
        (FisherCodebook, tmp_path / "missing.npz"),
    ]
    for cls, path in cases:
        with pytest.raises(NdirInputError, match=str(path.name)):
            cls.load(path)


def test_encode_image_equals_each_encode_and_reduces_once_per_pca(fitted, monkeypatch):
    X, pca, vlad, fisher, folder = fitted
    other_pca = fit_descriptor_pca(X[::2], n_components=6)
    codebooks = {
        "fv-5": fisher,
        "vlad-5": vlad,
        # the same PCA loaded again (equal arrays, another object), as in a workflow
        "fv-5-loaded": FisherCodebook.load(folder / "fv-5.npz"),
        "fv-5-other-pca": fit_fisher_codebook(X, 5, other_pca, seed=1, n_iter=2),
    }
    expected = {name: codebook.encode(X[:300]) for name, codebook in codebooks.items()}
    transforms = []
    original = DescriptorPCA.transform
    monkeypatch.setattr(
        DescriptorPCA,
        "transform",
        lambda self, descriptors: transforms.append(self) or original(self, descriptors),
    )
    signatures = encode_image(X[:300], codebooks)
    assert list(signatures) == list(codebooks)
    for name in codebooks:
        np.testing.assert_array_equal(signatures[name], expected[name])
    assert transforms == [fisher.pca_, other_pca]
    empty = encode_image(np.zeros((0, 16), np.float32), codebooks)
    assert all(v.shape == (codebooks[k].dim,) and not v.any() for k, v in empty.items())
    with pytest.raises(ValueError, match="16"):
        encode_image(np.zeros((4, 8), np.float32), codebooks)


def test_encode_empty_and_malformed_descriptor_sets(fitted):
    _, _, vlad, fisher, _ = fitted
    for codebook in (vlad, fisher):
        empty = codebook.encode(np.zeros((0, 16), np.float32))
        assert empty.shape == (codebook.dim,) and not empty.any()
        with pytest.raises(ValueError, match="16"):
            codebook.encode(np.zeros((4, 8), np.float32))


def test_fitting_rejects_too_small_or_non_finite_samples():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(10, 8)).astype(np.float32)
    with pytest.raises(NdirInputError, match="codebook_sizes"):
        fit_vlad_codebook(X, 11, n_components=4)
    with pytest.raises(NdirInputError, match="codebook_sizes"):
        fit_fisher_codebook(X, 11, identity_pca(8))
    X[3, 2] = np.nan
    with pytest.raises(NdirInputError, match="NaN"):
        fit_descriptor_pca(X, n_components=4)


def random_codebooks(rng, n_clusters=64, dim=128, n_components=80):
    """A VLAD and a Fisher codebook of realistic sizes from random parameters (their
    values do not matter for how the products round)."""
    axes = np.linalg.qr(rng.normal(size=(dim, n_components)))[0].astype(np.float32)
    pca = DescriptorPCA(rng.random(dim, dtype=np.float32) * 0.1, axes, np.ones(n_components, np.float32))
    cluster_axes = np.linalg.qr(rng.normal(size=(n_clusters, dim, n_components)))[0]
    vlad = VladCodebook(
        rng.random((n_clusters, dim), dtype=np.float32) * 0.2,
        cluster_axes.astype(np.float32),
        0,
        1,
    )
    fisher = FisherCodebook(
        pca,
        np.full(n_clusters, 1 / n_clusters),
        rng.normal(0, 0.05, (n_clusters, n_components)),
        rng.uniform(0.002, 0.01, (n_clusters, n_components)),
        0,
        1,
    )
    return {"vlad": vlad, "fv": fisher}


def test_encode_image_gives_the_same_bits_on_one_and_two_blas_threads():
    """OpenBLAS rounds these float32 products differently on one and two threads (the
    Fisher encoder called under two-thread BLAS did, in its last bits; VLAD's products
    happen not to at this size); encode_image runs its blocks of descriptors on two
    Python threads with single-threaded BLAS instead (so does each codebook's
    encode), so a two-core ``ndir index`` gives the workflow's (one-thread) bits."""
    with threadpool_limits(limits=2, user_api="blas"):
        blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
        if max(i["num_threads"] for i in blas) < 2:
            pytest.skip("BLAS cannot use two threads here")
    rng = np.random.default_rng(4)
    descriptors = rng.random((3 * CHUNK_SIZE + 123, 128), dtype=np.float32)
    codebooks = random_codebooks(rng)
    with threadpool_limits(limits=1, user_api="blas"):
        expected = {name: c.encode(descriptors) for name, c in codebooks.items()}
    with threadpool_limits(limits=2, user_api="blas"):
        signatures = encode_image(descriptors, codebooks)
        each = {name: c.encode(descriptors) for name, c in codebooks.items()}
    for name in codebooks:
        assert signatures[name].any()
        np.testing.assert_array_equal(signatures[name], expected[name])
        np.testing.assert_array_equal(each[name], expected[name])


def test_kmeans_centroids_are_fixed_by_their_thread_count_not_the_cores():
    """faiss's k-means rounds its distance products by thread count: at this size one
    and two threads give other centroids. ndir's kmeans takes the count as an
    argument and sets it itself, so a run limited to one core (``--cores 1``: BLAS
    and OpenMP at one thread) still gets the two-thread centroids of the codebooks."""
    rng = np.random.default_rng(1)
    X = np.abs(rng.normal(size=(40_000, 128))).astype(np.float32)
    results = {}
    for limit in (1, 2):
        with threadpool_limits(limits=limit):
            results[limit] = [codebooks.kmeans(X, 128, 0, 10, n) for n in (1, 2)]
    for n_threads in (0, 1):
        np.testing.assert_array_equal(results[1][n_threads], results[2][n_threads])
    if np.array_equal(results[2][0], results[2][1]):
        pytest.skip("faiss gives the same centroids on one and two threads here")


@pytest.mark.parametrize("empty", [np.zeros(0), np.zeros((0, 8)), []], ids=["(0,)", "(0, 8)", "list"])
def test_an_empty_descriptor_set_of_any_shape_encodes_to_zeros(fitted, empty):
    """An image without descriptors, however its empty array is shaped, has an all-zero
    signature (through each codebook and through encode_image)."""
    _, _, vlad, fisher, _ = fitted
    for codebook in (vlad, fisher):
        signature = codebook.encode(empty)
        assert signature.shape == (codebook.dim,) and not signature.any()
    signatures = encode_image(empty, {"vlad": vlad, "fv": fisher})
    assert not signatures["vlad"].any() and not signatures["fv"].any()


def test_descriptor_pca_needs_two_descriptors_and_logs_the_variance_it_keeps(caplog):
    rng = np.random.default_rng(8)
    X = correlated(rng, 200, 8, np.linspace(3.0, 0.3, 8)).astype(np.float32)
    with pytest.raises(NdirInputError, match="at least 2 descriptors, got n_components=4 and 1 descriptors"):
        fit_descriptor_pca(X[:1], n_components=4)
    with caplog.at_level("INFO", logger="ndir.codebooks"):
        fit_descriptor_pca(X, n_components=4)
    eigenvalues = np.sort(np.linalg.eigvalsh(np.cov(X.astype(np.float64), rowvar=False)))[::-1]
    kept = 100 * eigenvalues[:4].sum() / eigenvalues.sum()
    assert f"descriptor PCA: 4 of 8 dimensions keep {kept:.1f}% of the variance" in caplog.messages


@pytest.mark.parametrize("sample", [np.ones(8), np.ones((0, 4)), np.ones((2, 3, 4))], ids=["1-d", "empty", "3-d"])
@pytest.mark.parametrize("fit", ["fit_descriptor_pca", "fit_vlad_codebook", "fit_fisher_codebook"])
def test_a_descriptor_sample_that_is_not_a_non_empty_matrix_is_refused_by_shape(fit, sample):
    # A 1-D sample (a flattened file) or an empty one must stop the fit with its shape
    # and the file to check, not fit on a reshaped or empty array.
    arguments = {"fit_descriptor_pca": (2,), "fit_vlad_codebook": (2, 2), "fit_fisher_codebook": (2, None)}[fit]
    with pytest.raises(NdirInputError, match=r"non-empty \(n_descriptors, dim\) array.*descriptor_sample"):
        getattr(codebooks, fit)(sample, *arguments)
