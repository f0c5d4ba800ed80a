"""UKBench's N-S score (ndir.evaluation.ns_score), hand-worked."""

import numpy as np
import pytest

from ndir.evaluation import ns_score


def on_circle(degrees):
    """Unit vectors at these angles: their dot product is the cosine of the angle between."""
    radians = np.deg2rad(degrees)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1)


def test_three_groups_of_four_hand_worked():
    # Group 0 at 0-15 degrees, group 1 at 40-50 and one image at 100 (among group 2's),
    # group 2 at 90-110. The query counts itself, then its 3 nearest others:
    # group 0: 4 each; group 1: 40, 45, 50 find their 2 mates and 15 degrees (3 each),
    # 100 finds 95, 105, 90 or 110, all of group 2 (1); group 2: 90 finds 95, 100, 105,
    # 95 finds 90, 100, 105, 105 finds 100, 110, 95, 110 finds 105, 100, 95 (3 each).
    X = on_circle([0, 5, 10, 15, 40, 45, 50, 100, 90, 95, 105, 110])
    groups = np.repeat([0, 1, 2], 4)
    score, counts = ns_score(X, groups, np.ones(12, bool), return_per_query=True)
    assert counts.tolist() == [4, 4, 4, 4, 3, 3, 3, 1, 3, 3, 3, 3]
    assert score == pytest.approx(38 / 12)
    # Only the first image of each group as query (Holidays' protocol): 4, 3, 3.
    assert ns_score(X, groups, np.arange(12) % 4 == 0) == pytest.approx(10 / 3)


def test_perfect_and_independent_of_the_image_order():
    X = on_circle([0, 1, 2, 3, 60, 61, 62, 63, 120, 121, 122, 123])
    groups = np.repeat([0, 1, 2], 4)
    assert ns_score(X, groups, np.ones(12, bool)) == 4.0
    order = np.random.default_rng(0).permutation(12)
    X = on_circle([0, 5, 10, 15, 40, 45, 50, 100, 90, 95, 105, 110])
    assert ns_score(X[order], groups[order], np.ones(12, bool)) == pytest.approx(38 / 12)


def test_a_tied_negative_takes_the_place_and_the_query_counts_itself():
    # The query's one other place: a mate and a non-mate score alike; the non-mate wins it.
    X = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    for groups in ([0, 0, 1], [0, 1, 0]):
        counts = ns_score(X, np.array(groups), [True, False, False], depth=2, return_per_query=True)[1]
        assert counts.tolist() == [1]
    # Even when the query does not match itself best, it is counted first.
    X = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]])
    assert ns_score(X, np.array([0, 0, 1]), [True, False, False], depth=2) == 2.0
