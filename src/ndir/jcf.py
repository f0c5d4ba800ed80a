"""Joint Codebook Factorization (Jacob, Picard, Histace & Klein, "JCF", seed 004) and its baselines.

Images are sets of local features ``x`` in R^d (dense HOG reduced by the Fisher
codebook's descriptor PCA, d = 80) with soft assignments ``h(x)`` in R^K, the GMM
posteriors of that same Fisher codebook (:func:`codebook_features`). The codebook is
fixed and shared with the Fisher Vector path, so comparing JCF with the FV (and
with the other rows of the comparison) isolates the pooling: only the projections
below are learned.

Second-order pooling, no learning (the poster's "Problems"):

- without codebook, ``C = mean_x x x^T`` (:func:`second_order_pooling`);
- with codebook, one ``C_k = mean_x h_k(x) x x^T`` per codeword
  (:func:`codebook_second_order_pooling`), K times larger.

Joint codebook factorization. The raw second-order representation with a codebook
is ``y = h(x) ⊗ x ⊗ h(x) ⊗ x``; each output dimension ``z_i = <w_i, mean_x y>``
with ``w_i`` factorised in rank one, ``w_i = p_i ⊗ q_i``, and ``p_i = vec(U_i)``,
``q_i = vec(V_i)`` with ``U_i, V_i`` in R^{d x K} (vec stacks the K columns, so
``p_i[k d + a] = U_i[a, k]``, matching ``h ⊗ x`` in ``np.kron`` order)::

    z_i = mean_x (h(x)^T U_i^T x) (h(x)^T V_i^T x),        i = 1 .. R      (JCF-R)

2 R d K parameters. The shared-projector form (JCF-R-k) writes ``U_i = Ũ_i A^T``,
``V_i = Ṽ_i B^T`` with ``A, B`` in R^{K x k}, ``Ũ_i, Ṽ_i`` in R^{d x k}::

    z_i = mean_x (h(x)^T A Ũ_i^T x) (h(x)^T B Ṽ_i^T x)                      (JCF-R-k)

2 (K k + R d k) parameters. K = 1 with h ≡ 1 is the factorised bilinear pooling
without codebook, ``z_i = mean_x (u_i^T x)(v_i^T x)``. Then (both steps of the
signature, as for the baselines): signed square root of each ``z_i`` and L2
normalisation of ``z``; images are compared by the dot product of these unit vectors
(cosine).

Computation. With ``g(x) = h(x)`` (or ``A^T h(x)``, resp. ``B^T h(x)``) the lifted row
``g(x) ⊗ x`` of the image's n features times the (K d, R) matrix ``[p_1 .. p_R]``
gives all ``h^T U_i^T x`` at once: one (n, K d) x (K d, 2R) GEMM per image for U and V
together; the backward pass is the transposed GEMM. The lift is formed per block of
at most :data:`LIFT_ELEMENTS` values, never for a whole data set. At n = 400, d = 80,
K = R = 64 that is 0.52 Gflop per image, about 10 ms on one core: 17 times the Fisher
Vector of the same codebook, in proportion to the flops; the shared JCF-64-8 costs 3
times the FV, K = 1 half of it (benchmarks/bench_jcf.py).

Learning (:class:`JCF`): triplet margin loss on the cosine of the normalised ``z``
with the hardest negative of each anchor in the batch
(:func:`hardest_negative_triplet_loss`), Adam with analytic gradients through the
mean pooling, a smoothed signed square root (:func:`signed_sqrt`) and the L2
normalisation, from a seeded Gaussian initialisation; the epoch with the best mAP on
held-out training groups (none sharing a source photograph with a group trained on,
given the photographs) is kept.
"""

import json
import time
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ndir.data import holdout_mask
from ndir.encoding import gmm_posteriors
from ndir.evaluation import map_from_scores, recall_at_k
from ndir.model_files import read_model_file, write_model_file

LIFT_ELEMENTS = 2**21
"""Values of the lifted block ``g(x) ⊗ x`` (n_rows x K d) formed at once (8 MiB in float32)."""

NORM_FLOOR = 1e-12
"""Smallest norm divided by in the L2 normalisation (a zero vector stays zero)."""

GRAM_BLOCK_ELEMENTS = 2**24
"""Pooled values (all images x a block of codewords) held at once by
:func:`second_order_gram` (128 MiB in float64)."""

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


# --------------------------------------------------------------------------- local features


