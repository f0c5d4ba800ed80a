"""PCA reduction of image signatures: the unsupervised baseline of Table I.

Negrel et al. 2014 reduce VLAD/FV signatures with the unsupervised projectors of their
ref. [9] (Negrel, Picard & Gosselin, IEEE MultiMedia 2013): a PCA learned on the
training images, the projected signature then L2-normalised so that dot products are
cosine similarities. These projectors also initialise the sparse projector training
(Algorithm 1 of the paper).

Signatures have far more dimensions than there are training images (D = 5k to 82k
against N = 745 in Holidays), so the principal axes are found from the N x N Gram
matrix of the centred images rather than the D x D covariance: if
``Xc Xc^T v = lambda v`` then ``u = Xc^T v / sqrt(lambda)`` is a unit eigenvector of
``Xc^T Xc`` with the same eigenvalue.
"""

from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted, validate_data

from ndir.encoding import l2_normalise_rows
from ndir.projection.eigen import largest_entry_positive
from ndir.projection.product import float64_inner, float64_product


class PCAProjection(TransformerMixin, BaseEstimator):
    """Project signatures on their first principal axes and L2-normalise the result.

    Parameters
    ----------
    n_components : int
        Output dimension R (32 to 256 in the paper's Table I). At most the rank of the
        centred training set, ``min(n_images - 1, D)``.
    whiten : bool, default False
        Divide each projected coordinate by the standard deviation of the training
        data along that axis, before the L2 normalisation. The paper's Table I uses
        plain projections (False).

    Attributes
    ----------
    mean_ : (D,) float32
        Mean training signature.
    components_ : (D, R) float32
        Principal axes as orthonormal columns, by decreasing variance. Each column's
        sign makes its largest-magnitude coefficient positive, so that the result does
        not depend on the LAPACK build.
    explained_variance_ : (R,) float64
        Variance of the training data along each axis (eigenvalue / (N - 1)).
    n_features_in_ : int
        D.
    """

    _parameter_constraints = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "whiten": ["boolean"],
    }

    def __init__(self, n_components, whiten=False):
        self.n_components = n_components
        self.whiten = whiten

    def fit(self, X, y=None):
        """Learn the mean and the first ``n_components`` principal axes.

        Parameters
        ----------
        X : (N, D) float32 array
            Training signatures, one per row.
        y : ignored

        Returns
        -------
        self
        """
        self._validate_params()
        X = validate_data(self, X, dtype=np.float32, ensure_min_samples=2)
        return self._set_axes(PrincipalAxes(X))

    def _set_axes(self, principal):
        """Take the first ``n_components`` of ``principal`` (:class:`PrincipalAxes` of
        the training set) as the fitted state."""
        n_images, n_features = principal.shape
        rank = min(n_images - 1, n_features)
        if self.n_components > rank:
            raise ValueError(
                f"n_components={self.n_components} is larger than the rank of the "
                f"centred training set: {n_images} training images of dimension "
                f"{n_features} give at most {rank} principal axes; lower n_components "
                "or train on more images"
            )
        eigenvalues, axes = principal.top(self.n_components)
        if eigenvalues[-1] <= 1e-10 * eigenvalues[0]:
            raise ValueError(
                f"the {n_images} training images span fewer than "
                f"n_components={self.n_components} dimensions (duplicate or constant "
                "signatures?); lower n_components"
            )

        # Sign convention of sklearn.utils.extmath.svd_flip (u_based_decision=False).
        axes = largest_entry_positive(axes)

        self.mean_ = principal.mean.astype(np.float32)
        self.components_ = axes.astype(np.float32, copy=False)
        self.explained_variance_ = eigenvalues / (n_images - 1)
        return self

    def transform(self, X):
        """Reduce signatures to ``n_components`` dimensions, rows L2-normalised.

        Parameters
        ----------
        X : (n, D) float32 array

        Returns
        -------
        (n, R) float32 array
            ``(X - mean_) @ components_`` (divided by ``sqrt(explained_variance_)``
            when whitening), each row scaled to unit L2 norm; all-zero rows stay zero.
            Summed in float64 (:func:`ndir.projection.product.float64_product`), so a
            row's result does not depend on the other rows of the batch, as float32
            BLAS's did with the OpenBLAS kernel of the CPU.
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float32, reset=False)
        Y = float64_product(X, self.components_, mean=self.mean_)
        if self.whiten:
            Y /= np.sqrt(self.explained_variance_).astype(np.float32)
        return l2_normalise_rows(Y)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float32"]
        return tags


def fit_pca(X, dims, whiten=False):
    """``{R: PCAProjection(R, whiten=whiten).fit(X)}`` for every R of ``dims``, from one
    :class:`PrincipalAxes` of X: one Gram matrix and one product for the largest R,
    whose first columns are the smaller R's. The default run fits PCA on one training
    set up to 17 times in a job; FV-256's four R take a third of the time of four fits."""
    models = {int(R): PCAProjection(int(R), whiten=whiten) for R in dims}
    principal = None
    # The largest R first: the others read the first columns of its axes.
    for R in sorted(models, reverse=True):
        models[R]._validate_params()
        X_valid = validate_data(models[R], X, dtype=np.float32, ensure_min_samples=2)
        principal = principal or PrincipalAxes(X_valid)
        models[R]._set_axes(principal)
    return models


