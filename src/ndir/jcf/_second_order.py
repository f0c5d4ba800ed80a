"""Second-order pooling without learning, with and without a codebook (the baselines
JCF is compared with), and their Gram matrix computed by blocks of codewords."""

import numpy as np

from ndir.jcf._factorised import _lift
from ndir.jcf._features import _check_images
from ndir.jcf._normalisation import NORM_FLOOR, _l2_normalise_with_norms, signed_sqrt

GRAM_BLOCK_ELEMENTS = 2**24
"""Pooled values (all images x a block of codewords) held at once by
:func:`second_order_gram` (128 MiB in float64)."""


def triangle_layout(d):
    """Upper triangle (diagonal included) of a d x d symmetric matrix as a vector.

    Returns ``rows, cols`` (np.triu_indices order, d (d+1) / 2 entries) and ``weights``
    (1 on the diagonal, sqrt(2) off it), so that ``<vec(A), vec(B)> = <A, B>_F`` for
    symmetric A, B with ``vec(A) = weights * A[rows, cols]``.
    """
    rows, cols = np.triu_indices(d)
    weights = np.where(rows == cols, 1.0, np.sqrt(2.0))
    return rows, cols, weights


def _pairwise_products(X, rows, cols):
    """(n, d (d+1)/2) products ``x_a x_b`` of each row of X, a <= b in triangle order."""
    return X[:, rows] * X[:, cols]


def second_order_pooling(features, sqrt_eps=0.0):
    """Second-order pooling without codebook: ``C = mean_x x x^T`` per image.

    Signature: signed square root of every entry of C, its upper triangle with the
    off-diagonal entries times sqrt(2) (:func:`triangle_layout`), then L2
    normalisation, so the dot product of two signatures is the cosine of the
    square-rooted matrices under the Frobenius product. (The square root is taken on
    C's entries, before the sqrt(2) weighting, for that to hold.)

    Parameters
    ----------
    features : list of (n_i, d) arrays, one per image (n_i >= 1).
    sqrt_eps : float >= 0, see :func:`signed_sqrt` (0: the plain signed square root).

    Returns
    -------
    (n_images, d (d+1) / 2) float32, L2-normalised rows.
    """
    X, _, offsets = _check_images(features, None)
    d = X.shape[1]
    rows, cols, weights = triangle_layout(d)
    out = np.empty((len(offsets) - 1, rows.size), dtype=np.float32)
    for j in range(len(offsets) - 1):
        products = _pairwise_products(X[offsets[j] : offsets[j + 1]].astype(np.float64), rows, cols)
        out[j] = signed_sqrt(products.mean(axis=0), sqrt_eps) * weights
    return _l2_normalise_with_norms(out)[0]


def codebook_second_order_pooling(features, posteriors, sqrt_eps=0.0):
    """Codebook second-order pooling: ``C_k = mean_x h_k(x) x x^T`` for each codeword k.

    One GEMM per image, ``H^T [x_a x_b]_{a <= b}`` (K x n by n x d (d+1)/2). Layout:
    codeword-major, block k holding C_k's triangle as in :func:`second_order_pooling`;
    signed square root of the entries, sqrt(2) weights, then L2 normalisation of the
    whole K d (d+1) / 2 vector.

    Parameters
    ----------
    features : list of (n_i, d) arrays; posteriors : list of (n_i, K) arrays.
    sqrt_eps : float >= 0, see :func:`signed_sqrt`.

    Returns
    -------
    (n_images, K d (d+1) / 2) float32, L2-normalised rows.
    """
    if posteriors is None:
        raise ValueError("posteriors: codebook second-order pooling needs the soft assignments")
    X, H, offsets = _check_images(features, posteriors)
    d, K = X.shape[1], H.shape[1]
    rows, cols, weights = triangle_layout(d)
    out = np.empty((len(offsets) - 1, K * rows.size), dtype=np.float32)
    for j in range(len(offsets) - 1):
        part = slice(offsets[j], offsets[j + 1])
        products = _pairwise_products(X[part].astype(np.float64), rows, cols)
        pooled = H[part].astype(np.float64).T @ products / products.shape[0]
        out[j] = (signed_sqrt(pooled, sqrt_eps) * weights).ravel()
    return _l2_normalise_with_norms(out)[0]


def second_order_gram(features, posteriors=None, sqrt_eps=0.0):
    """Cosine similarities of the images' (codebook) second-order pooling signatures,
    accumulated over blocks of codewords without forming the signatures.

    Equal to ``Y @ Y.T`` with ``Y`` = :func:`codebook_second_order_pooling` (or
    :func:`second_order_pooling` when ``posteriors`` is None, K = 1, h ≡ 1), but the
    K d (d+1)/2 columns of ``Y`` are never held at once: each block of codewords
    (:data:`GRAM_BLOCK_ELEMENTS` values for all images) is pooled, square-rooted and
    weighted, its Gram matrix added, and the sum divided by the outer product of the
    norms. Memory is thus bounded whatever K (the pooled signatures of 304 images at
    K = 256, d = 80 would take 1 GB in float32). An image's ``C_k`` of a block come
    from one GEMM, the lifted rows ``h(x) ⊗ x`` (n x K' d) times its features (n x d):
    n K' d^2 multiply-adds, twice the triangle's, but at BLAS speed: at K = 64, 6 s on
    one core for the 304 test images of the default run, against 14 s when forming the
    products ``x_a x_b`` of each block and pooling them.

    Parameters
    ----------
    features : list of (n_i, d) arrays, one per image (n_i >= 1).
    posteriors : list of (n_i, K) arrays, or None (second-order pooling without codebook).
    sqrt_eps : float >= 0, see :func:`signed_sqrt`.

    Returns
    -------
    (n_images, n_images) float64, symmetric; 1 on the diagonal (0 for a zero signature).
    """
    X, H, offsets = _check_images(features, posteriors)
    n_images, d, K = len(offsets) - 1, X.shape[1], H.shape[1]
    rows, cols, weights = triangle_layout(d)
    per_block = max(1, GRAM_BLOCK_ELEMENTS // (n_images * rows.size))
    gram = np.zeros((n_images, n_images))
    for first in range(0, K, per_block):
        codewords = slice(first, min(K, first + per_block))
        n_codewords = codewords.stop - first
        block = np.empty((n_images, n_codewords, rows.size))
        for j in range(n_images):
            part = slice(offsets[j], offsets[j + 1])
            x = X[part].astype(np.float64)
            # (h ⊗ x)^T x summed over the image's features: every C_k at once, one GEMM.
            moments = (_lift(x, H[part, codewords].astype(np.float64)).T @ x).reshape(n_codewords, d, d)
            block[j] = signed_sqrt(moments[:, rows, cols] / len(x), sqrt_eps) * weights
        flat = block.reshape(n_images, -1)
        gram += flat @ flat.T
    norms = np.sqrt(np.diag(gram))
    return gram / np.maximum(np.outer(norms, norms), NORM_FLOOR**2)
