import numpy as np
import pytest

from ndir.triplets import draw_negatives, positive_pairs, sample_triplets


def test_positive_pairs_hand_worked():
    groups = np.array([7, 7, 3, 7, 3])
    expected = [(0, 1), (0, 3), (1, 0), (1, 3), (2, 4), (3, 0), (3, 1), (4, 2)]
    assert [tuple(p) for p in positive_pairs(groups)] == expected


def test_sample_triplets_respects_groups_and_counts():
    groups = np.repeat(np.arange(6), 3)
    triplets = sample_triplets(groups, negatives_per_pair=4, random_state=0)
    assert triplets.shape == (len(positive_pairs(groups)) * 4, 3)
    i, j, l = triplets.T
    assert np.all(groups[i] == groups[j]) and np.all(i != j)
    assert np.all(groups[i] != groups[l])
    pairs, counts = np.unique(triplets[:, :2], axis=0, return_counts=True)
    assert len(pairs) == 6 * 6 and np.all(counts == 4)


def test_sample_triplets_deterministic():
    groups = np.repeat(np.arange(5), 2)
    a = sample_triplets(groups, 3, random_state=1)
    b = sample_triplets(groups, 3, random_state=1)
    np.testing.assert_array_equal(a, b)


def test_negatives_are_drawn_uniformly_from_the_other_groups():
    # Groups of unequal sizes: an anchor of group 0 (2 images) draws among the 7
    # others, each with probability 1/7; 70,000 draws give 10,000 each, give or take
    # 5 standard deviations (sqrt(70,000 * 1/7 * 6/7) = 93).
    groups = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2])
    rng = np.random.RandomState(0)
    negatives = draw_negatives(groups, np.zeros(70_000, dtype=int), rng)
    counts = np.bincount(negatives, minlength=groups.size)
    assert counts[:2].tolist() == [0, 0]
    assert np.all(np.abs(counts[2:] - 10_000) < 5 * 93), counts
    # Another seed, other draws.
    other = draw_negatives(groups, np.zeros(70_000, dtype=int), np.random.RandomState(1))
    assert not np.array_equal(negatives, other)


@pytest.mark.parametrize(
    "groups, message",
    [([0, 1, 2], "no group has two images"), ([0, 0, 0], "a single group")],
)
def test_sample_triplets_rejects_degenerate_groups(groups, message):
    with pytest.raises(ValueError, match=message):
        sample_triplets(np.array(groups), 2)
