"""The vectorised projections of ndir.jcf against the loops they replaced.

The references below are the implementations before the vectorisation (one
``np.flatnonzero`` per codeword, images pooled one chunk at a time, Adam with a
temporary per operation), kept here verbatim in substance: the fast paths must give
the same numbers, bit for bit where they perform the same floating-point operations
in the same order, else within a stated tolerance.
"""

import numpy as np
import pytest

from ndir.jcf import _estimator, _factorised, _features


def reference_by_component(X, H, W):
    d = X.shape[1]
    out = np.zeros((len(X), W.shape[1]), dtype=X.dtype)
    for k in range(H.shape[1]):
        rows = np.flatnonzero(H[:, k])
        if rows.size:
            out[rows] += H[rows, k, None] * (X[rows] @ W[k * d : (k + 1) * d])
    return out


def reference_by_component_transposed(X, H, G):
    d = X.shape[1]
    out = np.zeros((H.shape[1] * d, G.shape[1]), dtype=X.dtype)
    for k in range(H.shape[1]):
        rows = np.flatnonzero(H[:, k])
        if rows.size:
            out[k * d : (k + 1) * d] = X[rows].T @ (H[rows, k, None] * G[rows])
    return out


def reference_pool(params, X, H, offsets, images, G, scale):
    """z of the images and the parameter gradients of <G, z>, one image at a time,
    each on the lifted rows ``h ⊗ x`` (the definition, no sparse path)."""
    Wu, Wv = params["Wu"], params["Wv"]
    z, grads = [], {"Wu": np.zeros_like(Wu), "Wv": np.zeros_like(Wv)}
    for g, j in zip(G, images):
        x, h = X[offsets[j] : offsets[j + 1]], H[offsets[j] : offsets[j + 1]]
        lifted = _factorised._lift(x, h)
        a, b = lifted @ Wu, lifted @ Wv
        z.append(scale * np.mean(a * b, axis=0))
        per_row = scale * g / len(x)
        grads["Wu"] += lifted.T @ (per_row * b)
        grads["Wv"] += lifted.T @ (per_row * a)
    return np.array(z), grads


class ReferenceAdam:
    def __init__(self, params, learning_rate):
        self.learning_rate = learning_rate
        self.moments = {name: (np.zeros_like(value), np.zeros_like(value)) for name, value in params.items()}
        self.n_steps = 0

    def step(self, params, grads):
        beta1, beta2 = _estimator.ADAM_BETAS
        self.n_steps += 1
        for name, grad in grads.items():
            m, v = self.moments[name]
            m *= beta1
            m += (1 - beta1) * grad
            v *= beta2
            v += (1 - beta2) * grad**2
            m_hat = m / (1 - beta1**self.n_steps)
            v_hat = v / (1 - beta2**self.n_steps)
            params[name] -= self.learning_rate * m_hat / (np.sqrt(v_hat) + _estimator.ADAM_EPS)


