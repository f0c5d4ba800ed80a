"""Sparse similarity-matrix learning (Yan & Yu 2013): the mask, Eq. 3-4, their
gradient, the triplets and the fit, against brute-force computations."""

from itertools import combinations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

from ndir import similarity_matrix
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


def brute_force_mask_is_valid(words, k, mask):
    """Whether ``mask`` is a diagonal plus symmetrised k-NN of ``words`` for some way of
    breaking ties: each word u chooses k other words within its k-th smallest distance
    d_k(u) to the others (all those strictly closer included), so (1) the diagonal is
    set and the mask symmetric, (2) row u holds at least k other words within d_k(u),
    and every word strictly closer than d_k(u), (3) every off-diagonal entry (u, v) lies
    within d_k(u) or within d_k(v) (chosen by one of its ends)."""
    n = len(words)
    distances = ((words[:, None].astype(np.float64) - words[None]) ** 2).sum(axis=2)
    np.fill_diagonal(distances, np.inf)
    d_k = np.sort(distances, axis=1)[:, k - 1]
    within = distances <= d_k[:, None]
    off = mask & ~np.eye(n, dtype=bool)
    return (
        mask.diagonal().all()
        and (mask == mask.T).all()
        and ((off & within).sum(axis=1) >= k).all()
        and not (~mask & (distances < d_k[:, None])).any()
        and not (off & ~within & ~within.T).any()
    )


def test_mask_with_coincident_words_brute_force():
    """Words that coincide (duplicated vocabulary rows, distance 0) tie with the word
    itself in the k-NN search, which then need not return the word first: it must
    still be dropped, never counted as its own neighbour. Integer coordinates make the
    float32 distances exact. Words 3 and 7 coincide and have no other tie: their mask
    rows are fixed (each other, then the nearest other word). Words 10-13 coincide (4
    copies, more than k + 1 = 3): the search may return 3 copies without the word
    itself, the branch that drops the (k+1)-th; the mask is checked against every
    tie-breaking the k-NN allows."""
    rng = np.random.default_rng(1)
    words = (rng.permutation(400)[:14, None] * np.array([[1, 0]]) + rng.integers(0, 3, (14, 2)) * [[0, 1]]).astype(
        np.float32
    )
    words[:, 0] *= 7  # well apart along x, distinct coordinates
    words[7] = words[3]
    words[11:14] = words[10]
    k = 2
    mask = word_neighbour_mask(words, k).toarray()
    assert brute_force_mask_is_valid(words, k, mask)
    # Word 3: its copy 7 and the nearest word other than 7 (no tie there); and alike for 7.
    distances = ((words[:, None].astype(np.float64) - words[None]) ** 2).sum(axis=2)
    for u, twin in ((3, 7), (7, 3)):
        others = [v for v in np.argsort(distances[u], kind="stable") if v not in (u, twin)]
        assert distances[u, others[0]] < distances[u, others[1]]
        assert mask[u, twin] and mask[u, others[0]]
    # Each of the 4 copies has at least 2 of the 3 other copies as neighbours, and no
    # word outside them (they are all far from every other word).
    copies = [10, 11, 12, 13]
    block = mask[np.ix_(copies, copies)] & ~np.eye(4, dtype=bool)
    assert (block.sum(axis=1) >= k).all()
    outside = np.setdiff1d(np.arange(14), copies)
    assert not mask[np.ix_(copies, outside)].any()


def test_initial_metric_scores_are_tfidf_cosines():
    counts = sp.random(10, 12, density=0.4, random_state=1, format="csr")
    counts.data = np.ceil(5 * counts.data)
    model = SparseSimilarityMatrix()
    idf = inverse_document_frequency(counts)
    model.metric_ = sp.diags(idf**2).tocsr().astype(np.float32)
    X = tfidf(counts, idf)
    np.testing.assert_allclose(model.score_pairs(counts, counts), (X @ X.T).toarray(), atol=1e-5)


