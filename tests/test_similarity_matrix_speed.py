"""The similarity-matrix seed's fast paths against the straightforward computations
they replaced: S of every pair from the transposed rows, Eq. 4 and its gradient over
the images the triplets use only (C + C^T in one GEMM, the diagonal read in place),
and a fit through them against a fit through the reference objective."""

import numpy as np
import pytest

from ndir.similarity_matrix import EPS, SparseSimilarityMatrix, term_frequencies, word_neighbour_mask

from .test_similarity_matrix import _shared_words_problem


def reference_objective(model, theta, X, triplets, weights, gradient=True):
    """Eq. 4 and its gradient as computed before: S of every pair, the dense N x N
    derivatives C, Z = C X, and two dot products per mask entry."""
    M = model._matrix(theta).astype(X.dtype).toarray()
    S = X @ M @ X.T
    diagonal = np.maximum(np.diag(S), EPS)
    i, j, l = np.asarray(triplets).T
    normalised = S**2 / np.outer(diagonal, diagonal)
    hinge = normalised[i, l] - normalised[i, j] + model.margin
    active = hinge > 0
    value = float(weights[active] @ hinge[active])
    if not gradient:
        return value, active
    a = np.concatenate([i[active], i[active]])
    b = np.concatenate([l[active], j[active]])
    coefficient = np.concatenate([weights[active], -weights[active]])
    s_ab, s_aa, s_bb = S[a, b], diagonal[a], diagonal[b]
    n = X.shape[0]
    C = np.zeros((n, n))
    np.add.at(C, (a, b), coefficient * 2 * s_ab / (s_aa * s_bb))
    np.add.at(C, (a, a), -coefficient * s_ab**2 / (s_aa**2 * s_bb))
    np.add.at(C, (b, b), -coefficient * s_ab**2 / (s_aa * s_bb**2))
    Z = C @ X.astype(np.float64)
    X64 = X.astype(np.float64)
    u, v = model._rows, model._cols
    full = np.einsum("ki,ki->i", X64[:, u], Z[:, v]) + np.einsum("ki,ki->i", X64[:, v], Z[:, u])
    full[model._diagonal] /= 2.0
    return value, active, full


def _problem(seed=0, n_words=60, n_images=40, n_triplets=80, used=None):
    """Random tf rows over a k-NN mask; ``used`` images (None: all) in the triplets."""
    rng = np.random.default_rng(seed)
    words = rng.standard_normal((n_words, 3)).astype(np.float32)
    model = SparseSimilarityMatrix(margin=0.3)
    model._set_structure(word_neighbour_mask(words, 2))
    counts = rng.integers(0, 3, size=(n_images, n_words)) * (rng.random((n_images, n_words)) < 0.4)
    counts[0] = 0  # an image without words (S_ii floored at EPS)
    X = term_frequencies(counts + 0.0)
    theta = rng.uniform(0.2, 2.0, size=model._rows.size) * (rng.random(model._rows.size) < 0.8)
    pool = np.arange(n_images) if used is None else rng.choice(n_images, used, replace=False)
    triplets = rng.choice(pool, size=(n_triplets, 3))
    weights = rng.uniform(0.5, 2.0, size=n_triplets)
    return model, X, theta, triplets, weights


def test_similarities_from_transposed_rows():
    model, X, theta, _, _ = _problem()
    M = model._matrix(theta)
    np.testing.assert_allclose(
        model._similarities(M, np.ascontiguousarray(X.T)), X @ M.toarray() @ X.T, rtol=1e-12, atol=1e-15
    )
    X32 = X.astype(np.float32)
    S32 = model._similarities(model._matrix(theta, np.float32), np.ascontiguousarray(X32.T))
    assert S32.dtype == np.float32
    np.testing.assert_allclose(S32, X @ M.toarray() @ X.T, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("used", [None, 9, 25])
@pytest.mark.parametrize("seed", [0, 1])
def test_prepared_objective_and_gradient_match_the_reference(seed, used):
    """float64: to 1e-10 relative (float rounding: other summation orders); the
    active sets identical. ``used`` < all: S and the gradient from the used images
    only, gathered once."""
    model, X, theta, triplets, weights = _problem(seed, used=used)
    value, active, grad = model._objective(theta, X, triplets, weights)
    ref_value, ref_active, ref_grad = reference_objective(model, theta, X, triplets, weights)
    assert 0 < active.sum() < len(triplets)
    np.testing.assert_array_equal(active, ref_active)
    assert value == pytest.approx(ref_value, rel=1e-10)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-10 * np.abs(ref_grad).max())
    # The fit's path: float32 rows transposed once, their float64 copy shared.
    XT = np.ascontiguousarray(X.T.astype(np.float32))
    evaluation = model._prepare(XT, triplets, weights, XT.astype(np.float64))
    value32, active32, grad32 = evaluation.objective(theta)
    ref32 = reference_objective(model, theta, X.astype(np.float32), triplets, weights)
    np.testing.assert_array_equal(active32, ref32[1])
    assert value32 == pytest.approx(ref32[0], rel=1e-6)
    np.testing.assert_allclose(grad32, ref32[2], rtol=1e-6, atol=1e-6 * np.abs(ref32[2]).max())
    assert evaluation.objective(theta, gradient=False)[0] == value32


class _ReferenceModel(SparseSimilarityMatrix):
    """The fit, every evaluation through :func:`reference_objective` on all images."""

    def _prepare(self, XT, triplets, weights, XT64=None):
        model, X = self, XT.T

        class Reference:
            def objective(self, theta, gradient=True):
                return reference_objective(model, theta, X, triplets, weights, gradient)

        return Reference()


def test_fit_takes_the_reference_steps():
    """Same accepted steps: per iteration the same active counts, objectives to 1e-5
    relative (float32 S in both, summed in another order: 1.3e-6 apart under OpenBLAS's
    Haswell kernels), the same best iteration and a metric equal to
    1e-6 of its largest entry (an entry near 0 after cancellations differs by 1e-5
    relative); with hold-out and random triplets, and without."""
    counts, groups, words, train = _shared_words_problem(seed=2)
    counts, groups = counts[train], groups[train]
    for options in (
        {"holdout_fraction": 0.3, "n_random_triplets": 50},
        {"holdout_fraction": 0.0, "n_random_triplets": 0},
    ):
        options = {"margin": 0.3, "max_iter": 25, "full_eval_every": 4, "random_state": 0, **options}
        fast = SparseSimilarityMatrix(**options).fit(counts, groups, words)
        slow = _ReferenceModel(**options).fit(counts, groups, words)
        assert len(fast.history_) == len(slow.history_) >= 5
        assert [h["n_active"] for h in fast.history_] == [h["n_active"] for h in slow.history_]
        np.testing.assert_allclose(
            [h["objective"] for h in fast.history_], [h["objective"] for h in slow.history_], rtol=1e-5
        )
        assert fast.best_iteration_ == slow.best_iteration_
        assert fast.holdout_map_ == pytest.approx(slow.holdout_map_, nan_ok=True)
        reference = slow.metric_.toarray()
        np.testing.assert_allclose(fast.metric_.toarray(), reference, rtol=1e-6, atol=1e-6 * reference.max())