def subsample_descriptors(descriptors, n_per_image, seed, keys=None):
    """A fixed, seeded subsample of at most ``n_per_image`` local descriptors per image.

    Image ``i`` draws without replacement from ``np.random.default_rng([seed, keys[i]])``,
    so its sample depends only on the seed and its key, not on the other images (shards
    of a data set draw the same samples as the whole set when ``keys`` are global image
    rows). The kept rows stay in their original order. An image with at most
    ``n_per_image`` descriptors keeps them all.

    Parameters
    ----------
    descriptors : list of (n_i, D) arrays, one per image.
    n_per_image : int >= 1.
    seed : int >= 0.
    keys : sequence of int >= 0, one per image; default ``range(len(descriptors))``.

    Returns
    -------
    list of (min(n_i, n_per_image), D) arrays (copies).
    """
    if int(n_per_image) < 1:
        raise ValueError(f"n_per_image must be >= 1, got {n_per_image}")
    keys = range(len(descriptors)) if keys is None else list(keys)
    if len(keys) != len(descriptors):
        raise ValueError(f"keys has {len(keys)} entries for {len(descriptors)} images")
    out = []
    for key, local in zip(keys, descriptors):
        local = np.asarray(local)
        if len(local) <= n_per_image:
            out.append(local.copy())
            continue
        rng = np.random.default_rng([int(seed), int(key)])
        out.append(local[np.sort(rng.choice(len(local), size=n_per_image, replace=False))])
    return out


def codebook_features(codebook, descriptors):
    """Local features and soft assignments of one image under a Fisher codebook.

    ``x`` = the descriptors reduced by the codebook's descriptor PCA (``codebook.pca_``,
    d = 80 by default) and ``h(x)`` = the posteriors of its diagonal GMM
    (:func:`ndir.encoding.gmm_posteriors`): exactly what the Fisher Vector of the same
    codebook sees, so JCF and FV differ only by their pooling.

    Parameters
    ----------
    codebook : :class:`ndir.codebooks.FisherCodebook`.
    descriptors : (n, D) raw local descriptors (D = 128 for dense HOG), n >= 1.

    Returns
    -------
    features : (n, d) float32; posteriors : (n, K) float32, rows summing to 1.
    """
    descriptors = np.asarray(descriptors, dtype=np.float32)
    expected = codebook.pca_.mean_.shape[0]
    if descriptors.ndim != 2 or descriptors.shape[1] != expected:
        raise ValueError(f"descriptors have shape {descriptors.shape}; the codebook expects (n, {expected})")
    features = codebook.pca_.transform(descriptors)
    posteriors = gmm_posteriors(features, codebook.weights_, codebook.means_, codebook.variances_)
    return features, posteriors


def _check_images(features, posteriors, n_features=None, n_clusters=None):
    """Validate per-image features and posteriors; concatenate them.

    Returns ``X`` (N, d), ``H`` (N, K) (ones, K = 1, when ``posteriors`` is None) and
    ``offsets`` (n_images + 1,), image ``j`` owning rows ``offsets[j]:offsets[j + 1]``.
    Float64 when every feature array is float64 (the tests), float32 otherwise.
    """
    if isinstance(features, np.ndarray) and features.ndim == 2:
        raise ValueError("features must be a list of (n_i, d) arrays, one per image, not one 2-D array")
    features = [np.asarray(f) for f in features]
    if not features:
        raise ValueError("features: no image given")
    dtype = np.float64 if all(f.dtype == np.float64 for f in features) else np.float32
    dims = {f.shape[1] if f.ndim == 2 else None for f in features}
    if len(dims) != 1 or None in dims:
        found = sorted(map(str, dims))
        raise ValueError(f"features must be 2-D arrays (n_i, d) with one d for all images; got d in {found}")
    d = dims.pop()
    if n_features is not None and d != n_features:
        raise ValueError(f"features have dimension d = {d} but the model was fitted with d = {n_features}")
    sizes = np.array([len(f) for f in features])
    if (sizes == 0).any():
        raise ValueError(f"features: images {np.flatnonzero(sizes == 0).tolist()[:10]} have no local feature")
    X = np.concatenate(features).astype(dtype, copy=False)
    if not np.all(np.isfinite(X)):
        raise ValueError("features contain NaN or infinite values")
    if posteriors is None:
        H = np.ones((len(X), 1), dtype=dtype)
    else:
        posteriors = [np.asarray(p) for p in posteriors]
        if len(posteriors) != len(features):
            raise ValueError(f"posteriors has {len(posteriors)} images but features has {len(features)}")
        shapes_ok = all(p.ndim == 2 and len(p) == n for p, n in zip(posteriors, sizes))
        if not shapes_ok or len({p.shape[1] for p in posteriors}) != 1:
            raise ValueError("posteriors must be (n_i, K) arrays, one K for all, n_i matching each image's features")
        H = np.concatenate(posteriors).astype(dtype, copy=False)
        if not np.all(np.isfinite(H)):
            raise ValueError("posteriors contain NaN or infinite values")
    if n_clusters is not None and H.shape[1] != n_clusters:
        raise ValueError(f"posteriors have K = {H.shape[1]} codewords but the model was fitted with K = {n_clusters}")
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return X, H, offsets


# --------------------------------------------------------------------------- normalisation


