"""Recall@k against hand-worked rankings and a brute-force walk of each result list."""

import numpy as np
import pytest

from ndir.evaluation import map_from_scores, recall_at_k

# Five images: 0, 1 in group 0; 2, 3, 4 in group 1. The diagonal (9) must be ignored.
GROUPS = np.array([0, 0, 1, 1, 1])
SCORES = np.array(
    [
        [9.0, 0.5, 0.9, 0.1, 0.2],
        [0.5, 9.0, 0.3, 0.3, 0.8],
        [0.9, 0.3, 9.0, 0.4, 0.1],
        [0.1, 0.3, 0.4, 9.0, 0.7],
        [0.2, 0.8, 0.1, 0.7, 9.0],
    ]
)


def test_hand_worked_precomputed():
    # Query 0: list 2 (.9), 1 (.5), 4, 3 -> its positive 1 at rank 1: hit from k = 2.
    # Query 1: list 4 (.8), 0 (.5), ... -> positive 0 at rank 1.
    # Query 2: positives 3 (.4), 4 (.1); negative 0 (.9) above the best, 1 (.3) below -> rank 1.
    # Query 3: positives 2 (.4), 4 (.7); negatives .1 and .3 below .7 -> rank 0: the only hit at k = 1.
    # Query 4: positives 2 (.1), 3 (.7); negative 1 (.8) above -> rank 1.
    # Recall@1 = 1/5, Recall@2 = 5/5.
    assert recall_at_k(SCORES, GROUPS, ks=(1, 2, 4), metric="precomputed") == pytest.approx({1: 0.2, 2: 1.0, 4: 1.0})


def test_hand_worked_tie_is_pessimistic():
    scores = SCORES.copy()
    # Negative 4 now ties query 0's positive 1 at .5: pessimistic order 2 (.9), 4 (.5), 1 (.5),
    # so query 0 hits only from k = 3. Query 4's list: 1 (.8), 3 (.7), 0 (.5) -> still rank 1.
    scores[0, 4] = scores[4, 0] = 0.5
    # Recall@2 = 4/5 (query 0 misses), Recall@3 = 5/5.
    assert recall_at_k(scores, GROUPS, ks=(1, 2, 3), metric="precomputed") == pytest.approx({1: 0.2, 2: 0.8, 3: 1.0})


def test_all_scores_tied():
    # Every other image ties: a query's best positive comes after all its negatives.
    # Group 0 queries (2 images) have 3 negatives -> rank 3; group 1 queries have 2 -> rank 2.
    # Recall@3 = 3/5 (group 1's three queries), Recall@4 = 1.
    recalls = recall_at_k(np.ones((5, 5)), GROUPS, ks=(1, 2, 3, 4), metric="precomputed")
    assert recalls == pytest.approx({1: 0.0, 2: 0.0, 3: 0.6, 4: 1.0})


def test_hand_worked_vectors_dot_and_cosine():
    # Unit vectors, groups [0, 0, 1, 1]: x0 = (1, 0), x1 = (.6, .8) | x2 = (.8, .6), x3 = (0, 1).
    # Dots: 01 = .6, 02 = .8, 03 = 0, 12 = .96, 13 = .8, 23 = .6.
    # Query 0: positive .6 under negative 2 (.8) -> rank 1.  Query 1: .6 under .96 and .8 -> rank 2.
    # Query 2: .6 under .8 and .96 -> rank 2.               Query 3: .6 under .8 (x1) -> rank 1.
    X = np.array([[1.0, 0.0], [0.6, 0.8], [0.8, 0.6], [0.0, 1.0]])
    groups = np.array([0, 0, 1, 1])
    expected = {1: 0.0, 2: 0.5, 3: 1.0}
    assert recall_at_k(X, groups, ks=(1, 2, 3)) == pytest.approx(expected)
    # x3 scaled by 10: cosine is unchanged; the dots with x3 become 0, 8, 6.
    # Query 2: positive 6 above .8, .96 -> rank 0.  Query 3: positive 6 under 8 (x1) -> rank 1.
    # Queries 0 and 1 as before (ranks 1 and 2): dot Recall@1 = 1/4, Recall@2 = 3/4.
    X[3] *= 10
    assert recall_at_k(X, groups, ks=(1, 2, 3), metric="cosine") == pytest.approx(expected)
    assert recall_at_k(X, groups, ks=(1, 2, 3)) == pytest.approx({1: 0.25, 2: 0.75, 3: 1.0})