class PrincipalAxes:
    """The eigendecomposition a PCA of X takes its first axes from, computed once.

    X : (N, D) float32 training signatures. With D > N the axes come from the N x N Gram
    matrix of the centred rows: ``u = Xc^T v / sqrt(lambda)`` for each eigenpair
    (lambda, v) of ``Xc Xc^T``; otherwise from the D x D covariance. Both products are
    summed in float64 (:func:`~.product.float64_inner`, :func:`~.product.float64_product`):
    in float32 their last bits, and so the axes that initialise the sparse projectors,
    changed with the OpenBLAS kernel (Haswell against SkylakeX), and every training
    started from another point. About twice float32's time (0.54 against 0.26 s for the
    Gram matrix of 745 x 81,920).

    Attributes: ``shape`` (N, D); ``mean`` (D,) float64; ``Xc`` (N, D) float32, the
    centred rows; eigenvalues and eigenvectors of the Gram matrix (or covariance) in
    decreasing order; the axes of the largest R asked for so far, whose first columns
    are those of any smaller R: each axis is its own column of one float64 product,
    whose sums BLAS does not order by the number of columns (the same float32 axes as
    a product of fewer columns, tested on the default run's signatures under OpenBLAS's
    SkylakeX and Haswell kernels).
    """

    def __init__(self, X):
        self.shape = X.shape
        self.mean = X.mean(axis=0, dtype=np.float64)
        self.Xc = X - self.mean.astype(np.float32)
        n_images, n_features = X.shape
        self._from_gram = n_features > n_images
        if self._from_gram:
            symmetric = float64_inner(self.Xc)
        else:
            symmetric = self.Xc.T.astype(np.float64) @ self.Xc.astype(np.float64)
        eigenvalues, vectors = np.linalg.eigh(symmetric)  # increasing order
        self._eigenvalues, self._vectors = eigenvalues[::-1], vectors[:, ::-1]
        self._axes = None

    def top(self, n_components):
        """The largest ``n_components`` eigenvalues (R,) float64 of ``Xc^T Xc``, in
        decreasing order, and their unit axes (D, R), before any sign convention."""
        eigenvalues, vectors = self._eigenvalues[:n_components], self._vectors[:, :n_components]
        if not self._from_gram:
            return eigenvalues, vectors
        if self._axes is None or self._axes.shape[1] < n_components:
            weights = vectors / np.sqrt(np.maximum(eigenvalues, np.finfo(np.float64).tiny))
            self._axes = float64_product(self.Xc.T, weights)
        return eigenvalues, self._axes[:, :n_components]