def signed_sqrt(z, eps=0.0):
    """Smoothed signed square root ``sign(z) (sqrt(|z| + eps) - sqrt(eps))``.

    ``eps = 0`` is the plain signed square root. With ``eps > 0`` the function stays odd
    and zero at 0, and its derivative ``1 / (2 sqrt(|z| + eps))`` is continuous and at
    most ``1 / (2 sqrt(eps))`` (the plain one is infinite at 0), so gradients through it
    stay bounded; it differs from the plain one by at most ``sqrt(eps)``.
    """
    root_eps = np.sqrt(eps)
    return np.sign(z) * (np.sqrt(np.abs(z) + eps) - root_eps)


def _signed_sqrt_derivative(z, eps):
    return 0.5 / np.sqrt(np.abs(z) + eps)


def l2_normalise_rows(S):
    """``S / ||S||_2`` row by row; a zero row stays zero. Returns (normalised, norms)."""
    norms = np.linalg.norm(S, axis=1, keepdims=True)
    return S / np.maximum(norms, NORM_FLOOR), norms


def _normalise(z, sqrt_eps, signed):
    """Signed square root (if ``signed``) then L2 normalisation of each row of ``z``."""
    s = signed_sqrt(z, sqrt_eps) if signed else z
    return l2_normalise_rows(s)[0]


def _normalise_backward(z, grad_y, sqrt_eps, signed):
    """dL/dz from dL/dy for ``y = l2(ssqrt(z))`` (rows independent)."""
    s = signed_sqrt(z, sqrt_eps) if signed else z
    y, norms = l2_normalise_rows(s)
    grad_s = (grad_y - y * np.sum(y * grad_y, axis=1, keepdims=True)) / np.maximum(norms, NORM_FLOOR)
    return grad_s * _signed_sqrt_derivative(z, sqrt_eps) if signed else grad_s


# --------------------------------------------------------------------------- second-order baselines


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
    return l2_normalise_rows(out)[0]


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
    return l2_normalise_rows(out)[0]


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


# --------------------------------------------------------------------------- factorised pooling


def _lift(X, G):
    """Rows ``g ⊗ x`` (n, c d) of the rows of G (n, c) and X (n, d), np.kron order."""
    return (G[:, :, None] * X[:, None, :]).reshape(len(X), -1)


def _to_columns(U):
    """(R, d, c) projectors -> the (c d, R) matrix whose column i is vec(U_i)."""
    R, d, c = U.shape
    return U.transpose(2, 1, 0).reshape(c * d, R)


def _from_columns(W, d):
    """Inverse of :func:`_to_columns`."""
    return W.reshape(-1, d, W.shape[1]).transpose(2, 1, 0)


def _image_chunks(offsets, images, width):
    """Split ``images`` into runs whose lifted rows (rows x ``width``) fit :data:`LIFT_ELEMENTS`."""
    chunk, rows = [], 0
    for j in images:
        n = offsets[j + 1] - offsets[j]
        if chunk and (rows + n) * width > LIFT_ELEMENTS:
            yield np.asarray(chunk)
            chunk, rows = [], 0
        chunk.append(j)
        rows += n
    if chunk:
        yield np.asarray(chunk)


def _gather(X, H, offsets, chunk):
    """Rows of the images ``chunk``, their segment starts and sizes."""
    sizes = offsets[chunk + 1] - offsets[chunk]
    rows = np.concatenate([np.arange(offsets[j], offsets[j + 1]) for j in chunk])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return X[rows], H[rows], starts, sizes