def test_score_pairs_with_a_learned_metric_brute_force():
    """A random non-negative symmetric M on a k-NN mask (not diagonal): score_pairs(Q, X)
    is (q M x^T) / sqrt((q M q^T)(x M x^T)) on the L1-normalised counts (tf), computed
    densely here; a query and an image without words score 0 with everything. Q and X
    differ (a rectangular score matrix) and come dense and sparse."""
    rng = np.random.default_rng(2)
    n_words = 12
    words = rng.standard_normal((n_words, 3)).astype(np.float32)
    mask = word_neighbour_mask(words, 2).toarray()
    M = np.triu(rng.uniform(0.1, 2.0, (n_words, n_words)) * mask)
    M = M + np.triu(M, 1).T
    assert (M != np.diag(np.diag(M))).any()  # off-diagonal words are linked
    model = SparseSimilarityMatrix()
    model.metric_ = sp.csr_matrix(M.astype(np.float32))
    Q = rng.integers(0, 4, size=(5, n_words)).astype(float)
    X = rng.integers(0, 4, size=(7, n_words)).astype(float)
    Q[3] = 0.0
    X[5] = 0.0
    M64 = M.astype(np.float32).astype(np.float64)
    tf_q = np.divide(Q, Q.sum(axis=1, keepdims=True), out=np.zeros_like(Q), where=Q.sum(axis=1, keepdims=True) > 0)
    tf_x = np.divide(X, X.sum(axis=1, keepdims=True), out=np.zeros_like(X), where=X.sum(axis=1, keepdims=True) > 0)
    expected = np.zeros((5, 7))
    for a in range(5):
        for b in range(7):
            s_qq, s_xx = tf_q[a] @ M64 @ tf_q[a], tf_x[b] @ M64 @ tf_x[b]
            if s_qq > 0 and s_xx > 0:
                expected[a, b] = (tf_q[a] @ M64 @ tf_x[b]) / np.sqrt(s_qq * s_xx)
    for q, x in ((Q, X), (sp.csr_matrix(Q), sp.csr_matrix(X))):
        scores = model.score_pairs(q, x)
        np.testing.assert_allclose(scores, expected, rtol=1e-12, atol=1e-15)
    assert not scores[3].any() and not scores[:, 5].any()
    assert expected[expected > 0].size == 4 * 6  # every other pair shares a linked word


def test_learned_scores_are_non_negative_and_an_image_scores_itself_one():
    """What score_pairs promises of a learned metric: scores >= 0 (M^s is non-negative)
    and 1 for an image against itself. Not at most 1 elsewhere: Cauchy-Schwarz needs a
    positive semi-definite M, which the learning does not enforce; this metric has
    negative eigenvalues and scores up to 1.37 (documented in the class)."""
    counts, groups, vocabulary, train = _shared_words_problem()
    model = SparseSimilarityMatrix(margin=0.2, max_iter=30, holdout_fraction=0.25, random_state=0)
    model.fit(counts[train], groups[train], vocabulary)
    scores = model.score_pairs(counts, counts)
    assert scores.min() >= 0.0
    with_words = np.asarray(counts.sum(axis=1)).ravel() > 0
    np.testing.assert_allclose(np.diag(scores)[with_words], 1.0, rtol=1e-12)
    assert np.linalg.eigvalsh(model.metric_.toarray() if hasattr(model.metric_, "toarray") else model.metric_).min() < 0


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


@pytest.mark.parametrize("mask_chunk", [None, 3])
def test_gradient_matches_finite_differences(mask_chunk, monkeypatch):
    """The gradient against central differences; with mask_chunk = 3 the 19 mask
    entries are summed over images in 7 blocks (MASK_CHUNK), which must give the
    single-block gradient exactly: each entry is the same dot product."""
    model, X, theta, triplets, weights = _tiny_structure()
    single = model._objective(theta, X, triplets, weights)[2]
    if mask_chunk is not None:
        monkeypatch.setattr(similarity_matrix, "MASK_CHUNK", mask_chunk)
        assert model._rows.size > 2 * mask_chunk
    value, active, grad = model._objective(theta, X, triplets, weights)
    np.testing.assert_array_equal(grad, single)
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


def test_hard_triplets_against_brute_force_on_random_scores():
    """Random scores (no ties) of 14 images in 4 groups of uneven sizes: with a cap
    that never binds, the triplets are exactly the set {(i, j, l): j a near duplicate
    of i (j != i), l of another group, s_il > s_ij}, each once (a query's own score,
    the largest, plays no part). With a cap of 3, each query keeps the first 3 of its
    list ordered by the negative's rank, then the positive's."""
    rng = np.random.default_rng(3)
    groups = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 0, 1, 2])
    n = groups.size
    scores = rng.uniform(size=(n, n))
    np.fill_diagonal(scores, 2.0)
    found = hard_triplets(scores, groups, max_per_query=10**6)
    expected = {
        (i, j, l)
        for i in range(n)
        for j in range(n)
        for l in range(n)
        if j != i and groups[j] == groups[i] and groups[l] != groups[i] and scores[i, l] > scores[i, j]
    }
    assert len(expected) > 50
    assert len(found) == len(expected) and {tuple(t) for t in found} == expected
    capped = hard_triplets(scores, groups, max_per_query=3)
    for i in range(n):
        ranked = sorted((t for t in expected if t[0] == i), key=lambda t: (-scores[i, t[2]], -scores[i, t[1]]))
        assert [tuple(t) for t in capped if t[0] == i] == ranked[:3]


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