def sparse_posteriors(rng, n, K, share=0.2, dtype=np.float64):
    """(n, K) non-negative posteriors with about ``share`` of them non-zero, one column
    and one row all zero, and one row with a single non-zero."""
    H = rng.uniform(0.01, 1.0, size=(n, K)) * (rng.uniform(size=(n, K)) < share)
    H[:, 2], H[5], H[6] = 0.0, 0.0, 0.0
    H[6, K - 1] = 0.5
    return H.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_support_lists_each_codewords_nonzero_rows(dtype):
    rng = np.random.default_rng(1)
    H = sparse_posteriors(rng, 40, 7, dtype=dtype)
    rows, bounds = _factorised._support(H)
    assert bounds.shape == (8,) and bounds[0] == 0 and bounds[-1] == np.count_nonzero(H)
    for k in range(7):
        np.testing.assert_array_equal(rows[bounds[k] : bounds[k + 1]], np.flatnonzero(H[:, k]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_by_component_equals_the_loop_bit_for_bit(dtype):
    """The same operations per codeword (gather, GEMM, scale, add in codeword order)
    on reused buffers: identical to the per-codeword flatnonzero loop, with or
    without a precomputed support."""
    rng = np.random.default_rng(2)
    n, d, K, m = 57, 5, 9, 6
    X = rng.normal(size=(n, d)).astype(dtype)
    H = sparse_posteriors(rng, n, K, dtype=dtype)
    W = rng.normal(size=(K * d, m)).astype(dtype)
    G = rng.normal(size=(n, m)).astype(dtype)
    pairs = _factorised._Pairs(X, H)
    expected = reference_by_component(X, H, W)
    np.testing.assert_array_equal(_factorised._by_component(X, H, W), expected)
    np.testing.assert_array_equal(_factorised._by_component(X, H, W, pairs), expected)
    expected_t = reference_by_component_transposed(X, H, G)
    np.testing.assert_array_equal(_factorised._by_component_transposed(X, H, G), expected_t)
    np.testing.assert_array_equal(_factorised._by_component_transposed(X, H, G, pairs), expected_t)
    # All posteriors zero: nothing projected.
    zero = np.zeros_like(H)
    assert not _factorised._by_component(X, zero, W).any()
    assert not _factorised._by_component_transposed(X, zero, G).any()


def test_gather_takes_the_images_rows_in_order():
    sizes = np.array([3, 1, 4, 2, 5])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    X = np.arange(offsets[-1] * 2, dtype=float).reshape(-1, 2)
    H = -X[:, :1]
    for images in ([4, 0, 2], [1, 2, 3], [3], [0, 1, 2, 3, 4], [2, 1]):
        images = np.array(images)
        rows = np.concatenate([np.arange(offsets[j], offsets[j + 1]) for j in images])
        Xg, Hg, got_sizes = _factorised._gather(X, H, offsets, images)
        np.testing.assert_array_equal(Xg, X[rows])
        np.testing.assert_array_equal(Hg, H[rows])
        np.testing.assert_array_equal(got_sizes, sizes[images])


@pytest.mark.parametrize("lift_elements", [2**21, 60])
@pytest.mark.parametrize("share", [0.2, 1.0])
def test_pool_and_its_gradient_equal_the_per_image_lifted_definition(share, lift_elements, monkeypatch):
    """The model's z and parameter gradients of a batch of images (sparse posteriors:
    one GEMM per codeword over the chunk; dense: the lifted GEMM), in one chunk or in
    several, against the definition image by image on the lifted rows, in float64
    (1e-12) and float32 (1e-4 relative to the largest value)."""
    monkeypatch.setattr(_factorised, "LIFT_ELEMENTS", lift_elements)
    rng = np.random.default_rng(3)
    d, K, R = 4, 8, 3
    sizes = rng.integers(2, 9, size=12)
    features = [rng.normal(size=(n, d)) for n in sizes]
    posteriors = [sparse_posteriors(rng, max(n, 7), K, share)[:n] for n in sizes]
    X, H, offsets = _features._check_images(features, posteriors)
    assert _factorised._mostly_zero(H) == (share < 1)
    params = {"Wu": rng.normal(size=(K * d, R)), "Wv": rng.normal(size=(K * d, R))}
    images = np.array([7, 0, 3, 11, 4, 5, 9])
    G = rng.normal(size=(images.size, R))
    z_ref, grads_ref = reference_pool(params, X, H, offsets, images, G, 1.3)
    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 1e-4)):
        model = _factorised._Model(params, dtype, 1.3)
        Xd, Hd = X.astype(dtype), H.astype(dtype)
        z, kept = model.pool(Xd, Hd, offsets, images, keep=True)
        assert (len(kept) > 1) == (lift_elements < 1000)
        grads = model.pool_backward(Xd, Hd, offsets, kept, G)
        assert z.dtype == dtype
        np.testing.assert_allclose(z, z_ref, rtol=0, atol=rtol * np.abs(z_ref).max())
        for name in ("Wu", "Wv"):
            np.testing.assert_allclose(grads[name], grads_ref[name], rtol=0, atol=rtol * np.abs(grads_ref[name]).max())
        np.testing.assert_array_equal(model.pool(Xd, Hd, offsets, images), z)


def test_adam_equals_the_step_with_temporaries_bit_for_bit():
    """Adam on scratch arrays performs the same operations in the same order: after
    several steps of varied gradients (zeros included) the parameters and moments are
    identical to the reference's."""
    rng = np.random.default_rng(4)
    start = {"Wu": rng.normal(size=(20, 3)), "A": rng.normal(size=(4, 2))}
    fast, slow = ({name: value.copy() for name, value in start.items()} for _ in range(2))
    adam, reference = _estimator._Adam(fast, 0.05), ReferenceAdam(slow, 0.05)
    for step in range(5):
        grads = {name: rng.normal(scale=10.0**-step, size=value.shape) for name, value in start.items()}
        grads["Wu"][0] = 0.0
        adam.step(fast, grads)
        reference.step(slow, grads)
        for name in start:
            np.testing.assert_array_equal(fast[name], slow[name])
            np.testing.assert_array_equal(adam.moments[name][0], reference.moments[name][0])
            np.testing.assert_array_equal(adam.moments[name][1], reference.moments[name][1])
