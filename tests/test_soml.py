import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize_scalar
from sklearn.base import clone

from ndir.soml import (
    ZERO_WEIGHT,
    SOMLDualAveraging,
    SOMLTruncatedGradient,
    _RowReader,
    dual_averaging_weights,
    truncate,
)
from ndir.triplets import sample_triplets


def test_truncate_hand_worked():
    v = np.array([0.5, -0.5, 0.05, -0.05, 0.0, 2.0])
    np.testing.assert_allclose(truncate(v, 0.1), [0.4, -0.4, 0.0, 0.0, 0.0, 1.9])


@pytest.mark.parametrize(
    ("gbar", "t", "gamma", "rho", "l1"),
    [(0.3, 4, 0.5, 1.0, 0.01), (-0.2, 9, 0.1, 0.5, 0.0), (0.01, 16, 1.0, 1.0, 0.05), (-1.5, 1, 2.0, 0.0, 0.1)],
)
def test_dual_averaging_closed_form_minimises_eq13(gbar, t, gamma, rho, l1):
    lam = l1 + gamma * rho / np.sqrt(t)

    def eq13(w):
        return gbar * w + lam * abs(w) + gamma / (2 * np.sqrt(t)) * w**2

    best = minimize_scalar(eq13, bounds=(-100, 100), method="bounded", options={"xatol": 1e-10}).x
    closed = dual_averaging_weights(np.array([gbar * t]), t, gamma, rho, l1)[0]
    assert closed == pytest.approx(best, abs=1e-6)


@pytest.mark.parametrize(
    ("update", "expected"),
    [
        # Algorithm 2 as printed (gradient sign fixed): the second triplet is inactive,
        # so w stays w_2 = [3, 0] although the average is now (-4 - 4) / 2 = -4.
        ("algorithm2", 3.0),
        # Eq. 13 after every triplet: the sum stays [-4, 0] (inactive: sub-gradient 0),
        # t = 2: mean -2, lambda_2 = 1/sqrt(2), w = -sqrt(2) (-2 + 1/sqrt(2)) = 2 sqrt(2) - 1.
        ("every_step", 2.0 * np.sqrt(2.0) - 1.0),
    ],
)
def test_dual_averaging_two_triplets_hand_worked(update, expected):
    """Images x0 = x1 = [2, 1] (group 0), x2 = [0, 1] (group 1), one negative per pair:
    the triplets (0, 1, 2) and (1, 0, 2) both have g = x ⊙ (x+ - x-) = [4, 0].
    gamma = rho = 1, lambda = 0, so lambda_t = 1 / sqrt(t).
    t = 1: w_1 = 0, loss 1 (active); gbar_1 = -g = [-4, 0]; |-4| > lambda_1 = 1, so
    w_2 = -(sqrt(1) / 1) (-4 + 1) = 3 on the first coordinate, 0 on the second.
    t = 2: loss = max(0, 1 - w_2 . g) = max(0, 1 - 12) = 0 (inactive)."""
    X = np.array([[2.0, 1.0], [2.0, 1.0], [0.0, 1.0]])
    model = SOMLDualAveraging(gamma=1.0, rho=1.0, l1=0.0, update=update, negatives_per_pair=1, random_state=0)
    model.fit(X, np.array([0, 0, 1]))
    assert model.n_triplets_ == 2 and model.n_active_ == 1
    np.testing.assert_allclose(model.coef_, [expected, 0.0], atol=1e-12)


def _reference(X, groups, model):
    """A plain dense loop over all coordinates: truncation or dual averaging every step."""
    rng = np.random.RandomState(model.random_state)
    w = np.zeros(X.shape[1])
    G = np.zeros(X.shape[1])
    t = 0
    for _ in range(model.n_epochs):
        for i, j, l in sample_triplets(groups, model.negatives_per_pair, rng):
            g = X[i] * (X[j] - X[l])
            loss = max(0.0, 1.0 - w @ g)
            if isinstance(model, SOMLTruncatedGradient):
                if loss > 0:
                    w = truncate(w + model.learning_rate * g, model.learning_rate * model.l1)
            elif model.update == "algorithm2":
                t += 1
                G -= g
                if loss > 0:
                    w = dual_averaging_weights(G, t, model.gamma, model.rho, model.l1)
            else:
                t += 1
                if loss > 0:
                    G -= g
                w = dual_averaging_weights(G, t, model.gamma, model.rho, model.l1)
    return w