class _Model:
    """Forward and backward passes of JCF for given parameters (float64 dict).

    ``params``: ``Wu``, ``Wv`` (c d, R), columns vec(U_i), vec(V_i) (c = K, or k when
    shared); ``A``, ``B`` (K, k) or absent. ``scale`` multiplies z (fixed during a fit,
    folded into Wu, Wv afterwards).
    """

    def __init__(self, params, dtype, scale=1.0):
        self.shared = "A" in params
        self.Wu = params["Wu"].astype(dtype)
        self.Wv = params["Wv"].astype(dtype)
        self.W = None if self.shared else np.hstack([self.Wu, self.Wv])
        self.A = params["A"].astype(dtype) if self.shared else None
        self.B = params["B"].astype(dtype) if self.shared else None
        self.R = self.Wu.shape[1]
        self.scale = scale

    def project(self, X, H):
        """a = h^T U_i^T x and b = h^T V_i^T x for every row: two (n, R) arrays."""
        if not self.shared:
            ab = _lift(X, H) @ self.W
            return ab[:, : self.R], ab[:, self.R :]
        return _lift(X, H @ self.A) @ self.Wu, _lift(X, H @ self.B) @ self.Wv

    def backward(self, X, H, grad_a, grad_b):
        """Gradients of the parameters given dL/da, dL/db (n, R) of a block of rows."""
        if not self.shared:
            grad = _lift(X, H).T @ np.hstack([grad_a, grad_b])
            return {"Wu": grad[:, : self.R], "Wv": grad[:, self.R :]}
        out = {}
        d = X.shape[1]
        for W, M, grad_rows, name, gate in ((self.Wu, self.A, grad_a, "Wu", "A"), (self.Wv, self.B, grad_b, "Wv", "B")):
            G = H @ M
            out[name] = _lift(X, G).T @ grad_rows
            # dL/dg_j = sum_i dL/da_i sum_a x_a Ũ_i[a, j]: (n, k d) then contract with x.
            back = (grad_rows @ W.T).reshape(len(X), -1, d)
            out[gate] = H.T @ np.matmul(back, X[:, :, None])[:, :, 0]
        return out

    def pool(self, X, H, offsets, images, keep=False):
        """Raw z (len(images), R) of the images; with ``keep`` also each chunk's (a, b)."""
        z = np.empty((len(images), self.R), dtype=X.dtype)
        kept, done = [], 0
        for chunk in _image_chunks(offsets, images, self.Wu.shape[0]):
            Xc, Hc, starts, sizes = _gather(X, H, offsets, chunk)
            a, b = self.project(Xc, Hc)
            z[done : done + len(chunk)] = np.add.reduceat(a * b, starts, axis=0) / sizes[:, None]
            if keep:
                kept.append((chunk, a, b))
            done += len(chunk)
        z *= self.scale
        return (z, kept) if keep else z

    def pool_backward(self, X, H, offsets, kept, grad_z):
        """Parameter gradients (float64) from dL/dz (rows in the order of ``pool``)."""
        total, done = {}, 0
        for chunk, a, b in kept:
            Xc, Hc, _, sizes = _gather(X, H, offsets, chunk)
            # dz_i/da = b / n (times the scale) for each row of the image.
            per_image = self.scale * grad_z[done : done + len(chunk)] / sizes[:, None]
            per_row = np.repeat(per_image.astype(X.dtype), sizes, axis=0)
            for name, g in self.backward(Xc, Hc, per_row * b, per_row * a).items():
                total[name] = total.get(name, 0.0) + g.astype(np.float64)
            done += len(chunk)
        return total


def factorised_pooling(features, posteriors, U, V, A=None, B=None):
    """Raw JCF vector z (R,) of one image (no normalisation).

    ``z_i = mean_x (h^T U_i^T x)(h^T V_i^T x)``, or with ``A, B`` the shared form
    ``z_i = mean_x (h^T A Ũ_i^T x)(h^T B Ṽ_i^T x)`` (then ``U, V`` hold Ũ, Ṽ).

    Parameters
    ----------
    features : (n, d); posteriors : (n, K), or None for K = 1, h ≡ 1.
    U, V : (R, d, K) projectors U_i, V_i; or (R, d, k) with ``A, B`` (K, k).

    Returns
    -------
    (R,) array in the dtype of ``features`` (float32 unless it is float64).
    """
    X, H, offsets = _check_images([features], None if posteriors is None else [posteriors])
    if (A is None) != (B is None):
        raise ValueError("A and B: give both (shared form) or neither")
    c = H.shape[1] if A is None else A.shape[1]
    for name, P in (("U", U), ("V", V)):
        if np.ndim(P) != 3 or np.shape(P)[1:] != (X.shape[1], c):
            raise ValueError(f"{name} has shape {np.shape(P)}; expected (R, d, c) = (R, {X.shape[1]}, {c})")
    params = {"Wu": _to_columns(np.asarray(U, dtype=np.float64)), "Wv": _to_columns(np.asarray(V, dtype=np.float64))}
    if A is not None:
        for name, M in (("A", A), ("B", B)):
            if np.shape(M) != (H.shape[1], c):
                raise ValueError(f"{name} has shape {np.shape(M)}; expected (K, k) = ({H.shape[1]}, {c})")
        params["A"], params["B"] = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    return _Model(params, X.dtype).pool(X, H, offsets, np.arange(1))[0]


# --------------------------------------------------------------------------- loss


def hardest_negative_triplet_loss(Y, groups, margin):
    """Triplet margin loss with the hardest negative of each anchor, and its gradient.

    For every ordered pair ``(a, p)`` of distinct images of one group (anchor,
    positive) whose anchor has a negative ``l`` (another group) in ``Y``,
    with ``n(a) = argmax_l <y_a, y_l>`` the anchor's hardest negative::

        L = mean_(a, p) [margin - <y_a, y_p> + <y_a, y_n(a)>]_+

    The gradient takes ``n(a)`` fixed (a sub-gradient where two negatives tie, the
    lowest row winning) and the hinge's derivative as 0 at 0.

    Parameters
    ----------
    Y : (n, R) float array, the (normalised) signatures of a batch.
    groups : (n,) labels.
    margin : float > 0.

    Returns
    -------
    loss : float; grad : (n, R) float64 dL/dY; n_active : int, triplets with a
    positive hinge; n_triplets : int.
    """
    Y = np.asarray(Y, dtype=np.float64)
    groups = np.asarray(groups)
    S = Y @ Y.T
    same = groups[:, None] == groups[None, :]
    positive = same.copy()
    np.fill_diagonal(positive, False)
    has_negative = (~same).any(axis=1)
    positive &= has_negative[:, None]
    anchors, positives = np.nonzero(positive)
    if anchors.size == 0:
        return 0.0, np.zeros_like(Y), 0, 0
    hardest = np.where(same, -np.inf, S).argmax(axis=1)
    negatives = hardest[anchors]
    hinge = margin - S[anchors, positives] + S[anchors, negatives]
    active = hinge > 0
    loss = float(hinge[active].sum() / anchors.size)
    D = np.zeros_like(S)
    weight = 1.0 / anchors.size
    np.add.at(D, (anchors[active], positives[active]), -weight)
    np.add.at(D, (anchors[active], negatives[active]), weight)
    return loss, (D + D.T) @ Y, int(active.sum()), int(anchors.size)


