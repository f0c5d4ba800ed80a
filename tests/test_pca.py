"""PCAProjection against scikit-learn's PCA (an SVD of the data, not a Gram matrix)."""

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.utils.estimator_checks import parametrize_with_checks

from ndir.projection import PCAProjection, eigen, pca, product


def low_rank_signatures(n_images, n_features, seed=0):
    """Rows with a clearly decaying spectrum, so that every axis is well defined."""
    rng = np.random.default_rng(seed)
    rank = min(n_images, n_features)
    scales = 0.8 ** np.arange(rank)
    basis, _ = np.linalg.qr(rng.normal(size=(n_features, rank)))
    latent = rng.normal(size=(n_images, rank)) * scales
    X = latent @ basis.T + 0.01 * rng.normal(size=(n_images, n_features)) + 0.3
    return X.astype(np.float32)


def align_signs(reference, other):
    """Flip the columns of ``other`` to point the same way as those of ``reference``."""
    return other * np.sign(np.sum(reference * other, axis=0))


@pytest.mark.parametrize("chunk", [None, 7])
@pytest.mark.parametrize(("n_images", "n_features"), [(30, 500), (60, 8)])
def test_matches_sklearn_pca(n_images, n_features, chunk, monkeypatch):
    # (30, 500) goes through the Gram matrix, (60, 8) through the covariance with
    # n_components equal to the full rank D. With chunk = 7 the Gram matrix is summed
    # over 72 blocks of 7 features (and the axes over blocks of 7 rows of Xc^T), which
    # must not change the result.
    if chunk is not None:
        monkeypatch.setattr(product, "FLOAT64_BLOCK_BYTES", 8 * n_images * chunk)
    X = low_rank_signatures(n_images, n_features)
    n_components = min(10, n_features)
    ours = PCAProjection(n_components).fit(X)
    theirs = PCA(n_components, svd_solver="full").fit(X.astype(np.float64))

    np.testing.assert_allclose(ours.mean_, theirs.mean_, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ours.explained_variance_, theirs.explained_variance_, rtol=1e-5)
    expected = theirs.components_.T
    np.testing.assert_allclose(align_signs(expected, ours.components_), expected, rtol=0, atol=1e-4)

    projected = theirs.transform(X.astype(np.float64))
    projected /= np.linalg.norm(projected, axis=1, keepdims=True)
    np.testing.assert_allclose(align_signs(projected, ours.transform(X)), projected, rtol=0, atol=1e-4)


def test_gram_matrix_summed_over_column_blocks_equals_one_block(monkeypatch):
    """PrincipalAxes sums float64 products of blocks of features: with blocks of 7 (and a
    last one of 3) of 500 columns, the eigenvalues and axes equal the single-block ones
    to float64 rounding, and the eigenvalues those of the float64 X X^T."""
    X = low_rank_signatures(30, 500, seed=4)
    values_one, axes_one = pca.PrincipalAxes(X).top(10)
    monkeypatch.setattr(product, "FLOAT64_BLOCK_BYTES", 8 * 30 * 7)
    principal = pca.PrincipalAxes(X)
    values_blocks, axes_blocks = principal.top(10)
    np.testing.assert_allclose(values_blocks, values_one, rtol=1e-12)
    np.testing.assert_allclose(align_signs(axes_one, axes_blocks), axes_one, rtol=0, atol=1e-6)
    X64 = principal.Xc.astype(np.float64)
    exact = np.linalg.eigvalsh(X64 @ X64.T)[::-1][:10]
    np.testing.assert_allclose(values_blocks, exact, rtol=1e-12)


def test_principal_axes_are_float64_sums_rounded_once():
    """The axes Xc^T v / sqrt(lambda) are summed in float64 and rounded to float32 once
    (float32 BLAS's last bits changed with the OpenBLAS kernel, and so did the starting
    point of every sparse training)."""
    X = low_rank_signatures(30, 500, seed=6)
    principal = pca.PrincipalAxes(X)
    Xc = principal.Xc
    np.testing.assert_array_equal(Xc, X - X.mean(axis=0, dtype=np.float64).astype(np.float32))
    _, axes = principal.top(10)
    eigenvalues, vectors = eigen.top_eigenpairs(product.float64_inner(Xc), 10)
    expected = Xc.T.astype(np.float64) @ (vectors / np.sqrt(eigenvalues))
    np.testing.assert_array_equal(axes, expected.astype(np.float32))


def test_whitening_matches_sklearn_pca():
    X = low_rank_signatures(30, 400, seed=1)
    ours = PCAProjection(6, whiten=True).fit(X)
    theirs = PCA(6, whiten=True, svd_solver="full").fit(X.astype(np.float64))
    projected = theirs.transform(X.astype(np.float64))
    projected /= np.linalg.norm(projected, axis=1, keepdims=True)
    np.testing.assert_allclose(align_signs(projected, ours.transform(X)), projected, rtol=0, atol=1e-4)


