"""Factorised pooling: the forward and backward passes of ``z_i = mean_x (h^T U_i^T x)(h^T V_i^T x)``
(and of its shared form), computed as GEMMs on lifted rows ``g(x) ⊗ x`` formed by blocks."""

import numpy as np
import scipy.sparse

from ndir.jcf._features import _check_images

LIFT_ELEMENTS = 2**21
"""Values of the lifted block ``g(x) ⊗ x`` (n_rows x K d) formed at once (8 MiB in float32)."""

SPARSE_POSTERIORS_MAX = 0.25
"""Share of non-zero posteriors (over the images of one pooling call: a training
batch, the hold-out, the images encoded) up to which the unshared projections skip
the lifted GEMM for one GEMM per codeword over the non-zero rows of a chunk of
images (:func:`_by_component`; a batch of 26 training images of the default run,
posteriors below 1e-6 dropped: 20 % non-zero, 64 GEMMs per chunk of about 25 images
instead of 64 per image). benchmarks/bench_jcf.py times an epoch."""


def _lift(X, G):
    """Rows ``g ⊗ x`` (n, c d) of the rows of G (n, c) and X (n, d), np.kron order."""
    return (G[:, :, None] * X[:, None, :]).reshape(len(X), -1)


def _support(H):
    """The non-zero posteriors of H (n, c) codeword by codeword: ``rows`` and ``bounds``
    (c + 1,), the rows where ``H[:, k]`` is non-zero being ``rows[bounds[k]:bounds[k + 1]]``,
    ascending."""
    nonzero = (H != 0).T.copy()  # (c, n), C order: codeword k's rows at k n .. k n + n - 1
    rows = np.flatnonzero(nonzero) % max(len(H), 1)
    return rows, np.concatenate([[0], np.cumsum(np.count_nonzero(nonzero, axis=1))])


class _Pairs:
    """The non-zero posteriors of the rows X (n, d), H (n, c) as (row, codeword) pairs,
    codeword-major (:func:`_support`), shared by the forward and backward projections:

    - ``rows``, ``bounds``: codeword k's pairs are ``bounds[k]:bounds[k + 1]``, on the
      rows ``rows[bounds[k]:bounds[k + 1]]`` (ascending);
    - ``features`` (pairs, d): the features of each pair's row;
    - ``spread`` (n, pairs), sparse: column p holds the posterior ``h_k(x_r)`` of pair
      ``p = (r, k)`` at row r, so that ``spread @ P`` adds up each row's pair values
      ``P[p]`` weighted by their posteriors, in the order k = 0, 1, ... (a CSC product
      accumulates column by column), and ``spread.T @ G`` weights the rows of G by
      each pair's posterior.
    """

    def __init__(self, X, H):
        self.rows, self.bounds = _support(H)
        codewords = np.repeat(np.arange(H.shape[1]), np.diff(self.bounds))
        weights = H[self.rows, codewords]
        n_pairs = self.rows.size
        self.spread = scipy.sparse.csc_matrix((weights, self.rows, np.arange(n_pairs + 1)), shape=(len(H), n_pairs))
        self.features = np.take(X, self.rows, axis=0)


def _by_component(X, H, W, pairs=None):
    """``_lift(X, H) @ W`` (n, m) summed codeword by codeword over the non-zero
    posteriors only: ``sum_k H[:, k] (X W_k)``, W_k the rows ``k d:(k + 1) d`` of W, in
    the order k = 0, 1, ...: one GEMM per codeword over the features of its pairs
    (:class:`_Pairs` of X, H; formed when None), then their products weighted by the
    posteriors and added up per row by one sparse product."""
    d = X.shape[1]
    pairs = _Pairs(X, H) if pairs is None else pairs
    products = np.empty((pairs.rows.size, W.shape[1]), dtype=X.dtype)
    for k in range(H.shape[1]):
        part = slice(pairs.bounds[k], pairs.bounds[k + 1])
        if part.stop > part.start:
            np.matmul(pairs.features[part], W[k * d : (k + 1) * d], out=products[part])
    return np.asarray(pairs.spread @ products, dtype=X.dtype)


def _by_component_transposed(X, H, G, pairs=None):
    """``_lift(X, H).T @ G`` (K d, m) codeword by codeword over the non-zero posteriors:
    block k is ``X^T diag(H[:, k]) G`` over the rows where ``H[:, k]`` is non-zero, one
    GEMM per codeword on the features of its pairs and the rows of G weighted by
    their posteriors (``pairs`` as in :func:`_by_component`)."""
    d = X.shape[1]
    pairs = _Pairs(X, H) if pairs is None else pairs
    weighted = np.asarray(pairs.spread.T @ G, dtype=X.dtype)
    out = np.zeros((H.shape[1] * d, G.shape[1]), dtype=X.dtype)
    for k in range(H.shape[1]):
        part = slice(pairs.bounds[k], pairs.bounds[k + 1])
        if part.stop > part.start:
            np.matmul(pairs.features[part].T, weighted[part], out=out[k * d : (k + 1) * d])
    return out