# --------------------------------------------------------------------------- estimator


class JCF(BaseEstimator):
    """Joint Codebook Factorization (seed 004): a learned R-dimensional second-order signature.

    ``z_i = mean_x (h(x)^T U_i^T x)(h(x)^T V_i^T x)`` (JCF-R), or with ``n_shared = k``
    ``z_i = mean_x (h(x)^T A Ũ_i^T x)(h(x)^T B Ṽ_i^T x)`` (JCF-R-k); then the signed
    square root (if ``signed_sqrt``) and L2 normalisation. See the module docstring.

    Learning. Each epoch visits the training groups in a random order, ``batch_groups``
    groups per Adam step (all of them, one full-batch step per epoch, when None). In a
    batch, every image with a near duplicate is an anchor, paired with each of its
    positives and its hardest negative under the current model
    (:func:`hardest_negative_triplet_loss`, margin on the cosine). Gradients are analytic:
    through the loss, the L2 normalisation, the smoothed signed square root
    ``sign(z)(sqrt(|z| + sqrt_eps) - sqrt(sqrt_eps))`` (bounded derivative; the plain
    one is infinite at 0) and the mean pooling (GEMMs, module docstring).

    Initialisation: i.i.d. N(0, 1) entries for Ũ, Ṽ (U, V) and A, B, then U, V rescaled
    by one common factor so that the training z have unit RMS (the loss does not
    depend on that scale except through ``sqrt_eps``, which is thus relative to it, and
    Adam's steps are relative to O(1) parameters). Random rather than PCA-based because
    it is an unbiased sketch of the un-normalised second-order representation: for
    Gaussian ``p_i, q_i``, ``E[z_i z'_i] = <M, M'>_F`` with ``M = mean_x (h⊗x)(h⊗x)^T``;
    a truncated PCA of the K d (d+1)/2-dim codebook pooling has no rank-one-per-codeword
    factorisation to start from.

    Model selection: ``holdout_fraction`` of the training groups (those of >= 2 images)
    are held out (:func:`ndir.data.holdout_mask`; with ``together`` labels in
    :meth:`fit`, groups cut from one photograph are held out or kept together, so the
    hold-out shares no photograph with the groups trained on); after every epoch their
    mAP (every held-out image a query, other held-out images as database,
    :func:`ndir.evaluation.map_from_scores`) and Recall@1 are recorded, and the parameters of the best mAP (epoch 0, the initialisation,
    included; earliest on ties) are kept. Without hold-out the last epoch is kept.

    Parameters
    ----------
    n_components : int >= 1, R, the signature's dimension.
    n_shared : int >= 1 or None, k of JCF-R-k (k <= K); None for JCF-R.
    signed_sqrt : bool, apply the (smoothed) signed square root before L2 normalisation.
    sqrt_eps : float >= 0, smoothing of the signed square root, in units of the
        unit-RMS initial z.
    margin : float > 0, triplet margin on the cosine. 0.1 (the calibration's) is
        reached on every training triplet within a few epochs on the embedded set,
        after which nothing is learned; 0.3 learned more there (JCF-64 at K = 64 and
        K = 1, 30 training groups, one seed).
    learning_rate : float > 0, Adam's step size (parameters are O(1) at start).
    n_epochs : int >= 0; 0 returns the (rescaled) random initialisation.
    batch_groups : int >= 2 or None, groups per Adam step; None: full batch (one
        step per epoch: on a toy problem the hardest-negative loss then sits for
        long on its collapsed plateau, all signatures alike and the loss near the
        margin, which mini-batches leave far sooner).
    holdout_fraction : float in [0, 1), share of training groups held out for model
        selection.
    random_state : int, RandomState or None (hold-out groups, initialisation, batches).

    Attributes
    ----------
    U_, V_ : (R, d, K) float64 projectors U_i, V_i; in the shared form (R, d, k),
        the Ũ_i, Ṽ_i.
    A_, B_ : (K, k) float64 shared projectors, or None.
    n_features_, n_clusters_ : d and K seen in ``fit`` (K = 1 without posteriors).
    history_ : list of dict per epoch (0 = initialisation): ``epoch``, ``loss`` (mean
        over the epoch's batches, each before its step; epoch 0: the whole training
        set), ``n_active`` and ``n_triplets`` (summed over batches), ``holdout_map``,
        ``holdout_recall_at_1`` (NaN without hold-out), ``seconds`` (since fit began).
    best_epoch_, holdout_map_ : the epoch kept and its hold-out mAP (NaN without hold-out).
    n_holdout_images_ : training images held out for the selection.
    holdout_groups_ : (n_held_groups,) the labels of the held-out groups, sorted.
    """

    _parameter_constraints = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "n_shared": [Interval(Integral, 1, None, closed="left"), None],
        "signed_sqrt": ["boolean"],
        "sqrt_eps": [Interval(Real, 0, None, closed="left")],
        "margin": [Interval(Real, 0, None, closed="neither")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "n_epochs": [Interval(Integral, 0, None, closed="left")],
        "batch_groups": [Interval(Integral, 2, None, closed="left"), None],
        "holdout_fraction": [Interval(Real, 0, 1, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_components=64,
        n_shared=None,
        signed_sqrt=True,
        sqrt_eps=1e-4,
        margin=0.3,
        learning_rate=0.05,
        n_epochs=40,
        batch_groups=8,
        holdout_fraction=0.2,
        random_state=None,
    ):
        self.n_components = n_components
        self.n_shared = n_shared
        self.signed_sqrt = signed_sqrt
        self.sqrt_eps = sqrt_eps
        self.margin = margin
        self.learning_rate = learning_rate
        self.n_epochs = n_epochs
        self.batch_groups = batch_groups
        self.holdout_fraction = holdout_fraction
        self.random_state = random_state

    # ------------------------------------------------------------------ parameters

    @property
    def n_parameters_(self):
        """Learned parameters: 2 R d K, or 2 (K k + R d k) in the shared form."""
        check_is_fitted(self)
        return int(self.U_.size + self.V_.size + (0 if self.A_ is None else self.A_.size + self.B_.size))

    @property
    def projectors_(self):
        """(U, V): the full (R, d, K) projectors, ``U_i = Ũ_i A^T`` in the shared form."""
        check_is_fitted(self)
        if self.A_ is None:
            return self.U_, self.V_
        return self.U_ @ self.A_.T, self.V_ @ self.B_.T

    def _init_params(self, d, K, rng):
        c = K if self.n_shared is None else self.n_shared
        R = self.n_components
        params = {"Wu": rng.standard_normal((c * d, R)), "Wv": rng.standard_normal((c * d, R))}
        if self.n_shared is not None:
            params["A"] = rng.standard_normal((K, c))
            params["B"] = rng.standard_normal((K, c))
        return params

    def _params_from_attributes(self):
        params = {"Wu": _to_columns(self.U_), "Wv": _to_columns(self.V_)}
        if self.A_ is not None:
            params["A"], params["B"] = self.A_, self.B_
        return params

    # ------------------------------------------------------------------ objective

    def _signatures(self, model, X, H, offsets, images):
        return _normalise(model.pool(X, H, offsets, images), self.sqrt_eps, self.signed_sqrt)

    def _loss_and_gradient(self, params, X, H, offsets, images, groups, scale=1.0):
        """Loss of the batch ``images`` (labels ``groups``) and its gradient (float64 dict)."""
        model = _Model(params, X.dtype, scale)
        z, kept = model.pool(X, H, offsets, images, keep=True)
        z = z.astype(np.float64)
        Y = _normalise(z, self.sqrt_eps, self.signed_sqrt)
        loss, grad_Y, n_active, n_triplets = hardest_negative_triplet_loss(Y, groups, self.margin)
        if n_active == 0:
            return loss, {name: np.zeros_like(value) for name, value in params.items()}, n_active, n_triplets
        grad_z = _normalise_backward(z, grad_Y, self.sqrt_eps, self.signed_sqrt)
        return loss, model.pool_backward(X, H, offsets, kept, grad_z), n_active, n_triplets

    def _evaluate(self, params, scale, X, H, offsets, images, groups):
        if images.size == 0:
            return float("nan"), float("nan")
        Y = self._signatures(_Model(params, X.dtype, scale), X, H, offsets, images).astype(np.float64)
        S = Y @ Y.T
        return map_from_scores(S, np.arange(images.size), groups), recall_at_k(S, groups, (1,), "precomputed")[1]

    # ------------------------------------------------------------------ fitting

    def fit(self, features, posteriors, groups, together=None):
        """Learn the projectors from training images grouped into near duplicates.

        Parameters
        ----------
        features : list of (n_i, d) arrays, the local features of each image (n_i >= 1;
            e.g. :func:`subsample_descriptors` then :func:`codebook_features`).
            Computed in float32 (float64 when every array is float64).
        posteriors : list of (n_i, K) arrays, the soft assignments h(x), or None for
            the factorised form without codebook (K = 1, h ≡ 1).
        groups : (n_images,) labels; images of one group are near duplicates. At
            least two groups, one of them with two images or more.
        together : (n_images,) labels or None, e.g. each image's source photograph:
            groups sharing a label are held out or trained on together (missing
            values link nothing); None: each group alone.

        Cost of an epoch: 8 d K R flops per training feature (the lifted rows times
        [U V], then the transposed product back; about 8 d k R in the shared form),
        plus a forward pass over the held-out images; see benchmarks/bench_jcf.py.
        Memory: the features, the posteriors and two (n_i, R) arrays per image of a
        batch.

        Returns
        -------
        self
        """
        self._validate_params()
        X, H, offsets = _check_images(features, posteriors)
        groups = column_or_1d(groups)
        n_images = len(offsets) - 1
        if groups.size != n_images:
            raise ValueError(f"groups has {groups.size} labels for {n_images} images")
        d, K = X.shape[1], H.shape[1]
        if self.n_shared is not None and self.n_shared > K:
            raise ValueError(f"n_shared = {self.n_shared} exceeds the codebook size K = {K} (need k <= K)")
        rng = check_random_state(self.random_state)

        held = holdout_mask(groups, self.holdout_fraction, rng, together)
        train, holdout = np.flatnonzero(~held), np.flatnonzero(held)
        train_groups, holdout_groups = groups[train], groups[holdout]
        _, sizes = np.unique(train_groups, return_counts=True)
        if sizes.size < 2 or sizes.max() < 2:
            raise ValueError("groups: training needs two groups or more, one of them with two images or more")

        start = time.perf_counter()
        params = self._init_params(d, K, rng)
        z = _Model(params, X.dtype).pool(X, H, offsets, train).astype(np.float64)
        rms = float(np.sqrt(np.mean(z**2)))
        scale = 1.0 / rms if rms > 0 else 1.0
        Y = _normalise(scale * z, self.sqrt_eps, self.signed_sqrt)
        loss, _, n_active, n_triplets = hardest_negative_triplet_loss(Y, train_groups, self.margin)
        holdout_map, holdout_r1 = self._evaluate(params, scale, X, H, offsets, holdout, holdout_groups)
        self.history_ = [
            {
                "epoch": 0,
                "loss": loss,
                "n_active": n_active,
                "n_triplets": n_triplets,
                "holdout_map": holdout_map,
                "holdout_recall_at_1": holdout_r1,
                "seconds": time.perf_counter() - start,
            }
        ]
        best = (holdout_map, {name: value.copy() for name, value in params.items()}, 0)
        moments = {name: (np.zeros_like(value), np.zeros_like(value)) for name, value in params.items()}
        beta1, beta2 = ADAM_BETAS
        step = 0
        labels = np.unique(train_groups)
        for epoch in range(1, self.n_epochs + 1):
            order = rng.permutation(labels)
            per_batch = labels.size if self.batch_groups is None else self.batch_groups
            losses, n_active, n_triplets = [], 0, 0
            for first in range(0, order.size, per_batch):
                in_batch = np.isin(train_groups, order[first : first + per_batch])
                images = train[in_batch]
                loss, grads, active, triplets = self._loss_and_gradient(
                    params, X, H, offsets, images, train_groups[in_batch], scale
                )
                if triplets == 0:
                    continue
                losses.append(loss)
                n_active += active
                n_triplets += triplets
                step += 1
                for name, grad in grads.items():
                    m, v = moments[name]
                    m *= beta1
                    m += (1 - beta1) * grad
                    v *= beta2
                    v += (1 - beta2) * grad**2
                    m_hat = m / (1 - beta1**step)
                    v_hat = v / (1 - beta2**step)
                    params[name] -= self.learning_rate * m_hat / (np.sqrt(v_hat) + ADAM_EPS)
            holdout_map, holdout_r1 = self._evaluate(params, scale, X, H, offsets, holdout, holdout_groups)
            self.history_.append(
                {
                    "epoch": epoch,
                    "loss": float(np.mean(losses)) if losses else float("nan"),
                    "n_active": n_active,
                    "n_triplets": n_triplets,
                    "holdout_map": holdout_map,
                    "holdout_recall_at_1": holdout_r1,
                    "seconds": time.perf_counter() - start,
                }
            )
            if not np.isnan(holdout_map) and holdout_map > best[0]:
                best = (holdout_map, {name: value.copy() for name, value in params.items()}, epoch)
        if np.isnan(best[0]):
            best = (best[0], params, self.n_epochs)
        self.holdout_map_, params, self.best_epoch_ = best

        root = np.sqrt(scale)
        self.U_ = _from_columns(params["Wu"] * root, d)
        self.V_ = _from_columns(params["Wv"] * root, d)
        self.A_ = params.get("A")
        self.B_ = params.get("B")
        self.n_features_, self.n_clusters_ = d, K
        self.n_holdout_images_ = int(holdout.size)
        self.holdout_groups_ = np.unique(holdout_groups)
        return self

    # ------------------------------------------------------------------ encoding

    def pool(self, features, posteriors):
        """Raw z (n_images, R) of images (before square root and normalisation).

        Parameters as :meth:`transform`. Returns float32 (float64 for float64 features).
        """
        check_is_fitted(self)
        X, H, offsets = self._check_transform(features, posteriors)
        model = _Model(self._params_from_attributes(), X.dtype)
        return model.pool(X, H, offsets, np.arange(len(offsets) - 1))

    def transform(self, features, posteriors):
        """JCF signatures of images: signed square root (if set) and L2 normalisation of z.

        Parameters
        ----------
        features : list of (n_i, d) arrays, one per image, d = ``n_features_``.
        posteriors : list of (n_i, K) arrays (K = ``n_clusters_``), or None if the model
            was fitted without (K = 1).

        Returns
        -------
        (n_images, R) float32 (float64 for float64 features), unit rows (a zero z stays
        zero): compare by dot product.
        """
        z = self.pool(features, posteriors)
        return _normalise(z.astype(np.float64), self.sqrt_eps, self.signed_sqrt).astype(z.dtype)

    def fit_transform(self, features, posteriors, groups, together=None):
        return self.fit(features, posteriors, groups, together).transform(features, posteriors)

    # ------------------------------------------------------------------ storage

    def save(self, path):
        """Write the fitted model to the ``.npz`` file ``path`` (kind ``"jcf"``): the
        projectors, the hyper-parameters and the history (JSON)."""
        check_is_fitted(self)
        arrays = {"U": self.U_, "V": self.V_}
        if self.A_ is not None:
            arrays["A"], arrays["B"] = self.A_, self.B_
        params = {key: value for key, value in self.get_params().items() if key != "random_state"}
        state = {
            "params": params,
            "n_features": self.n_features_,
            "n_clusters": self.n_clusters_,
            "best_epoch": self.best_epoch_,
            "holdout_map": self.holdout_map_,
            "n_holdout_images": self.n_holdout_images_,
            "holdout_groups": self.holdout_groups_.tolist(),
            "history": self.history_,
        }
        write_model_file(path, "jcf", state=np.array(json.dumps(state)), **arrays)

    @classmethod
    def load(cls, path):
        """Read a model written by :meth:`save` (:class:`~ndir.errors.NdirInputError`
        naming ``path`` for a missing, unreadable or other file)."""
        arrays = read_model_file(path, "jcf", ["U", "V", "state"])
        state = json.loads(str(arrays["state"]))
        model = cls(**state["params"])
        model.U_, model.V_ = arrays["U"], arrays["V"]
        model.A_, model.B_ = arrays.get("A"), arrays.get("B")
        model.n_features_, model.n_clusters_ = state["n_features"], state["n_clusters"]
        model.best_epoch_, model.holdout_map_ = state["best_epoch"], state["holdout_map"]
        model.n_holdout_images_, model.history_ = state["n_holdout_images"], state["history"]
        model.holdout_groups_ = np.asarray(state["holdout_groups"])
        return model

    def _check_transform(self, features, posteriors):
        if posteriors is None and self.n_clusters_ != 1:
            raise ValueError(f"posteriors: the model was fitted with K = {self.n_clusters_} codewords; pass them")
        return _check_images(features, posteriors, self.n_features_, self.n_clusters_)


# --------------------------------------------------------------------------- cost


def pooling_madds(n_features, d, K, R=None, k=None, n_database=0):
    """Multiply-adds to encode one image of ``n_features`` local features and score it
    against ``n_database`` images. The codebook's posteriors, shared with the Fisher
    Vector of the same codebook, are not counted (as no row counts computing its
    input signature).

    - second-order pooling (``R`` None, ``K`` = 1): ``n T`` products and sums, T =
      d (d+1) / 2, then ``T`` per database image;
    - codebook second-order pooling (``R`` None, K > 1): ``n T`` products and the
      (K x n) by (n x T) pooling, ``K T`` per database image;
    - JCF (``R`` given): the lift ``h ⊗ x`` (n c d, c = K, or k after the (n x K) by
      (K x k) products ``A^T h``, ``B^T h``), the (n x c d) by (c d x 2R) projections,
      ``n R`` products, then ``R`` per database image.
    """
    T = d * (d + 1) // 2
    if R is None:
        encode = n_features * T * (1 if K == 1 else 1 + K)
        return encode + (T if K == 1 else K * T) * n_database
    if k is None:
        encode = n_features * K * d * (1 + 2 * R) + n_features * R
    else:
        encode = 2 * n_features * (K * k + k * d * (1 + R)) + n_features * R
    return encode + R * n_database
