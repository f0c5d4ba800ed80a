from itertools import combinations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

from ndir.bovw import inverse_document_frequency, tfidf
from ndir.evaluation import map_from_scores
from ndir.similarity_matrix import (
    SparseSimilarityMatrix,
    hard_triplets,
    term_frequencies,
    triplet_weights,
    word_neighbour_mask,
)


def test_mask_is_diagonal_plus_symmetrised_knn_brute_force():
    rng = np.random.default_rng(0)
    words = rng.standard_normal((15, 3)).astype(np.float32)
    mask = word_neighbour_mask(words, 2).toarray()
    distances = ((words[:, None] - words[None]) ** 2).sum(axis=2)
    np.fill_diagonal(distances, np.inf)
    expected = np.eye(15, dtype=bool)
    for u in range(15):
        expected[u, np.argsort(distances[u])[:2]] = True
    expected |= expected.T
    np.testing.assert_array_equal(mask, expected)
    assert word_neighbour_mask(words, 0).nnz == 15


def test_initial_metric_scores_are_tfidf_cosines():
    counts = sp.random(10, 12, density=0.4, random_state=1, format="csr")
    counts.data = np.ceil(5 * counts.data)
    model = SparseSimilarityMatrix()
    idf = inverse_document_frequency(counts)
    model.metric_ = sp.diags(idf**2).tocsr().astype(np.float32)
    X = tfidf(counts, idf)
    np.testing.assert_allclose(model.score_pairs(counts, counts), (X @ X.T).toarray(), atol=1e-5)


def _tiny_structure(seed=0, n_words=8, n_images=12):
    rng = np.random.default_rng(seed)
    words = rng.standard_normal((n_words, 2)).astype(np.float32)
    model = SparseSimilarityMatrix(margin=0.3)
    model._set_structure(word_neighbour_mask(words, 2))
    X = term_frequencies(rng.integers(0, 4, size=(n_images, n_words)) + 0.0)
    theta = rng.uniform(0.5, 2.0, size=model._rows.size)
    triplets = rng.integers(0, n_images, size=(20, 3))
    weights = rng.uniform(0.5, 2.0, size=20)
    return model, X, theta, triplets, weights


def test_gradient_matches_finite_differences():
    model, X, theta, triplets, weights = _tiny_structure()
    value, active, grad = model._objective(theta, X, triplets, weights)
    assert 0 < active.sum() < len(triplets)
    h = 1e-6
    numeric = np.array(
        [
            (
                model._objective(theta + h * e, X, triplets, weights, gradient=False)[0]
                - model._objective(theta - h * e, X, triplets, weights, gradient=False)[0]
            )
            / (2 * h)
            for e in np.eye(theta.size)
        ]
    )
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)


def test_objective_is_eq4_brute_force_and_the_active_set_loses_nothing():
    model, X, theta, triplets, weights = _tiny_structure(seed=1)
    M = model._matrix(theta).toarray()
    assert np.allclose(M, M.T)
    S = X @ M @ X.T
    hat = S**2 / np.outer(np.diag(S), np.diag(S))
    expected = sum(w * max(0.0, hat[i, l] - hat[i, j] + model.margin) for (i, j, l), w in zip(triplets, weights))
    value, active = model._objective(theta, X, triplets, weights, gradient=False)
    assert value == pytest.approx(expected)
    assert model._objective(theta, X, triplets[active], weights[active], gradient=False)[0] == pytest.approx(value)


def test_hard_triplets_hand_worked():
    groups = np.array([0, 0, 0, 1, 2])
    scores = np.zeros((5, 5))
    # Query 0 ranks: 3 (other), 1 (match), 4 (other), 2 (match).
    scores[0, [3, 1, 4, 2]] = [0.9, 0.8, 0.7, 0.6]
    found = {tuple(t) for t in hard_triplets(scores, groups, max_per_query=10) if t[0] == 0}
    assert found == {(0, 1, 3), (0, 2, 3), (0, 2, 4)}
    capped = [tuple(t) for t in hard_triplets(scores, groups, max_per_query=2) if t[0] == 0]
    assert capped == [(0, 1, 3), (0, 2, 3)]


def test_triplet_weights_hand_worked():
    groups = np.array([0, 0, 0, 0, 1, 1])
    triplets = np.array([[0, 1, 4], [4, 5, 0]])
    np.testing.assert_allclose(triplet_weights(triplets, groups), [1.0, 2.0])


def test_random_triplets_pair_matches_with_a_negative_of_another_group():
    """n_random_triplets (i, j, l): i and j distinct images of one group, l of another
    group. Groups of 2 and 3 among 5 groups: a uniform negative clashes with i's group
    often (2 draws in 9), so clashes must be drawn again. Seeded: the same seed
    gives the same triplets, another seed others; 0 asked gives none."""
    groups = np.array([0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 4, 4])
    model = SparseSimilarityMatrix(n_random_triplets=500)
    triplets = model._random_triplets(groups, np.random.RandomState(0))
    assert triplets.shape == (500, 3)
    i, j, l = triplets.T
    assert (groups[i] == groups[j]).all() and (i != j).all()
    assert (groups[l] != groups[i]).all()
    # Every image is drawn as a negative of some triplet (0 to 11).
    assert set(l) == set(range(groups.size))
    np.testing.assert_array_equal(triplets, model._random_triplets(groups, np.random.RandomState(0)))
    assert not np.array_equal(triplets, model._random_triplets(groups, np.random.RandomState(1)))
    none = SparseSimilarityMatrix(n_random_triplets=0)._random_triplets(groups, np.random.RandomState(0))
    assert none.shape == (0, 3)


