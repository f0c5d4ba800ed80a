"""Joint Codebook Factorization: formulas against explicit Kronecker products and loops,
analytic gradients against finite differences, and a toy problem it must learn."""

import time

import numpy as np
import pytest

from ndir import jcf
from ndir.codebooks import fit_descriptor_pca, fit_fisher_codebook
from ndir.encoding import gmm_posteriors
from ndir.evaluation import holidays_map, recall_at_k
from ndir.jcf import (
    JCF,
    _estimator,
    _factorised,
    _features,
    _normalisation,
    _second_order,
    codebook_features,
    codebook_second_order_pooling,
    factorised_pooling,
    hardest_negative_triplet_loss,
    pooling_madds,
    second_order_gram,
    second_order_pooling,
    signed_sqrt,
    subsample_descriptors,
)


def softmax(logits):
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def random_images(rng, n_images, d, K, n_min=3, n_max=7):
    sizes = rng.integers(n_min, n_max + 1, size=n_images)
    features = [rng.normal(size=(n, d)) for n in sizes]
    posteriors = [softmax(2 * rng.normal(size=(n, K))) for n in sizes]
    return features, posteriors


def vec(U_i):
    """vec(U_i): the K columns of U_i (d x K) stacked, so vec(U_i)[k d + a] = U_i[a, k],
    the order of np.kron(h, x)[k d + a] = h_k x_a."""
    return U_i.ravel(order="F")


# --------------------------------------------------------------------------- the formulas


def test_factorised_form_equals_explicit_kronecker_projection():
    rng = np.random.default_rng(0)
    n, d, K, R = 5, 3, 2, 4
    X = rng.normal(size=(n, d))
    H = softmax(rng.normal(size=(n, K)))
    U, V = rng.normal(size=(R, d, K)), rng.normal(size=(R, d, K))
    # The poster: z_i = <w_i, mean_x h ⊗ x ⊗ h ⊗ x> with w_i = p_i ⊗ q_i, p_i = vec(U_i).
    y = np.mean([np.kron(np.kron(h, x), np.kron(h, x)) for x, h in zip(X, H)], axis=0)
    expected = np.array([np.kron(vec(U[i]), vec(V[i])) @ y for i in range(R)])
    np.testing.assert_allclose(factorised_pooling(X, H, U, V), expected, rtol=1e-12)
    # The vec order is the one of the poster's p_i = sum_j e_j ⊗ u_ij (u_ij: column j of U_i).
    p_0 = sum(np.kron(np.eye(K)[j], U[0][:, j]) for j in range(K))
    np.testing.assert_array_equal(vec(U[0]), p_0)


def test_without_codebook_is_bilinear_pooling():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(6, 4))
    U, V = rng.normal(size=(3, 4, 1)), rng.normal(size=(3, 4, 1))
    expected = [np.mean((X @ U[i, :, 0]) * (X @ V[i, :, 0])) for i in range(3)]
    np.testing.assert_allclose(factorised_pooling(X, None, U, V), expected, rtol=1e-12)


def test_shared_form_equals_full_form_with_composed_projectors():
    rng = np.random.default_rng(2)
    n, d, K, k, R = 7, 4, 5, 2, 3
    X, H = rng.normal(size=(n, d)), softmax(rng.normal(size=(n, K)))
    U_t, V_t = rng.normal(size=(R, d, k)), rng.normal(size=(R, d, k))
    A, B = rng.normal(size=(K, k)), rng.normal(size=(K, k))
    shared = factorised_pooling(X, H, U_t, V_t, A, B)
    # z_i = (h^T A Ũ_i^T x)(h^T B Ṽ_i^T x) written directly, and with U_i = Ũ_i A^T.
    direct = [np.mean([(h @ A @ U_t[i].T @ x) * (h @ B @ V_t[i].T @ x) for x, h in zip(X, H)]) for i in range(R)]
    np.testing.assert_allclose(shared, direct, rtol=1e-12)
    np.testing.assert_allclose(shared, factorised_pooling(X, H, U_t @ A.T, V_t @ B.T), rtol=1e-12)


def test_estimator_transform_is_normalised_factorised_pooling():
    rng = np.random.default_rng(3)
    features, posteriors = random_images(rng, 8, 3, 4)
    groups = np.repeat(np.arange(4), 2)
    for n_shared, signed in ((None, True), (2, True), (2, False)):
        model = JCF(
            n_components=5, n_shared=n_shared, signed_sqrt=signed, n_epochs=1, holdout_fraction=0, random_state=0
        )
        Y = model.fit(features, posteriors, groups).transform(features, posteriors)
        U, V = model.projectors_
        z = np.array([factorised_pooling(f, p, U, V) for f, p in zip(features, posteriors)])
        s = signed_sqrt(z, model.sqrt_eps) if signed else z
        np.testing.assert_allclose(Y, s / np.linalg.norm(s, axis=1, keepdims=True), rtol=1e-10)
        np.testing.assert_allclose(model.pool(features, posteriors), z, rtol=1e-10)
    # 2 (K k + R d k) parameters for JCF-5-2, 2 R d K for JCF-5.
    assert model.n_parameters_ == 2 * (4 * 2 + 5 * 3 * 2)
    full = JCF(n_components=5, n_epochs=0, random_state=0).fit(features, posteriors, groups)
    assert full.n_parameters_ == 2 * 5 * 3 * 4


@pytest.mark.parametrize("n_shared", [None, 2])
def test_initialisation_gives_unit_rms_pooled_features(n_shared):
    """n_epochs = 0 returns the random initialisation with U and V rescaled by one
    common factor (sqrt of it each, z being bilinear in them) so that the training z
    have unit RMS, as the docstring promises; without hold-out every image trains."""
    rng = np.random.default_rng(3)
    features, posteriors = random_images(rng, 8, 3, 4)
    groups = np.repeat(np.arange(4), 2)
    model = JCF(n_components=5, n_shared=n_shared, n_epochs=0, holdout_fraction=0, random_state=0)
    z = model.fit(features, posteriors, groups).pool(features, posteriors)
    assert model.n_holdout_images_ == 0 and model.best_epoch_ == 0
    assert np.sqrt(np.mean(z**2)) == pytest.approx(1.0, rel=1e-9)