def test_components_are_orthonormal_float32_with_fixed_signs():
    X = low_rank_signatures(40, 1000, seed=2)
    pca = PCAProjection(16).fit(X)
    U = pca.components_
    assert U.shape == (1000, 16) and U.dtype == np.float32
    np.testing.assert_allclose(U.T @ U, np.eye(16), rtol=0, atol=1e-5)
    biggest = U[np.argmax(np.abs(U), axis=0), np.arange(16)]
    assert np.all(biggest > 0)
    assert np.all(np.diff(pca.explained_variance_) < 0)


def test_transform_rows_are_unit_norm_and_zero_stays_zero():
    X = low_rank_signatures(25, 300, seed=3)
    pca = PCAProjection(8).fit(X)
    Y = pca.transform(np.vstack([X, pca.mean_]))
    assert Y.shape == (26, 8) and Y.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(Y[:-1], axis=1), 1.0, rtol=0, atol=1e-6)
    assert not np.any(Y[-1])  # the mean signature projects to 0 and is left as 0


@pytest.mark.parametrize("whiten", [False, True])
def test_transform_of_a_row_does_not_depend_on_its_batch(whiten):
    """A row's projection has the same bits alone, in its batch, shuffled, and among
    other rows, whatever kernel OpenBLAS picked for this CPU (float32 GEMM did not give
    this on AVX-512 SkylakeX kernels)."""
    X = low_rank_signatures(90, 700, seed=4)
    pca = PCAProjection(32, whiten=whiten).fit(X)
    order = np.random.default_rng(0).permutation(len(X))
    whole = pca.transform(X)
    assert np.array_equal(pca.transform(X[order]), whole[order])
    assert np.array_equal(pca.transform(np.vstack([X[::-1], X]))[len(X) :], whole)
    for row in (0, 41, len(X) - 1):
        assert np.array_equal(pca.transform(X[row : row + 1])[0], whole[row])
        assert np.array_equal(pca.transform(X[row : row + 3])[0], whole[row])


def test_too_many_components_names_the_training_set():
    X = low_rank_signatures(10, 200)
    with pytest.raises(ValueError, match=r"n_components=10 .*10 training images"):
        PCAProjection(10).fit(X)
    PCAProjection(9).fit(X)  # N - 1 axes are available


def test_duplicate_training_images_are_reported():
    X = np.repeat(low_rank_signatures(4, 100), 3, axis=0)  # 12 rows, rank 3
    with pytest.raises(ValueError, match="span fewer than n_components=5"):
        PCAProjection(5).fit(X)


@parametrize_with_checks([PCAProjection(1), PCAProjection(2, whiten=True)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.mark.parametrize("scale", [1e-6, 1e4])
def test_the_rank_check_is_relative_to_the_largest_eigenvalue(scale):
    """PCA's axes do not depend on the signatures' unit: tiny values are a full rank,
    and duplicate rows are rank-deficient, whatever their scale."""
    X = low_rank_signatures(40, 300, seed=5)
    reference = PCAProjection(8).fit(X)
    scaled = PCAProjection(8).fit(X * np.float32(scale))
    np.testing.assert_allclose(scaled.explained_variance_, reference.explained_variance_ * scale**2, rtol=1e-4)
    np.testing.assert_allclose(scaled.components_, reference.components_, rtol=0, atol=1e-4)
    duplicates = np.repeat(low_rank_signatures(4, 100), 3, axis=0) * np.float32(scale)  # rank 3
    with pytest.raises(ValueError, match="span fewer than n_components=5"):
        PCAProjection(5).fit(duplicates)


def test_n_components_must_be_at_least_one():
    """R = 0 would give an empty projection that every database image ties on: refused
    by the parameter check, while R = 1 fits."""
    X = low_rank_signatures(20, 8)
    with pytest.raises(ValueError, match="n_components"):
        PCAProjection(n_components=0).fit(X)
    assert PCAProjection(n_components=1).fit(X).transform(X).shape == (20, 1)


@pytest.mark.parametrize("n_features", [500, 12])
def test_fit_pca_fits_every_R_as_fitting_each_alone(n_features):
    """fit_pca: one Gram matrix (D > N; the covariance for D <= N) and the axes of the
    largest R, whose first columns the smaller R take: the same PCAs, bit for bit, as
    PCAProjection(R).fit for each R, in any order of dims; whitening passed on."""
    X = low_rank_signatures(40, n_features, seed=8)
    dims = [3, 10, 6] if n_features > 12 else [3, 6]
    fitted = pca.fit_pca(X, dims, whiten=True)
    assert sorted(fitted) == sorted(dims)
    for R in dims:
        alone = PCAProjection(R, whiten=True).fit(X)
        assert fitted[R].n_components == R and fitted[R].whiten and fitted[R].n_features_in_ == n_features
        for attribute in ("mean_", "components_", "explained_variance_"):
            np.testing.assert_array_equal(getattr(fitted[R], attribute), getattr(alone, attribute))
        np.testing.assert_array_equal(fitted[R].transform(X), alone.transform(X))
    with pytest.raises(ValueError, match="n_components=40 is larger than the rank"):
        pca.fit_pca(X, [3, 40])
    # Asked for more axes than it holds, PrincipalAxes computes them again.
    principal, fresh = pca.PrincipalAxes(X), pca.PrincipalAxes(X)
    principal.top(3)
    np.testing.assert_array_equal(principal.top(6)[1], fresh.top(6)[1])
