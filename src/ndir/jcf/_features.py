"""Local features of the images: a seeded subsample of descriptors, their reduction and
soft assignments under a Fisher codebook, and the check that turns per-image arrays
into the concatenated rows every pooling reads."""

import numpy as np

from ndir.encoding import gmm_posteriors


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