def _mostly_zero(H):
    """Whether the posteriors H (n, K) are sparse enough for :func:`_by_component`
    (at most :data:`SPARSE_POSTERIORS_MAX` of them non-zero)."""
    return H.shape[1] > 1 and np.count_nonzero(H) <= SPARSE_POSTERIORS_MAX * H.size


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


def _gather(X, H, offsets, images):
    """Rows of the images ``images``, in their order (views of X and H when the images
    are consecutive and ascending), and each image's number of rows."""
    first, sizes = offsets[images], offsets[images + 1] - offsets[images]
    if images.size and np.array_equal(images, np.arange(images[0], images[0] + images.size)):
        rows = slice(first[0], first[0] + sizes.sum())
    else:
        starts = np.cumsum(sizes) - sizes
        rows = np.repeat(first - starts, sizes) + np.arange(sizes.sum())
    return X[rows], H[rows], sizes


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

    def project(self, X, H, pairs=None):
        """a = h^T U_i^T x and b = h^T V_i^T x for every row: two (n, R) arrays. With
        ``pairs`` (:class:`_Pairs` of X, H; unshared form only) codeword by codeword
        over the non-zero posteriors, else by the lifted rows."""
        if not self.shared:
            ab = _lift(X, H) @ self.W if pairs is None else _by_component(X, H, self.W, pairs)
            return ab[:, : self.R], ab[:, self.R :]
        return _lift(X, H @ self.A) @ self.Wu, _lift(X, H @ self.B) @ self.Wv

    def backward(self, X, H, grad_a, grad_b, pairs=None):
        """Gradients of the parameters given dL/da, dL/db (n, R) of a block of rows
        (``pairs`` as in :meth:`project`)."""
        if not self.shared:
            both = np.hstack([grad_a, grad_b])
            grad = _lift(X, H).T @ both if pairs is None else _by_component_transposed(X, H, both, pairs)
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
        """Raw z (len(images), R) of the images; with ``keep`` also each chunk's rows and (a, b).

        The unshared form runs codeword by codeword when the images' posteriors are
        mostly zero (:func:`_mostly_zero`), in chunks of images whose pairs of a row and
        a non-zero posterior times ``2 R`` (their projections) fit :data:`LIFT_ELEMENTS`;
        otherwise in chunks whose lifted rows fit it.
        """
        images = np.asarray(images)
        X, H, sizes = _gather(X, H, offsets, images)
        local = np.concatenate([[0], np.cumsum(sizes)])
        sparse = not self.shared and _mostly_zero(H)
        if sparse:
            per_row = np.concatenate([[0], np.cumsum(np.count_nonzero(H, axis=1))])
            budget, width = per_row[local], self.W.shape[1]
        else:
            budget, width = local, self.Wu.shape[0]
        z = np.empty((len(images), self.R), dtype=X.dtype)
        kept, done = [], 0
        for chunk in _image_chunks(budget, np.arange(len(images)), width):
            rows = slice(local[chunk[0]], local[chunk[-1] + 1])
            Xc, Hc = X[rows], H[rows]
            pairs = _Pairs(Xc, Hc) if sparse else None
            a, b = self.project(Xc, Hc, pairs)
            z[done : done + len(chunk)] = (
                np.add.reduceat(a * b, local[chunk] - local[chunk[0]], axis=0) / sizes[chunk, None]
            )
            if keep:
                kept.append((Xc, Hc, pairs, sizes[chunk], a, b))
            done += len(chunk)
        z *= self.scale
        return (z, kept) if keep else z

    def pool_backward(self, X, H, offsets, kept, grad_z):
        """Parameter gradients (float64) from dL/dz (rows in the order of ``pool``);
        ``kept``: what ``pool`` kept (X, H and offsets are unused, the chunks' rows kept)."""
        total, done = {}, 0
        for Xc, Hc, pairs, sizes, a, b in kept:
            # dz_i/da = b / n (times the scale) for each row of the image.
            per_image = self.scale * grad_z[done : done + len(sizes)] / sizes[:, None]
            per_row = np.repeat(per_image.astype(Xc.dtype), sizes, axis=0)
            for name, g in self.backward(Xc, Hc, per_row * b, per_row * a, pairs).items():
                if name in total:
                    total[name] += g  # in float64
                else:
                    total[name] = g.astype(np.float64)
            done += len(sizes)
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