def eq4(counts, M, triplets, weights, margin):
    """Eq. 4 by loops, in float64: sum_t w_t [Ŝ_il - Ŝ_ij + margin]_+, with
    Ŝ_ab = S_ab^2 / (S_aa S_bb), S = I M I^T on the L1-normalised counts I."""
    tf = counts / counts.sum(axis=1, keepdims=True)
    S = tf @ M @ tf.T
    hat = S**2 / np.outer(np.diag(S), np.diag(S))
    return sum(w * max(0.0, hat[i, l] - hat[i, j] + margin) for (i, j, l), w in zip(triplets, weights))


def test_fit_lowers_eq4_over_all_its_triplets():
    """No hold-out and no random triplets: the triplets are the hard ones of tf-idf
    (hard_triplets on the tf-idf cosines, whose ranking Ŝ shares), weighted by
    largest group size / anchor's group size (every image a query). Eq. 4 recomputed
    by loops over all of them equals the recorded start objective at M = diag(idf^2),
    and at the returned metric_ the last recorded objective (every triplet was active
    at the full evaluation, so the last step's subset is all of them), far lower."""
    counts, groups, vocabulary, train = _shared_words_problem()
    counts, groups = counts[train], groups[train]
    model = SparseSimilarityMatrix(margin=0.2, max_iter=3, holdout_fraction=0, n_random_triplets=0, random_state=0)
    model.fit(counts, groups, vocabulary)
    idf = inverse_document_frequency(counts)
    X = tfidf(counts, idf).toarray().astype(np.float64)
    triplets = hard_triplets(X @ X.T, groups, model.max_hard_per_query)
    labels, sizes = np.unique(groups, return_counts=True)
    size = dict(zip(labels, sizes))
    weights = np.array([sizes.max() / size[groups[i]] for i in triplets[:, 0]])
    assert model.n_hard_triplets_ == len(triplets) and model.n_random_triplets_ == 0
    start = eq4(counts, np.diag(idf**2), triplets, weights, 0.2)
    end = eq4(counts, model.metric_.toarray().astype(np.float64), triplets, weights, 0.2)
    assert start == pytest.approx(model.history_[0]["objective"], rel=1e-6)
    assert model.history_[-1]["n_active"] == len(triplets)
    assert end == pytest.approx(model.history_[-1]["objective"], rel=1e-5)
    assert end < 0.01 * start


def test_fit_keeps_the_iteration_of_the_best_holdout_map():
    """A run whose hold-out mAP peaks at iteration 2 (0.959) and ends far lower (0.41):
    best_iteration_ is the argmax of the recorded hold-out mAPs (the first on ties),
    holdout_map_ their maximum, and metric_ that iteration's matrix: the held-out
    groups' mAP recomputed from score_pairs(metric_) is holdout_map_, not the last."""
    counts, groups, vocabulary, train = _shared_words_problem(seed=2)
    counts, groups = counts[train], groups[train]
    model = SparseSimilarityMatrix(margin=0.3, max_iter=15, holdout_fraction=0.3, n_random_triplets=50, random_state=1)
    model.fit(counts, groups, vocabulary)
    maps = [h["holdout_map"] for h in model.history_]
    assert model.best_iteration_ == int(np.argmax(maps)) and model.holdout_map_ == max(maps)
    assert 0 < model.best_iteration_ < len(maps) - 1 and maps[-1] < model.holdout_map_ - 0.2
    held = np.isin(groups, model.holdout_groups_)
    scores = model.score_pairs(counts[held], counts[held])
    assert map_from_scores(scores, np.arange(held.sum()), groups[held]) == pytest.approx(model.holdout_map_, abs=1e-9)


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
    assert model.fit(counts, groups, vocabulary).model_bytes_ == 8 * sp.triu(model.metric_).nnz + 4 * (
        counts.shape[1] + 1
    )


def test_bad_input_is_refused_clearly():
    counts, groups, vocabulary = _neighbour_words_problem()
    with pytest.raises(ValueError, match="vocabulary has"):
        SparseSimilarityMatrix().fit(counts, groups, vocabulary[:-1])
    with pytest.raises(ValueError, match="non-negative"):
        SparseSimilarityMatrix().fit(-counts, groups, vocabulary)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        SparseSimilarityMatrix().fit(counts, groups[:-1], vocabulary)