def _tiny_sparse(seed=0, n=30, m=50):
    rng = np.random.default_rng(seed)
    X = sp.random(n, m, density=0.3, random_state=seed, format="csr") * 3
    return X, np.repeat(np.arange(n // 3), 3), rng


def test_sparse_rows_read_as_the_dense_rows():
    X, _, _ = _tiny_sparse(seed=4)
    X = X.tolil()
    X[5, :] = 0.0  # an image without words
    X = X.tocsr()
    dense = X.toarray()
    reader = _RowReader(X)
    for i, j, l in [(0, 1, 2), (5, 0, 1), (0, 5, 5), (3, 5, 4), (7, 7, 8)]:
        where, g = reader.difference_product(i, j, l)
        np.testing.assert_array_equal(where, np.flatnonzero(dense[i]))
        np.testing.assert_array_equal(g, (dense[i] * (dense[j] - dense[l]))[where])


@pytest.mark.parametrize(
    "model",
    [
        SOMLTruncatedGradient(learning_rate=0.5, l1=0.05, negatives_per_pair=3, n_epochs=2, random_state=1),
        SOMLDualAveraging(gamma=0.5, rho=0.5, l1=0.01, negatives_per_pair=3, n_epochs=2, random_state=1),
        SOMLDualAveraging(
            gamma=0.5, rho=0.5, l1=0.01, update="algorithm2", negatives_per_pair=3, n_epochs=2, random_state=1
        ),
    ],
)
def test_sparse_lazy_updates_equal_a_dense_reference_loop(model):
    X, groups, _ = _tiny_sparse()
    expected = _reference(X.toarray(), groups, model)
    sparse_fit = clone(model).fit(X, groups)
    dense_fit = clone(model).fit(X.toarray(), groups)
    assert np.count_nonzero(expected) > 0
    np.testing.assert_allclose(sparse_fit.coef_, expected, atol=1e-10)
    np.testing.assert_allclose(dense_fit.coef_, expected, atol=1e-10)


def _separable(n_groups=12, per_group=3, m=40, seed=0):
    """Each group shares one private feature; the others are noise shared by all."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_groups), per_group)
    X = rng.uniform(0, 0.3, size=(len(groups), m))
    X[np.arange(len(groups)), groups] += 1.0
    return X / np.linalg.norm(X, axis=1, keepdims=True), groups


@pytest.mark.parametrize(
    "model",
    [
        SOMLTruncatedGradient(learning_rate=0.5, l1=1e-3, negatives_per_pair=5, n_epochs=4, random_state=0),
        SOMLDualAveraging(gamma=0.05, rho=0.1, l1=1e-4, negatives_per_pair=5, n_epochs=4, random_state=0),
    ],
)
def test_learning_separates_a_toy_problem(model):
    X, groups = _separable()
    model.fit(X, groups)
    assert model.mean_loss_[-1] < 0.5 * model.mean_loss_[0]
    # The group features (0..11) are what tells matches apart: positive weights.
    assert (model.coef_[:12] > 0).all()
    scores = model.score_pairs(X, X)
    np.fill_diagonal(scores, -np.inf)
    assert (groups[scores.argmax(axis=1)] == groups).mean() == 1.0


def test_sparsity_grows_with_l1():
    X, groups, _ = _tiny_sparse(seed=3, n=45)
    sparsities = [
        SOMLTruncatedGradient(l1=l1, negatives_per_pair=3, random_state=0).fit(X, groups).sparsity_
        for l1 in (0.0, 0.05, 0.5)
    ]
    assert sparsities[0] < sparsities[1] < sparsities[2]


@pytest.mark.parametrize("estimator", [SOMLTruncatedGradient, SOMLDualAveraging])
def test_zero_weights_are_those_at_most_zero_weight(estimator):
    """n_nonzero_, sparsity_ and model_bytes_ count the weights of magnitude above
    ZERO_WEIGHT (1e-10), not the exact non-zeros: of six hand-set weights, 0, 1e-11
    and 1e-10 (either sign) count as zero, -1e-9, -2e-10 and 0.5 do not."""
    model = estimator()
    model.coef_ = np.array([0.0, 1e-11, -1e-9, 0.5, ZERO_WEIGHT, -2e-10])
    assert ZERO_WEIGHT == 1e-10
    assert model.n_nonzero_ == 3
    assert model.sparsity_ == pytest.approx(0.5)
    assert model.model_bytes_ == 3 * (4 + 4)  # an int32 index and a float32 value each
    model.coef_[4] = -ZERO_WEIGHT
    assert model.n_nonzero_ == 3


def test_deterministic_and_cloneable():
    X, groups, _ = _tiny_sparse()
    model = SOMLDualAveraging(negatives_per_pair=2, random_state=4)
    a = clone(model).fit(X, groups).coef_
    b = clone(model).fit(X, groups).coef_
    np.testing.assert_array_equal(a, b)
    assert clone(model).get_params()["random_state"] == 4


def test_score_pairs_transform_and_brute_force_agree():
    X, groups, _ = _tiny_sparse()
    model = SOMLTruncatedGradient(learning_rate=0.5, l1=0.01, negatives_per_pair=3, random_state=0).fit(X, groups)
    Q, D = X[:4], X[4:]
    brute = np.array(
        [
            [sum(Q[a, k] * model.coef_[k] * D[b, k] for k in range(X.shape[1])) for b in range(D.shape[0])]
            for a in range(4)
        ]
    )
    np.testing.assert_allclose(model.score_pairs(Q, D), brute, atol=1e-12)
    np.testing.assert_allclose((model.transform(Q) @ D.T).toarray(), brute, atol=1e-12)
    np.testing.assert_allclose(model.score_pairs(Q.toarray(), D.toarray()), brute, atol=1e-12)
    assert model.model_bytes_ == 8 * model.n_nonzero_
    assert model.n_triplets_ == len(sample_triplets(groups, 3, 0)) and 0 < model.n_active_ <= model.n_triplets_


def test_bad_input_is_refused_clearly():
    X, groups, _ = _tiny_sparse()
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        SOMLTruncatedGradient().fit(X, groups[:-1])
    bad = X.toarray()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        SOMLDualAveraging().fit(bad, groups)
    with pytest.raises(ValueError, match="learning_rate"):
        SOMLTruncatedGradient(learning_rate=0.0).fit(X, groups)