def plain_second_order(features, posteriors, eps=0.0):
    """C_k = mean_x h_k x x^T by loops; signed sqrt (smoothed by ``eps``:
    sign(c) (sqrt(|c| + eps) - sqrt(eps))); triangle with sqrt(2) off-diagonal; L2."""
    out = []
    for X, H in zip(features, posteriors):
        n, d = X.shape
        K = H.shape[1]
        vector = []
        for k in range(K):
            C = np.zeros((d, d))
            for t in range(n):
                for a in range(d):
                    for b in range(d):
                        C[a, b] += H[t, k] * X[t, a] * X[t, b] / n
            C = np.sign(C) * (np.sqrt(np.abs(C) + eps) - np.sqrt(eps))
            for a in range(d):
                for b in range(a, d):
                    vector.append(C[a, b] if a == b else np.sqrt(2) * C[a, b])
        vector = np.array(vector)
        out.append(vector / np.linalg.norm(vector))
    return np.array(out)


def test_second_order_baselines_match_loops():
    rng = np.random.default_rng(4)
    features, posteriors = random_images(rng, 3, 4, 3)
    ones = [np.ones((len(X), 1)) for X in features]
    np.testing.assert_allclose(second_order_pooling(features), plain_second_order(features, ones), atol=1e-6)
    np.testing.assert_allclose(
        codebook_second_order_pooling(features, posteriors), plain_second_order(features, posteriors), atol=1e-6
    )
    assert second_order_pooling(features).shape == (3, 4 * 5 // 2)
    assert codebook_second_order_pooling(features, posteriors).shape == (3, 3 * 4 * 5 // 2)


@pytest.mark.parametrize("block", [None, 2 * 10 * 5])
def test_second_order_gram_is_the_gram_of_the_signatures(block, monkeypatch):
    """Accumulated over blocks of codewords (here also 2 codewords of 5 images at a
    time, 3 blocks for K = 5), the cosines of the baselines' signatures."""
    if block is not None:
        monkeypatch.setattr(_second_order, "GRAM_BLOCK_ELEMENTS", block)
    rng = np.random.default_rng(6)
    features, posteriors = random_images(rng, 5, 4, 5)
    for Y, gram in (
        (second_order_pooling(features), second_order_gram(features)),
        (codebook_second_order_pooling(features, posteriors), second_order_gram(features, posteriors)),
    ):
        np.testing.assert_allclose(gram, Y.astype(np.float64) @ Y.T.astype(np.float64), atol=1e-6)
        np.testing.assert_allclose(np.diag(gram), 1.0)


def test_triangle_weights_give_frobenius_product():
    rng = np.random.default_rng(5)
    A, B = rng.normal(size=(2, 5, 5))
    A, B = A + A.T, B + B.T
    rows, cols, weights = jcf.triangle_layout(5)
    assert (weights * A[rows, cols]) @ (weights * B[rows, cols]) == pytest.approx(np.sum(A * B))


def test_second_order_baselines_with_smoothed_square_root_match_loops():
    """sqrt_eps > 0: every entry c of C (C_k) goes through sign(c)(sqrt(|c| + eps) -
    sqrt(eps)) before the sqrt(2) weights and the L2 normalisation, in the signatures
    and in the Gram matrix accumulated without them (eps = 0.05, of the order of the
    entries here, so that the smoothing changes the result visibly)."""
    rng = np.random.default_rng(14)
    features, posteriors = random_images(rng, 4, 3, 2)
    ones = [np.ones((len(X), 1)) for X in features]
    eps = 0.05
    plain = plain_second_order(features, ones, eps)
    codebook = plain_second_order(features, posteriors, eps)
    np.testing.assert_allclose(second_order_pooling(features, sqrt_eps=eps), plain, atol=1e-6)
    np.testing.assert_allclose(codebook_second_order_pooling(features, posteriors, sqrt_eps=eps), codebook, atol=1e-6)
    np.testing.assert_allclose(second_order_gram(features, sqrt_eps=eps), plain @ plain.T, atol=1e-6)
    np.testing.assert_allclose(second_order_gram(features, posteriors, sqrt_eps=eps), codebook @ codebook.T, atol=1e-6)
    assert np.abs(plain - plain_second_order(features, ones)).max() > 1e-2  # eps matters


def test_second_order_gram_of_a_zero_signature_is_zero():
    """An image whose features are all zero has C = 0, a zero signature: its row and
    column of the Gram matrix, diagonal included, are 0 (as documented), not NaN; the
    other images' cosines are unchanged."""
    rng = np.random.default_rng(15)
    features, posteriors = random_images(rng, 4, 3, 2)
    features[2] = np.zeros_like(features[2])
    others = [0, 1, 3]
    kept = [features[i] for i in others]
    for gram, Y in (
        (second_order_gram(features), plain_second_order(kept, [np.ones((len(X), 1)) for X in kept])),
        (second_order_gram(features, posteriors), plain_second_order(kept, [posteriors[i] for i in others])),
    ):
        assert np.all(np.isfinite(gram))
        np.testing.assert_array_equal(gram[2], 0.0)
        np.testing.assert_array_equal(gram[:, 2], 0.0)
        np.testing.assert_allclose(gram[np.ix_(others, others)], Y @ Y.T, atol=1e-9)


# --------------------------------------------------------------------------- gradients


def central_difference(f, x, h=1e-6):
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        old = x[index]
        x[index] = old + h
        up = f()
        x[index] = old - h
        down = f()
        x[index] = old
        grad[index] = (up - down) / (2 * h)
    return grad


@pytest.mark.parametrize("one_codeword", [False, True])
@pytest.mark.parametrize("shared", [False, True])
def test_pooling_gradient(shared, one_codeword, monkeypatch):
    """Against central differences; with ``one_codeword`` each descriptor keeps its
    largest posterior only (a quarter of H non-zero), so the unshared projections run
    codeword by codeword (:data:`~ndir.jcf._factorised.SPARSE_POSTERIORS_MAX`)."""
    # A small lift budget: the images are split over several chunks.
    monkeypatch.setattr(_factorised, "LIFT_ELEMENTS", 40)
    rng = np.random.default_rng(6)
    d, K, k, R = 3, 4, 2, 3
    features, posteriors = random_images(rng, 5, d, K)
    if one_codeword:
        posteriors = [np.where(P == P.max(axis=1, keepdims=True), P, 0.0) for P in posteriors]
    X, H, offsets = _features._check_images(features, posteriors)
    assert _factorised._mostly_zero(H) == one_codeword
    c = k if shared else K
    params = {"Wu": rng.normal(size=(c * d, R)), "Wv": rng.normal(size=(c * d, R))}
    if shared:
        params["A"], params["B"] = rng.normal(size=(K, k)), rng.normal(size=(K, k))
    images = np.array([4, 0, 2, 3])
    G = rng.normal(size=(images.size, R))  # L = <G, z>

    def objective():
        return float(np.sum(G * _factorised._Model(params, np.float64, 1.7).pool(X, H, offsets, images)))

    model = _factorised._Model(params, np.float64, 1.7)
    _, kept = model.pool(X, H, offsets, images, keep=True)
    assert len(kept) > 1
    analytic = model.pool_backward(X, H, offsets, kept, G)
    assert set(analytic) == set(params)
    for name in params:
        np.testing.assert_allclose(analytic[name], central_difference(objective, params[name]), rtol=1e-6, atol=1e-8)


def test_projections_by_codeword_equal_the_lifted_products():
    """Codeword by codeword over the non-zero posteriors (one column of H all zero, one
    row all zero) against the lifted rows ``h ⊗ x`` times W, and their transpose times G."""
    rng = np.random.default_rng(12)
    n, d, K, m = 30, 5, 6, 4
    X = rng.normal(size=(n, d))
    H = rng.uniform(size=(n, K)) * (rng.uniform(size=(n, K)) < 0.2)
    H[:, 3], H[7] = 0.0, 0.0
    W, G = rng.normal(size=(K * d, m)), rng.normal(size=(n, m))
    lifted = np.stack([np.kron(h, x) for h, x in zip(H, X)])
    np.testing.assert_allclose(_factorised._by_component(X, H, W), lifted @ W, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_factorised._by_component_transposed(X, H, G), lifted.T @ G, rtol=1e-12, atol=1e-12)


def test_posteriors_under_the_threshold_count_as_zero():
    """``posterior_threshold``: the learned model pools as :func:`factorised_pooling` of
    the posteriors with those under it set to 0, and 0 keeps them all; the same model
    encodes the same images alike on either path of the projections."""
    rng = np.random.default_rng(13)
    features, posteriors = random_images(rng, 8, 3, 4)
    groups = np.repeat(np.arange(4), 2)
    for threshold in (0.0, 0.2):
        model = JCF(n_components=5, n_epochs=1, holdout_fraction=0, posterior_threshold=threshold, random_state=0)
        model.fit(features, posteriors, groups)
        U, V = model.projectors_
        kept = [np.where(P >= threshold, P, 0.0) for P in posteriors]
        assert threshold == 0.0 or sum(np.count_nonzero(P) for P in kept) < sum(P.size for P in posteriors)
        z = np.array([factorised_pooling(f, p, U, V) for f, p in zip(features, kept)])
        np.testing.assert_allclose(model.pool(features, posteriors), z, rtol=1e-10)
        # Fitted on the thresholded posteriors: the model learned from them kept whole.
        exact = JCF(n_components=5, n_epochs=1, holdout_fraction=0, posterior_threshold=0.0, random_state=0)
        np.testing.assert_allclose(exact.fit(features, kept, groups).U_, model.U_, rtol=1e-10)


@pytest.mark.parametrize(("signed", "eps"), [(True, 1e-3), (True, 0.0), (False, 0.0)])
def test_normalisation_gradient(signed, eps):
    rng = np.random.default_rng(7)
    z = rng.normal(size=(3, 4))
    G = rng.normal(size=(3, 4))

    def objective():
        return float(np.sum(G * _normalisation._normalise(z, eps, signed)))

    analytic = _normalisation._normalise_backward(z, G, eps, signed)
    np.testing.assert_allclose(analytic, central_difference(objective, z), rtol=1e-6, atol=1e-8)


def test_smoothed_signed_sqrt():
    z = np.array([-4.0, -1e-9, 0.0, 1e-9, 4.0])
    np.testing.assert_allclose(signed_sqrt(z), [-2, -np.sqrt(1e-9), 0, np.sqrt(1e-9), 2])
    smooth = signed_sqrt(z, 1e-4)
    assert smooth[2] == 0.0 and np.all(np.diff(smooth) > 0)
    assert np.max(np.abs(smooth - signed_sqrt(z))) <= 1e-2 + 1e-12  # at most sqrt(eps) apart
    assert _normalisation._signed_sqrt_derivative(0.0, 1e-4) == pytest.approx(50.0)


def test_triplet_loss_gradient_and_value():
    rng = np.random.default_rng(8)
    groups = np.array([0, 0, 0, 1, 1, 2, 3])
    Y = rng.normal(size=(7, 3))
    loss, grad, n_active, n_triplets = hardest_negative_triplet_loss(Y, groups, margin=0.5)
    # Brute force: every ordered positive pair, the anchor's best-scoring negative.
    S = Y @ Y.T
    hinges = []
    for a in range(7):
        negatives = [l for l in range(7) if groups[l] != groups[a]]
        worst = max(S[a, l] for l in negatives)
        hinges += [0.5 - S[a, p] + worst for p in range(7) if p != a and groups[p] == groups[a]]
    hinges = np.array(hinges)
    assert n_triplets == 8 and n_active == np.sum(hinges > 0)
    assert loss == pytest.approx(np.maximum(hinges, 0).mean())
    assert 0 < n_active < n_triplets and np.min(np.abs(hinges)) > 1e-3  # away from the kinks

    def objective():
        return hardest_negative_triplet_loss(Y, groups, 0.5)[0]

    np.testing.assert_allclose(grad, central_difference(objective, Y), rtol=1e-6, atol=1e-8)


def test_triplet_loss_tied_negatives_lowest_row_wins_hand_worked():
    """Rows 2 and 3 (groups 1 and 2, no positives: negatives only) are the same vector,
    so every anchor's hardest negative is a tie: row 2, the lowest, wins and takes the
    whole gradient; row 3 gets none. y0 = (1, 0), y1 = (.6, .8), y2 = y3 = (.8, .6),
    margin .5. Anchor 0 (positive 1): .5 - .6 + .8 = .7; anchor 1 (positive 0):
    .5 - .6 + .96 = .86; loss (.7 + .86) / 2 = .78. With w = 1/2, D[0,1] = D[1,0] = -w,
    D[0,2] = D[1,2] = +w; grad = (D + D^T) Y: row 0 -y1 + y2/2 = (-.2, -.5), row 1
    -y0 + y2/2 = (-.6, .3), row 2 (y0 + y1)/2 = (.8, .4), row 3 zero."""
    Y = np.array([[1.0, 0.0], [0.6, 0.8], [0.8, 0.6], [0.8, 0.6]])
    groups = np.array([0, 0, 1, 2])
    loss, grad, n_active, n_triplets = hardest_negative_triplet_loss(Y, groups, margin=0.5)
    assert (n_active, n_triplets) == (2, 2)
    assert loss == pytest.approx(0.78, abs=1e-12)
    np.testing.assert_allclose(grad, [[-0.2, -0.5], [-0.6, 0.3], [0.8, 0.4], [0.0, 0.0]], atol=1e-12)
    # The tie in the other order (rows 2 and 3 swapped between the groups): row 2 still wins.
    loss, grad, _, _ = hardest_negative_triplet_loss(Y, np.array([0, 0, 2, 1]), margin=0.5)
    assert loss == pytest.approx(0.78, abs=1e-12) and not grad[3].any() and grad[2].any()


def test_triplet_loss_without_negatives_or_positives_hand_worked():
    """A batch of one group: no anchor has a negative, so there is no triplet: loss 0,
    zero gradient, counts 0. An image alone in its group has no positive: it is never
    an anchor, only a negative. Groups [0, 0, 1]: anchors 0 and 1, both with row 2 as
    their only (hence hardest) negative; y = (1, 0), (0, 1), (1, 0): anchor 0 hinge
    .1 - 0 + 1 = 1.1, anchor 1 hinge .1 - 0 + 0 = .1: loss (1.1 + .1) / 2 = .6."""
    rng = np.random.default_rng(16)
    Y = rng.normal(size=(3, 4))
    loss, grad, n_active, n_triplets = hardest_negative_triplet_loss(Y, np.zeros(3, dtype=int), margin=0.3)
    assert (loss, n_active, n_triplets) == (0.0, 0, 0)
    assert grad.shape == Y.shape and not grad.any()
    Y = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    loss, grad, n_active, n_triplets = hardest_negative_triplet_loss(Y, np.array([0, 0, 1]), margin=0.1)
    assert (n_active, n_triplets) == (2, 2) and loss == pytest.approx(0.6, abs=1e-12)
    # D[0,1] = D[1,0] = -1/2, D[0,2] = D[1,2] = +1/2: grad row 0 = -y1 + y2/2 = (.5, -1),
    # row 1 = -y0 + y2/2 = (-.5, 0), row 2 = (y0 + y1)/2 = (.5, .5).
    np.testing.assert_allclose(grad, [[0.5, -1.0], [-0.5, 0.0], [0.5, 0.5]], atol=1e-12)


@pytest.mark.parametrize("n_shared", [None, 2])
def test_adam_steps_hand_computed(n_shared, monkeypatch):
    """Two full-batch Adam steps (n_epochs = 2, batch_groups = None, no hold-out: the
    last epoch is kept) with the loss-and-gradient function replaced by fixed
    gradients g1 then g2 per parameter. Adam (beta1 = .9, beta2 = .999, eps = 1e-8),
    bias-corrected, by hand: step 1 moves by lr * g1 / (|g1| + eps) (m_hat = g1,
    v_hat = g1^2); step 2 by lr * m_hat / (sqrt(v_hat) + eps) with
    m_hat = (.09 g1 + .1 g2) / (1 - .9^2), v_hat = (.000999 g1^2 + .001 g2^2) / (1 - .999^2).
    The parameters passed to the second call, and the fitted U_, V_ (the columns of
    Wu, Wv times sqrt(scale), scale also as passed), A_ and B_ must be those."""
    rng = np.random.default_rng(17)
    features, posteriors = random_images(rng, 6, 3, 4)
    groups = np.repeat(np.arange(3), 2)
    lr = 0.05
    calls = []

    def gradients(params, step):
        # Fixed, distinct gradients: a sign pattern and a magnitude varying per entry.
        out = {}
        for index, (name, value) in enumerate(sorted(params.items())):
            ramp = np.linspace(-2.0, 3.0, value.size).reshape(value.shape) + 0.25 * (index + 1)
            out[name] = ramp if step == 1 else np.cos(3 * ramp) - 0.5
        return out

    def fixed(self, params, X, H, offsets, images, batch_groups, scale=1.0):
        calls.append(({name: value.copy() for name, value in params.items()}, scale))
        return 1.0, gradients(params, len(calls)), 1, 1

    monkeypatch.setattr(JCF, "_loss_and_gradient", fixed)
    model = JCF(
        n_components=2,
        n_shared=n_shared,
        learning_rate=lr,
        n_epochs=2,
        batch_groups=None,
        holdout_fraction=0,
        random_state=0,
    ).fit(features, posteriors, groups)
    assert len(calls) == 2 and model.best_epoch_ == 2
    start, scale = calls[0]
    after_one, scale_two = calls[1]
    assert scale_two == scale
    g1, g2 = gradients(start, 1), gradients(start, 2)
    expected_one, expected_two = {}, {}
    for name, theta in start.items():
        a, b = g1[name], g2[name]
        expected_one[name] = theta - lr * a / (np.abs(a) + 1e-8)
        m_hat = (0.9 * 0.1 * a + 0.1 * b) / (1 - 0.9**2)
        v_hat = (0.999 * 0.001 * a**2 + 0.001 * b**2) / (1 - 0.999**2)
        expected_two[name] = expected_one[name] - lr * m_hat / (np.sqrt(v_hat) + 1e-8)
    for name in start:
        np.testing.assert_allclose(after_one[name], expected_one[name], rtol=1e-12, atol=1e-14)
    root = np.sqrt(scale)
    np.testing.assert_allclose(
        model.U_, _factorised._from_columns(expected_two["Wu"] * root, 3), rtol=1e-12, atol=1e-14
    )
    np.testing.assert_allclose(
        model.V_, _factorised._from_columns(expected_two["Wv"] * root, 3), rtol=1e-12, atol=1e-14
    )
    if n_shared is None:
        assert model.A_ is None and model.B_ is None
    else:
        np.testing.assert_allclose(model.A_, expected_two["A"], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(model.B_, expected_two["B"], rtol=1e-12, atol=1e-14)
    # The second step is not a sign step: it differs from lr * sign(g2) somewhere.
    assert not np.allclose(expected_one["Wu"] - expected_two["Wu"], lr * np.sign(g2["Wu"]))


@pytest.mark.parametrize("n_shared", [None, 2])
def test_end_to_end_gradient(n_shared):
    rng = np.random.default_rng(9)
    d, K, R = 3, 3, 4
    features, posteriors = random_images(rng, 6, d, K)
    groups = np.array([0, 0, 1, 1, 2, 2])
    X, H, offsets = _features._check_images(features, posteriors)
    model = JCF(n_components=R, n_shared=n_shared, sqrt_eps=1e-2, margin=1.0)
    params = model._init_params(d, K, np.random.RandomState(0))
    images = np.arange(6)
    loss, analytic, n_active, _ = model._loss_and_gradient(params, X, H, offsets, images, groups, scale=0.3)
    assert loss > 0 and n_active > 0

    def objective():
        return model._loss_and_gradient(params, X, H, offsets, images, groups, scale=0.3)[0]

    for name in params:
        np.testing.assert_allclose(analytic[name], central_difference(objective, params[name]), rtol=1e-5, atol=1e-8)


# --------------------------------------------------------------------------- learning


def toy_problem(rng, n_groups, n_per_group=3, n_local=60, d=8, K=3):
    """Groups told apart by the covariance of 3 informative dimensions (a random mixing
    per group), hidden under 5 nuisance dimensions of about 3x larger, image-specific
    variance which dominate the random initial projections. Posteriors: a softmax of
    random codeword scores. Second-order pooling of the 3 informative dimensions alone
    retrieves a near duplicate first for over 90 % of the queries."""
    features, posteriors, groups = [], [], []
    centres = rng.normal(size=(K, d))
    for g in range(n_groups):
        mixing = rng.normal(size=(3, 3))
        for _ in range(n_per_group):
            informative = rng.normal(size=(n_local, 3)) @ mixing
            nuisance = rng.normal(size=(n_local, d - 3)) * 3 * rng.uniform(0.2, 1.5, size=d - 3)
            X = np.hstack([informative, nuisance])
            features.append(X.astype(np.float32))
            posteriors.append(softmax(X @ centres.T / 4).astype(np.float32))
            groups.append(g)
    return features, posteriors, np.array(groups)


@pytest.fixture(scope="module")
def toy():
    rng = np.random.default_rng(10)
    return toy_problem(rng, 40), toy_problem(rng, 30)


def test_toy_problem_is_solvable(toy):
    _, (features, _, groups) = toy
    oracle = recall_at_k(second_order_pooling([X[:, :3] for X in features]), groups, ks=(1,))[1]
    everything = recall_at_k(second_order_pooling(features), groups, ks=(1,))[1]
    assert oracle > 0.9 and everything < 0.3


@pytest.mark.parametrize("n_shared", [None, 2])
def test_learning_raises_recall(toy, n_shared):
    (features, posteriors, groups), (test_features, test_posteriors, test_groups) = toy
    settings = dict(
        n_components=8, n_shared=n_shared, n_epochs=40, n_iter_no_change=None, batch_groups=8, learning_rate=0.1,
        random_state=0,
    )  # fmt: skip
    start = JCF(**settings | {"n_epochs": 0}).fit(features, posteriors, groups)
    model = JCF(**settings).fit(features, posteriors, groups)
    history = model.history_
    assert len(history) == 41 and history[0]["epoch"] == 0
    # The training loss falls, the hold-out mAP rises, and so does the Recall@1 of unseen groups.
    assert history[-1]["loss"] < 0.25 * history[0]["loss"]
    assert model.holdout_map_ > history[0]["holdout_map"] + 0.3
    before = recall_at_k(start.transform(test_features, test_posteriors), test_groups, ks=(1,))[1]
    after = recall_at_k(model.transform(test_features, test_posteriors), test_groups, ks=(1,))[1]
    assert after > before + 0.3, (before, after)
    # The kept epoch is the first with the best hold-out mAP.
    maps = [h["holdout_map"] for h in history]
    assert model.best_epoch_ == int(np.argmax(maps)) and model.holdout_map_ == max(maps)
    assert history[model.best_epoch_]["holdout_recall_at_1"] > history[0]["holdout_recall_at_1"]


@pytest.mark.parametrize("patience", ["one epoch", "the longest dip"])
def test_training_stops_once_the_holdout_stops_improving(toy, patience):
    """With ``n_iter_no_change`` = p, training stops at the first epoch p epochs after
    the best so far, with the history of the full run up to there, and keeps the model
    that a run of exactly ``best_epoch_`` epochs keeps. p: 1, and the longest run of
    epochs below the best so far in 40 epochs (read from the full run, whose bits follow
    the BLAS kernel), at which counting from epoch 0 instead of the best stops sooner."""
    (features, posteriors, groups), _ = toy
    settings = dict(n_components=8, n_epochs=40, batch_groups=8, learning_rate=0.1, random_state=0)
    full = JCF(**settings, n_iter_no_change=None).fit(features, posteriors, groups)
    maps = np.array([h["holdout_map"] for h in full.history_])
    best_so_far = np.array([int(np.argmax(maps[: e + 1])) for e in range(maps.size)])
    since_best = np.arange(maps.size) - best_so_far
    patience = 1 if patience == "one epoch" else int(since_best.max())
    assert patience >= 1, "the toy run should let the hold-out stall"
    stop = int(np.flatnonzero(since_best >= patience)[0])
    assert stop < 40, "the toy run should let the hold-out stall"
    patient = JCF(**settings, n_iter_no_change=patience).fit(features, posteriors, groups)
    assert patient.n_iter_ == stop and len(patient.history_) == stop + 1
    drop_seconds = [{key: value for key, value in h.items() if key != "seconds"} for h in full.history_]
    assert [{key: value for key, value in h.items() if key != "seconds"} for h in patient.history_] == (
        drop_seconds[: stop + 1]
    )
    assert patient.best_epoch_ == best_so_far[stop] and patient.holdout_map_ == maps[best_so_far[stop]]
    exact = JCF(**settings | {"n_epochs": patient.best_epoch_}, n_iter_no_change=None).fit(features, posteriors, groups)
    np.testing.assert_array_equal(patient.U_, exact.U_)
    np.testing.assert_array_equal(patient.V_, exact.V_)


def test_deterministic_for_a_seed(toy):
    features, posteriors, groups = toy[0]
    settings = dict(n_components=4, n_shared=2, n_epochs=3, batch_groups=10, random_state=7)
    first = JCF(**settings).fit(features, posteriors, groups)
    second = JCF(**settings).fit(features, posteriors, groups)
    for name in ("U_", "V_", "A_", "B_"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
    strip = [{key: value for key, value in h.items() if key != "seconds"} for h in first.history_]
    assert strip == [{key: value for key, value in h.items() if key != "seconds"} for h in second.history_]
    other = JCF(**settings | {"random_state": 8}).fit(features, posteriors, groups)
    assert not np.array_equal(first.U_, other.U_)


def test_holdout_shares_no_photo_with_training():
    """The case of tests/test_data.py, hand-worked there: six groups of two images,
    groups 0-1 cut from photo a, 2-3 from b, 4 from c, 5 from d; seed 1 holds out
    groups 1 and 2 (a and b straddle), by photo groups 4 and 5."""
    rng = np.random.default_rng(12)
    features, posteriors = random_images(rng, 12, 3, 2)
    groups = np.repeat(np.arange(6), 2)
    photos = np.repeat(["a", "a", "b", "b", "c", "d"], 2)
    settings = dict(n_components=2, n_epochs=1, batch_groups=2, holdout_fraction=1 / 3, random_state=1)
    plain = JCF(**settings).fit(features, posteriors, groups)
    by_photo = JCF(**settings).fit(features, posteriors, groups, together=photos)
    assert plain.holdout_groups_.tolist() == [1, 2] and by_photo.holdout_groups_.tolist() == [4, 5]
    assert by_photo.n_holdout_images_ == 4


# --------------------------------------------------------------------------- inputs


def test_bad_parameters_name_the_parameter():
    rng = np.random.default_rng(11)
    features, posteriors = random_images(rng, 4, 3, 2)
    groups = np.array([0, 0, 1, 1])
    with pytest.raises(ValueError, match="n_components"):
        JCF(n_components=0).fit(features, posteriors, groups)
    with pytest.raises(ValueError, match="n_shared"):
        JCF(n_shared=3).fit(features, posteriors, groups)  # k = 3 > K = 2
    with pytest.raises(ValueError, match="features"):
        JCF().fit(features[:3] + [np.ones((3, 4))], posteriors, groups)
    with pytest.raises(ValueError, match="posteriors"):
        JCF().fit(features, posteriors[:3] + [np.ones((2, 2))], groups)
    model = JCF(n_components=2, n_epochs=0, holdout_fraction=0).fit(features, posteriors, groups)
    with pytest.raises(ValueError, match="features have dimension d = 4"):
        model.transform([np.ones((3, 4))], [np.ones((3, 2))])
    with pytest.raises(ValueError, match="features have dimension d = 2"):
        model.transform([np.ones((3, 2))], [np.ones((3, 2))])
    with pytest.raises(ValueError, match="posteriors have K = 3"):
        model.transform(features[:1], [np.ones((len(features[0]), 3))])
    with pytest.raises(ValueError, match="groups"):
        JCF().fit(features, posteriors, groups[:3])


def test_subsample_is_seeded_and_independent_of_the_other_images():
    rng = np.random.default_rng(12)
    images = [rng.normal(size=(n, 2)) for n in (10, 3, 50)]
    first = subsample_descriptors(images, 5, seed=0)
    assert [len(s) for s in first] == [5, 3, 5]
    np.testing.assert_array_equal(first[1], images[1])
    again = subsample_descriptors(images, 5, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    # The last image alone, under its global key 2, draws the same rows.
    np.testing.assert_array_equal(subsample_descriptors(images[2:], 5, seed=0, keys=[2])[0], first[2])
    assert not np.array_equal(subsample_descriptors(images, 5, seed=1)[2], first[2])
    rows = [np.flatnonzero((images[2] == r).all(axis=1))[0] for r in first[2]]
    assert rows == sorted(rows)


def test_codebook_features_are_the_fisher_codebooks_view():
    rng = np.random.default_rng(13)
    sample = np.abs(rng.normal(size=(400, 16))).astype(np.float32)
    pca = fit_descriptor_pca(sample, n_components=6)
    codebook = fit_fisher_codebook(sample, n_clusters=3, pca=pca, seed=0, n_iter=3)
    X, H = codebook_features(codebook, sample[:20])
    np.testing.assert_allclose(X, pca.transform(sample[:20]), rtol=1e-6)
    np.testing.assert_allclose(H, gmm_posteriors(X, codebook.weights_, codebook.means_, codebook.variances_), rtol=1e-6)
    with pytest.raises(ValueError, match="expects"):
        codebook_features(codebook, sample[:5, :8])


def test_save_and_load(tmp_path, toy):
    features, posteriors, groups = toy[0]
    model = JCF(n_components=4, n_shared=2, n_epochs=2, random_state=0).fit(features, posteriors, groups)
    model.save(tmp_path / "jcf.npz")
    loaded = JCF.load(tmp_path / "jcf.npz")
    np.testing.assert_array_equal(loaded.transform(features, posteriors), model.transform(features, posteriors))
    assert loaded.get_params() == model.get_params() | {"random_state": None}
    assert loaded.history_ == model.history_ and loaded.best_epoch_ == model.best_epoch_
    assert model.n_holdout_images_ > 0 and loaded.n_holdout_images_ == model.n_holdout_images_
    assert np.isfinite(model.holdout_map_) and loaded.holdout_map_ == model.holdout_map_
    assert (loaded.n_features_, loaded.n_clusters_) == (model.n_features_, model.n_clusters_)
    np.testing.assert_array_equal(loaded.holdout_groups_, model.holdout_groups_)
    np.savez(tmp_path / "other.npz", kind=np.array("fv"))
    with pytest.raises(ValueError, match="not a JCF model"):
        JCF.load(tmp_path / "other.npz")


def test_pooling_madds_hand_worked():
    n, d = 10, 4  # T = 10
    assert pooling_madds(n, d, 1, n_database=5) == 10 * 10 + 10 * 5
    assert pooling_madds(n, d, 3, n_database=5) == 10 * 10 * 4 + 3 * 10 * 5
    # JCF-2 at K = 3: lift 10 * 12, projections 10 * 12 * 4, products 10 * 2; 2 per image.
    assert pooling_madds(n, d, 3, R=2, n_database=5) == 120 + 480 + 20 + 10
    # JCF-2-1: A^T h, B^T h (2 * 10 * 3), lifts (2 * 10 * 4), projections (2 * 10 * 4 * 2).
    assert pooling_madds(n, d, 3, R=2, k=1, n_database=5) == 60 + 80 + 160 + 20 + 10


# --------------------------------------------------------------------------- training bookkeeping


def test_each_epoch_visits_every_training_group_once_in_a_new_order(monkeypatch):
    """Mini-batches of ``batch_groups`` groups: every epoch covers each training group
    once, in an order drawn anew per epoch; the history sums ``n_active`` and
    ``n_triplets`` over the batches and averages their losses (batches without a
    triplet count in neither and move nothing); epoch 0 is the initial model's
    figures on all training images. Read from a spy on the loss-and-gradient call."""
    rng = np.random.default_rng(21)
    # Eight groups of two, four of one: a batch of two singletons has no triplet.
    groups = np.concatenate([np.repeat(np.arange(8), 2), np.arange(8, 12)])
    features, posteriors = random_images(rng, groups.size, 3, 2)
    original = JCF._loss_and_gradient
    calls = []

    def spy(self, params, X, H, offsets, images, batch_groups, scale=1.0):
        result = original(self, params, X, H, offsets, images, batch_groups, scale)
        calls.append(({name: value.copy() for name, value in params.items()}, np.unique(batch_groups), result))
        return result

    monkeypatch.setattr(JCF, "_loss_and_gradient", spy)
    initial = []
    original_loss = jcf.hardest_negative_triplet_loss

    def loss_spy(Y, batch, margin):
        result = original_loss(Y, batch, margin)
        if not calls and not initial:
            initial.append((np.asarray(batch).copy(), result))
        return result

    monkeypatch.setattr(_estimator, "hardest_negative_triplet_loss", loss_spy)
    n_epochs, per_batch = 4, 2
    model = JCF(
        n_components=3, n_epochs=n_epochs, batch_groups=per_batch, learning_rate=0.05, margin=1.0,
        holdout_fraction=0, random_state=3,
    ).fit(features, posteriors, groups)  # fmt: skip
    n_batches = 12 // per_batch
    assert len(calls) == n_epochs * n_batches
    epochs = [calls[e * n_batches : (e + 1) * n_batches] for e in range(n_epochs)]
    orders = []
    for epoch, batches in enumerate(epochs, start=1):
        seen = np.concatenate([batch for _, batch, _ in batches])
        assert sorted(seen.tolist()) == list(range(12)) and all(len(batch) == per_batch for _, batch, _ in batches)
        orders.append(seen.tolist())
        kept = [result for _, _, result in batches if result[3] > 0]
        record = model.history_[epoch]
        assert record["n_active"] == sum(result[2] for result in kept)
        assert record["n_triplets"] == sum(result[3] for result in kept)
        assert record["loss"] == pytest.approx(np.mean([result[0] for result in kept]), rel=1e-12)
    # A new order every epoch (a fixed order would repeat the first).
    assert len({tuple(order) for order in orders}) == n_epochs
    # A batch without triplets leaves the parameters as they were; one with an active
    # triplet moves them.
    empty = moved = 0
    for (params, batch, result), (after, _, _) in zip(calls, calls[1:]):
        same = all(np.array_equal(params[name], after[name]) for name in params)
        if result[3] == 0:
            assert same and set(batch.tolist()) <= set(range(8, 12))
            empty += 1
        elif result[2] > 0:
            assert not same
            moved += 1
    assert empty > 0 and moved > 0
    # Epoch 0: the initial model on every training image.
    batch, (loss, _, n_active, n_triplets) = initial[0]
    assert batch.size == groups.size
    assert (model.history_[0]["loss"], model.history_[0]["n_active"], model.history_[0]["n_triplets"]) == (
        loss,
        n_active,
        n_triplets,
    )
    assert n_triplets == 16  # every image of a pair is an anchor with its one positive


def test_holdout_figures_are_the_kept_models_map_and_recall_at_1_on_the_held_out_images(toy):
    """The history's hold-out mAP and Recall@1 at the kept epoch are those of the
    fitted model's signatures of the held-out images, every one a query (computed
    here by ndir.evaluation on transform's output); the case is one where Recall@1
    and Recall@2 differ, so that a Recall@k of another k shows."""
    features, posteriors, groups = toy[0]
    model = JCF(n_components=4, n_epochs=3, batch_groups=8, learning_rate=0.05, random_state=0)
    model.fit(features, posteriors, groups)
    assert model.best_epoch_ > 0
    held = np.isin(groups, model.holdout_groups_)
    assert model.n_holdout_images_ == held.sum() > 0
    Y = model.transform([f for f, h in zip(features, held) if h], [p for p, h in zip(posteriors, held) if h])
    recalls = recall_at_k(Y.astype(np.float64), groups[held], ks=(1, 2))
    assert recalls[1] < recalls[2]
    record = model.history_[model.best_epoch_]
    assert record["holdout_recall_at_1"] == pytest.approx(recalls[1], abs=1e-12)
    expected_map = holidays_map(Y.astype(np.float64), groups[held], np.ones(held.sum(), dtype=bool))
    assert record["holdout_map"] == pytest.approx(expected_map, abs=1e-6) == model.holdout_map_


def test_defaults_are_the_workflows_settings():
    """JCF() as documented: the settings of config.yaml's seeds.jcf (R = 64, margin .3,
    learning rate .05, 30 epochs of batches of 8 groups, 20 % held out, smoothing 1e-4,
    posteriors under 1e-6 dropped), the full form with the signed square root."""
    import yaml

    from .conftest import REPO

    settings = yaml.safe_load((REPO / "config.yaml").read_text())["seeds"]["jcf"]
    assert JCF().get_params() == {
        "n_components": settings["dims"][0],
        "n_shared": None,
        "signed_sqrt": True,
        "sqrt_eps": settings["sqrt_eps"],
        "margin": settings["margin"],
        "learning_rate": settings["learning_rate"],
        "n_epochs": settings["epochs"],
        "n_iter_no_change": settings["epochs_no_change"],
        "batch_groups": settings["batch_groups"],
        "holdout_fraction": settings["holdout_fraction"],
        "posterior_threshold": settings["posterior_threshold"],
        "random_state": None,
    }
    assert settings["dims"][0] == 64 and settings["batch_groups"] == 8 and settings["epochs"] == 30
    assert settings["posterior_threshold"] == 1e-6


def test_image_chunks_bound_the_lifted_rows(monkeypatch):
    """The images are processed in runs, in order, each image once, whose lifted rows
    (their features times ``width``) stay within LIFT_ELEMENTS; an image larger than
    that alone makes a run of its own."""
    monkeypatch.setattr(_factorised, "LIFT_ELEMENTS", 100)
    sizes = np.array([3, 4, 2, 30, 1, 5, 5, 2])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    images = np.array([7, 0, 1, 2, 3, 4, 5, 6])
    chunks = [chunk.tolist() for chunk in _factorised._image_chunks(offsets, images, width=10)]
    # Rows 2 3 4 | 2 | 30 | 1 5 | 5 (x 10 elements each): 90 or 60 fit in 100, 110 do not.
    assert chunks == [[7, 0, 1], [2], [3], [4, 5], [6]]
    assert np.concatenate(chunks).tolist() == images.tolist()


def test_input_boundaries_are_refused_or_accepted():
    """One local feature per image is enough, none is refused; one more posterior
    array than images is refused; a subsample of one descriptor per image is allowed,
    of none refused."""
    rng = np.random.default_rng(31)
    features, posteriors = random_images(rng, 4, 3, 2, n_min=1, n_max=1)
    groups = np.array([0, 0, 1, 1])
    JCF(n_components=2, n_epochs=1, holdout_fraction=0).fit(features, posteriors, groups)
    with pytest.raises(ValueError, match=r"images \[2\] have no local feature"):
        JCF().fit(features[:2] + [np.ones((0, 3))] + features[3:], posteriors, groups)
    with pytest.raises(ValueError, match="posteriors has 5 images but features has 4"):
        JCF().fit(features, posteriors + posteriors[:1], groups)
    assert [len(s) for s in subsample_descriptors([np.ones((5, 2)), np.ones((1, 2))], 1, seed=0)] == [1, 1]
    with pytest.raises(ValueError, match="n_per_image must be >= 1"):
        subsample_descriptors([np.ones((5, 2))], 0, seed=0)


def test_history_seconds_count_from_the_start_of_fit(toy):
    features, posteriors, groups = toy[0]
    start = time.perf_counter()
    model = JCF(n_components=2, n_epochs=3, batch_groups=10, random_state=0).fit(features, posteriors, groups)
    elapsed = time.perf_counter() - start
    seconds = [h["seconds"] for h in model.history_]
    assert 0 <= seconds[0] and all(a <= b for a, b in zip(seconds, seconds[1:])) and seconds[-1] <= elapsed


def test_training_needs_two_groups_one_of_them_a_pair():
    rng = np.random.default_rng(32)
    features, posteriors = random_images(rng, 4, 3, 2)
    for groups in ([0, 0, 0, 0], [0, 1, 2, 3]):
        with pytest.raises(ValueError, match="training needs two groups or more, one of them with two images"):
            JCF(n_epochs=1, holdout_fraction=0).fit(features, posteriors, np.array(groups))
    JCF(n_components=2, n_epochs=1, holdout_fraction=0).fit(features, posteriors, np.array([0, 0, 1, 2]))


def test_all_zero_features_train_without_a_scale():
    """z = 0 for every image (RMS 0): the initial scale stays 1 and the signatures 0."""
    features = [np.zeros((3, 2)) for _ in range(4)]
    posteriors = [np.full((3, 2), 0.5) for _ in range(4)]
    model = JCF(n_components=2, n_epochs=1, holdout_fraction=0, random_state=0)
    Y = model.fit(features, posteriors, np.array([0, 0, 1, 1])).transform(features, posteriors)
    assert np.all(Y == 0) and np.isfinite(model.U_).all() and np.abs(model.U_).max() > 0


def test_a_codebook_of_more_than_256_words():
    """K = 300 (beyond CPython's cached small integers): the posteriors' K is compared by value."""
    rng = np.random.default_rng(33)
    features, posteriors = random_images(rng, 4, 2, 300, n_min=2, n_max=2)
    model = JCF(n_components=2, n_epochs=0, holdout_fraction=0, random_state=0)
    model.fit(features, posteriors, np.array([0, 0, 1, 1]))
    assert model.transform(features, posteriors).shape == (4, 2)


def test_a_triplet_exactly_at_the_margin_is_not_active():
    """Hinge margin - <a, p> + <a, n> = 1 - 1 + 0 = 0 for both anchors: no active
    triplet, zero loss, zero gradient (the hinge's derivative taken as 0 at 0)."""
    Y = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    loss, grad, n_active, n_triplets = hardest_negative_triplet_loss(Y, np.array([0, 0, 1]), margin=1.0)
    assert (loss, n_active, n_triplets) == (0.0, 0, 2) and not grad.any()


def test_a_model_without_codebook_transforms_without_posteriors():
    rng = np.random.default_rng(34)
    features, _ = random_images(rng, 4, 3, 1)
    model = JCF(n_components=2, n_epochs=1, holdout_fraction=0, random_state=0)
    model.fit(features, None, np.array([0, 0, 1, 1]))
    np.testing.assert_array_equal(
        model.transform(features, None), model.transform(features, [np.ones((len(f), 1)) for f in features])
    )