def test_cosine_scores_a_zero_row_zero_hand_worked():
    """With metric="cosine" a zero row scores 0 with everything (not NaN). Groups
    [0, 0, 1, 1]: x0 = (1, 0), x1 = 0, x2 = (-5, 0), x3 = (-.6, -.8) (x2 not unit).
    Cosines: 01 = 0, 02 = -1, 03 = -.6, 12 = 13 = 0, 23 = .6.
    Query 0: positive 1 (0) above negatives -1 and -.6 -> rank 0.
    Query 1: its positive and negatives all tie at 0: pessimistic rank 2.
    Query 2: positive 3 (.6) above 0 (-1) and 1 (0) -> rank 0.
    Query 3: positive 2 (.6) above 0 (-.6) and 1 (0) -> rank 0.
    Recall@1 = @2 = 3/4, Recall@3 = 1."""
    X = np.array([[1.0, 0.0], [0.0, 0.0], [-5.0, 0.0], [-0.6, -0.8]])
    groups = np.array([0, 0, 1, 1])
    assert recall_at_k(X, groups, ks=(1, 2, 3), metric="cosine") == pytest.approx({1: 0.75, 2: 0.75, 3: 1.0})
    # The same as the hand-made cosine matrix, precomputed.
    cosines = np.array([[1, 0, -1, -0.6], [0, 0, 0, 0], [-1, 0, 1, 0.6], [-0.6, 0, 0.6, 1]])
    assert recall_at_k(cosines, groups, ks=(1, 2, 3), metric="precomputed") == pytest.approx({1: 0.75, 2: 0.75, 3: 1.0})


def brute_force_recall(scores, groups, k):
    hits = []
    for q in range(len(groups)):
        others = [j for j in range(len(groups)) if j != q]
        # Ties: negatives (False) before positives (True).
        ranked = sorted(others, key=lambda j: (-scores[q, j], groups[j] == groups[q]))
        hits.append(any(groups[j] == groups[q] for j in ranked[:k]))
    return float(np.mean(hits))


def test_matches_brute_force_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(20):
        groups = np.repeat(np.arange(5), rng.integers(2, 4, size=5))
        scores = rng.integers(0, 4, size=(groups.size, groups.size)).astype(float)  # many ties
        recalls = recall_at_k(scores, groups, ks=(1, 2, 3, 5), metric="precomputed")
        for k, value in recalls.items():
            assert value == pytest.approx(brute_force_recall(scores, groups, k))


def test_recall_at_1_agrees_with_map_when_one_positive():
    # With one positive per query, AP = 1 exactly when it is ranked first, i.e. a hit at k = 1.
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(6), 2)
    X = rng.normal(size=(12, 3))
    _, ap = map_from_scores(X @ X.T, np.arange(12), groups, return_per_query=True)
    assert recall_at_k(X, groups, ks=(1,))[1] == pytest.approx(np.mean(ap == 1.0))


def test_query_without_near_duplicate_is_rejected():
    with pytest.raises(ValueError, match=r"groups \[7\] have a single image"):
        recall_at_k(np.eye(3), np.array([1, 1, 7]))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ks": (0,)}, "ks must"),
        ({"metric": "euclidean"}, "metric must"),
        ({"X": np.ones((4, 3)), "metric": "precomputed"}, "expected"),
        ({"X": np.full((4, 2), np.nan)}, "NaN"),
    ],
)
def test_bad_input(kwargs, message):
    arguments = {"X": np.eye(4), "groups": np.array([0, 0, 1, 1]), **kwargs}
    with pytest.raises(ValueError, match=message):
        recall_at_k(**arguments)