def _word_pairs_problem(parts, per_group, rng):
    """Images of groups made of scene parts: group g holds the parts ``parts[g]`` (indices
    of pairs of neighbouring words, 0.1 apart), each image quantises every part to one
    word of its pair at random (3 counts), plus 6 clutter words shared by all."""
    n_pairs = int(parts.max()) + 1
    n_words = 2 * n_pairs + 6
    vocabulary = np.zeros((n_words, 2), dtype=np.float32)
    vocabulary[: 2 * n_pairs, 0] = np.repeat(np.arange(n_pairs) * 10.0, 2) + np.tile([0.0, 0.1], n_pairs)
    vocabulary[2 * n_pairs :, 1] = 100 + 10 * np.arange(6)
    groups = np.repeat(np.arange(len(parts)), per_group)
    counts = np.zeros((groups.size, n_words))
    for part in parts.T:
        pair = part[groups]
        counts[np.arange(groups.size), 2 * pair + rng.integers(0, 2, groups.size)] = 3
    counts[:, 2 * n_pairs :] = rng.integers(0, 3, size=(groups.size, 6))
    return counts, groups, vocabulary


def _neighbour_words_problem(n_groups=12, per_group=4, seed=0):
    """Near duplicates quantised to one of two neighbouring words (one pair per group)."""
    return _word_pairs_problem(np.arange(n_groups)[:, None], per_group, np.random.default_rng(seed))


def _shared_words_problem(n_pairs=8, per_group=4, seed=0):
    """Groups made of two of ``n_pairs`` scene parts, each quantised to one of two
    neighbouring words at random, so near duplicates often share no word. Every part
    occurs in many groups: what is learned on some groups (neighbouring words match)
    holds on the others. Returns the counts, groups, vocabulary and, per image, whether
    it is in a training group (half the groups, disjoint from the test ones)."""
    rng = np.random.default_rng(seed)
    parts = np.array(list(combinations(range(n_pairs), 2)))
    counts, groups, vocabulary = _word_pairs_problem(parts, per_group, rng)
    train_groups = rng.permutation(len(parts))[: len(parts) // 2]
    return counts, groups, vocabulary, np.isin(groups, train_groups)


def test_learning_activates_neighbouring_words_and_beats_tfidf_on_held_out_groups():
    counts, groups, vocabulary, train = _shared_words_problem()
    model = SparseSimilarityMatrix(margin=0.2, max_iter=30, holdout_fraction=0.25, random_state=0)
    model.fit(counts[train], groups[train], vocabulary)
    objectives = [h["objective"] for h in model.history_]
    assert objectives[-1] < objectives[0]
    M = model.metric_.toarray()
    assert (M >= 0).all() and np.allclose(M, M.T)
    assert not (M.astype(bool) & ~model.mask_.toarray()).any()
    assert M[0, 1] > 0  # the two words of part 0, zero in tf-idf
    # Scored on the groups the model never saw (with the idf of its training images).
    idf = inverse_document_frequency(counts[train])
    X = tfidf(counts[~train], idf)
    rows = np.arange(X.shape[0])
    tfidf_map = map_from_scores((X @ X.T).toarray(), rows, groups[~train])
    learned_map = map_from_scores(model.score_pairs(counts[~train], counts[~train]), rows, groups[~train])
    assert learned_map > tfidf_map + 0.1
    assert model.best_iteration_ > 0 and model.holdout_map_ >= model.history_[0]["holdout_map"]


def test_holdout_shares_no_photo_with_training():
    """Twelve groups, group g cut from photo g // 2 (pairs of groups): held out by
    photo, each photo's two groups are held out or trained on together; by group
    alone (seed 0), some photo is split between the hold-out and training."""
    counts, groups, vocabulary = _neighbour_words_problem()
    photos = groups // 2
    model = SparseSimilarityMatrix(max_iter=2, holdout_fraction=0.34, random_state=0)
    by_photo = set(clone(model).fit(counts, groups, vocabulary, together=photos).holdout_groups_ // 2)
    plain = clone(model).fit(counts, groups, vocabulary).holdout_groups_
    assert len(by_photo) == 2 and len(set(plain // 2)) > len(plain) / 2
    held = np.isin(photos, list(by_photo))
    assert set(groups[held]) == {2 * p + i for p in by_photo for i in (0, 1)}


def test_deterministic_and_cloneable():
    counts, groups, vocabulary = _neighbour_words_problem(seed=1)
    model = SparseSimilarityMatrix(max_iter=5, random_state=3)
    a = clone(model).fit(counts, groups, vocabulary).metric_
    b = clone(model).fit(sp.csr_matrix(counts), groups, vocabulary).metric_
    np.testing.assert_allclose(a.toarray(), b.toarray(), rtol=1e-6)
    assert clone(model).get_params()["random_state"] == 3
    assert model.fit(counts, groups, vocabulary).model_bytes_ == 8 * sp.triu(model.metric_).nnz + 4 * (counts.shape[1] + 1)


def test_bad_input_is_refused_clearly():
    counts, groups, vocabulary = _neighbour_words_problem()
    with pytest.raises(ValueError, match="vocabulary has"):
        SparseSimilarityMatrix().fit(counts, groups, vocabulary[:-1])
    with pytest.raises(ValueError, match="non-negative"):
        SparseSimilarityMatrix().fit(-counts, groups, vocabulary)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        SparseSimilarityMatrix().fit(counts, groups[:-1], vocabulary)
