"""Holidays mAP against hand-worked rankings and a slow port of the reference script."""

import numpy as np
import pytest
from scipy import stats

from ndir import evaluation
from ndir.evaluation import (
    average_precision,
    bootstrap_interval,
    holidays_map,
    map_from_scores,
    misses_near_duplicates,
    recall_at_k,
    top_k,
)


def reference_ap(ranks, n_positives):
    """``score_ap_from_ranks_1`` of holidays_map.py (Jégou), transcribed loop for loop."""
    ap = 0.0
    recall_step = 1.0 / n_positives
    for ntp, rank in enumerate(ranks):
        precision_0 = 1.0 if rank == 0 else ntp / float(rank)
        precision_1 = (ntp + 1) / float(rank + 1)
        ap += (precision_1 + precision_0) * recall_step / 2.0
    return ap


def slow_holidays_map(X, groups, is_query):
    """Per-query AP the way holidays_map.py walks a result list, one image at a time."""
    aps = []
    for q in np.flatnonzero(is_query):
        scores = [float(np.dot(X[q], X[j])) for j in range(len(X))]
        # Ties: negatives first (pessimistic), then row order (irrelevant to AP).
        results = sorted(range(len(X)), key=lambda j: (-scores[j], groups[j] == groups[q], j))
        n_positives = sum(1 for j in range(len(X)) if groups[j] == groups[q] and j != q)
        tp_ranks, rank_shift = [], 0
        for rank, j in enumerate(results):
            if j == q:
                rank_shift = -1
            elif groups[j] == groups[q]:
                tp_ranks.append(rank + rank_shift)
        aps.append(reference_ap(tp_ranks, n_positives))
    return np.array(aps)


@pytest.mark.parametrize(
    ("ranks", "n_positives", "expected"),
    [
        # Perfect ranking: (1 + 1)/2 + (1/1 + 2/2)/2 = 2, times recall step 1/2 -> 1.
        ([0, 1], 2, 1.0),
        # A lone positive at rank 0: the first trapezoid is a (1 + 1)/2 square -> 1.
        ([0], 1, 1.0),
        # A lone positive at rank 2: its trapezoid starts at precision 0/2 = 0 and ends at
        # 1/3, area (0 + 1/3)/2 = 1/6 (a non-interpolated AP would give 1/3).
        ([2], 1, 1.0 / 6.0),
        # Ranks 1 and 3: (0/1 + 1/2)/2 + (1/3 + 2/4)/2 = 1/4 + 5/12 = 2/3, over 2 -> 1/3
        # (non-interpolated AP: (1/2 + 2/4)/2 = 1/2).
        ([1, 3], 2, 1.0 / 3.0),
        # Ranks 0 and 2 out of 3 positives (one never returned):
        # (1 + 1)/2 + (1/2 + 2/3)/2 = 1 + 7/12 = 19/12, over 3 -> 19/36.
        ([0, 2], 3, 19.0 / 36.0),
        # Nothing found.
        ([], 2, 0.0),
    ],
)
def test_average_precision_hand_worked(ranks, n_positives, expected):
    assert average_precision(ranks, n_positives) == pytest.approx(expected, abs=1e-12)
    assert reference_ap(ranks, n_positives) == pytest.approx(expected, abs=1e-12)


def test_average_precision_matches_reference_loop():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n_positives = int(rng.integers(1, 6))
        n_found = int(rng.integers(0, n_positives + 1))
        ranks = np.sort(rng.choice(30, size=n_found, replace=False))
        assert average_precision(ranks, n_positives) == pytest.approx(
            reference_ap(ranks.tolist(), n_positives), abs=1e-12
        )


@pytest.mark.parametrize(
    ("ranks", "n_positives"),
    [([1, 1], 2), ([2, 1], 2), ([-1], 1), ([0, 1], 1), ([], 0)],
)
def test_average_precision_rejects_bad_input(ranks, n_positives):
    with pytest.raises(ValueError):
        average_precision(ranks, n_positives)


def test_query_own_row_is_excluded_wherever_it_scores():
    # Query row 0 (group 0) scores itself 2, between the others. Its result list without
    # itself is rows 1, 2, 3, so its positive (row 3) is at rank 2: AP = (0/2 + 1/3)/2.
    # Keeping the query in the list would put the positive at rank 3 (AP 1/8).
    scores = np.array([[2.0, 3.0, 1.0, 0.0]])
    groups = np.array([0, 1, 1, 0])
    assert map_from_scores(scores, [0], groups) == pytest.approx(1.0 / 6.0, abs=1e-12)


def test_ties_are_broken_pessimistically_whatever_the_row_order():
    # Rows 1 and 2 tie at 5, one negative and one positive: the negative is ranked
    # first in both row orders, so the positive is at rank 1 -> AP = (0/1 + 1/2)/2 = 1/4
    # (row order would have given 1 to the second table).
    scores = np.array([[9.0, 5.0, 5.0, 1.0]])
    assert map_from_scores(scores, [0], np.array([0, 1, 0, 1])) == pytest.approx(0.25)
    assert map_from_scores(scores, [0], np.array([0, 0, 1, 1])) == pytest.approx(0.25)
    # Two positives tied with two negatives, all at the top: ranks 2 and 3 ->
    # ((0/2 + 1/3) + (1/3 + 2/4)) / 2 / 2 = 7/24.
    tied = np.array([[0.0, 1.0, 1.0, 1.0, 1.0]])
    assert map_from_scores(tied, [0], np.array([0, 0, 1, 0, 1])) == pytest.approx(7 / 24)


def test_top_k_puts_a_tied_negative_before_the_positive_as_the_ap_does():
    # Query row 0: rows 1 (negative) and 2 (positive) tie at 1, row 3 (negative) is
    # below; the query's own row is left out. Rank 0: the tied negative, rank 1: the
    # positive, so AP = (0/1 + 1/2) / 2 = 1/4, whichever row comes first.
    for order in ([0, 1, 2, 3], [0, 2, 1, 3]):
        Y = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])[order]
        groups = np.array([0, 1, 0, 2])[order]
        top, ap = top_k(Y, [0], groups, 3)
        assert groups[top[0]].tolist() == [1, 0, 2]
        assert ap.tolist() == [0.25]


def test_quantised_scores_match_the_slow_loop_and_do_not_depend_on_row_order():
    """Sparse scorers tie often: scores rounded to 0.5 tie in most lists."""
    rng = np.random.default_rng(2)
    groups = np.repeat(np.arange(12), 3)
    is_query = np.r_[True, np.diff(groups) != 0]
    X = np.round(2 * rng.normal(size=(groups.size, 2))) / 2
    mean_ap, ap = holidays_map(X, groups, is_query, return_per_query=True)
    np.testing.assert_allclose(ap, slow_holidays_map(X, groups, is_query), atol=1e-12)
    permutation = rng.permutation(groups.size)
    assert holidays_map(X[permutation], groups[permutation], is_query[permutation]) == pytest.approx(mean_ap, abs=1e-12)


def sorted_list_aps(scores, query_rows, groups):
    """Per-query AP through a full ranking of every list (a stable sort by decreasing
    score, negatives first among ties), summed along the whole list."""
    n_queries = query_rows.size
    masked = np.array(scores, dtype=np.float64)
    masked[np.arange(n_queries), query_rows] = -np.inf
    positive = groups[None, :] == groups[query_rows][:, None]
    order = np.lexsort((positive, -masked), axis=1)[:, :-1]
    is_positive = np.take_along_axis(positive, order, axis=1)
    ranks = np.broadcast_to(np.arange(order.shape[1], dtype=np.float64), order.shape)
    n_before = np.cumsum(is_positive, axis=1, dtype=np.float64) - 1.0
    p0 = np.divide(n_before, ranks, out=np.ones_like(ranks), where=ranks > 0)
    p1 = (n_before + 1.0) / (ranks + 1.0)
    return np.where(is_positive, (p0 + p1) / 2.0, 0.0).sum(axis=1) / (positive.sum(axis=1) - 1)


@pytest.mark.parametrize("kind", ["continuous", "rounded", "binary"])
@pytest.mark.parametrize("compared_max", [2**22, 500])
def test_map_equals_a_full_ranking_to_the_last_bit(kind, compared_max, monkeypatch):
    """map_from_scores counts ranks instead of sorting; the histories and tables must
    not move by a bit for that, whatever the ties (and in chunks of positives too)."""
    monkeypatch.setattr(evaluation, "_COMPARED_SCORES_MAX", compared_max)
    rng = np.random.default_rng(3)
    group_sizes = rng.integers(2, 7, size=40)
    groups = rng.permutation(np.repeat(np.arange(group_sizes.size), group_sizes))
    query_rows = rng.permutation(np.unique(groups, return_index=True)[1])
    X = rng.normal(size=(groups.size, 6)).astype(np.float32)
    if kind == "rounded":
        X = np.round(X)
    elif kind == "binary":
        X = (rng.random(X.shape) < 0.15).astype(np.float32)
    scores = X[query_rows] @ X.T
    mean_ap, ap = map_from_scores(scores, query_rows, groups, return_per_query=True)
    expected = sorted_list_aps(scores, query_rows, groups)
    assert np.array_equal(ap, expected)
    assert mean_ap == float(expected.mean())


def test_holidays_map_on_tied_signatures():
    # Rows 1 and 2 are the same vector, so query 0 ties them: row 1 (group 1) wins.
    X = np.array([[1, 0], [0.6, 0.8], [0.6, 0.8], [0, 1]], dtype=np.float32)
    groups = np.array([0, 1, 0, 1])
    is_query = np.array([True, True, False, False])
    mean_ap, ap = holidays_map(X, groups, is_query, return_per_query=True)
    # Query 1: list rows 2 (1.0), 3 (0.8), 0 (0.6); positive row 3 at rank 1 -> 1/4.
    np.testing.assert_allclose(ap, [0.25, 0.25], atol=1e-12)
    assert mean_ap == pytest.approx(0.25)


def test_holidays_map_matches_slow_loop_on_random_data():
    rng = np.random.default_rng(1)
    group_sizes = rng.integers(2, 6, size=25)
    groups = np.repeat(np.arange(group_sizes.size), group_sizes)
    is_query = np.r_[True, np.diff(groups) != 0]
    centres = rng.normal(size=(group_sizes.size, 12))
    X = centres[groups] + 1.5 * rng.normal(size=(groups.size, 12))
    X /= np.linalg.norm(X, axis=1, keepdims=True)

    mean_ap, ap = holidays_map(X, groups, is_query, return_per_query=True)
    expected = slow_holidays_map(X, groups, is_query)
    np.testing.assert_allclose(ap, expected, atol=1e-12)
    assert mean_ap == pytest.approx(expected.mean(), abs=1e-12)
    assert 0.2 < mean_ap < 0.95  # neither trivial nor hopeless, so ranks matter
    assert holidays_map(X.astype(np.float32), groups, is_query) == pytest.approx(mean_ap, abs=1e-6)


def test_perfect_signatures_give_map_one():
    groups = np.repeat(np.arange(4), 3)
    X = np.eye(4, dtype=np.float32)[groups]
    assert holidays_map(X, groups, np.tile([True, False, False], 4)) == 1.0


def test_group_without_positive_is_rejected():
    groups = np.array([0, 0, 1])
    with pytest.raises(ValueError, match=r"groups \[1\]"):
        holidays_map(np.eye(3, dtype=np.float32), groups, [True, False, True])


def test_bad_shapes_and_values_are_rejected():
    groups = np.array([0, 0, 1, 1])
    with pytest.raises(ValueError, match="shape"):
        map_from_scores(np.zeros((1, 3)), [0], groups)
    with pytest.raises(ValueError, match="NaN"):
        map_from_scores(np.array([[0.0, np.nan, 1.0, 2.0]]), [0], groups)
    with pytest.raises(ValueError, match="same images"):
        holidays_map(np.zeros((3, 2), np.float32), groups, [True, False, True, False])
    with pytest.raises(ValueError, match="no query"):
        holidays_map(np.zeros((4, 2), np.float32), groups, [False] * 4)


def test_bootstrap_interval_hand_worked_and_against_scipy():
    # Constant APs: every resample has the same mean.
    assert bootstrap_interval([0.4] * 7) == pytest.approx((0.4, 0.4))
    # APs [0, 1, 1]: a resample's mean is 1 - (zeros drawn) / 3, zeros ~ Binomial(3, 1/3):
    # P(mean = 0) = 1/27 = 3.7 % > 2.5 %, P(mean = 1) = 8/27 = 29.6 % > 2.5 %: (0, 1).
    assert bootstrap_interval([0.0, 1.0, 1.0], n_resamples=20000) == pytest.approx((0.0, 1.0))
    # An independent implementation of the same percentile interval.
    ap = np.random.default_rng(5).uniform(size=40)
    reference = stats.bootstrap((ap,), np.mean, n_resamples=20000, method="percentile", random_state=1)
    low, high = bootstrap_interval(ap, n_resamples=20000)
    # Two seeds' resampling noise (0.0014 measured), well below the 0.015 between a 95 %
    # and a 90 % interval here.
    assert low == pytest.approx(reference.confidence_interval.low, abs=0.004)
    assert high == pytest.approx(reference.confidence_interval.high, abs=0.004)
    assert bootstrap_interval(ap) == bootstrap_interval(ap)  # seeded
    with pytest.raises(ValueError, match="level"):
        bootstrap_interval(ap, level=95)


def test_bootstrap_interval_at_other_levels_hand_worked():
    """APs [0, 1, 1]: a resample's mean is 1 - Z / 3 with Z ~ Binomial(3, 1/3) zeros
    drawn: P(mean = 0) = 1/27, P(1/3) = 6/27, P(2/3) = 12/27, P(1) = 8/27, so the CDF
    is .037, .259, .704, 1. Level .5 takes the 25th and 75th percentiles: 1/3 (the CDF
    first passes .25 there) and 1 (.704 < .75). Level .3 (35th and 65th): 2/3 and 2/3.
    Each boundary is at least 3 standard deviations of a 20,000-resample CDF away.
    Against scipy's percentile bootstrap at level .5 on 40 uniform APs, too, and
    narrower than the .95 interval, within it."""
    assert bootstrap_interval([0.0, 1.0, 1.0], level=0.5, n_resamples=20000) == pytest.approx((1 / 3, 1.0))
    assert bootstrap_interval([0.0, 1.0, 1.0], level=0.3, n_resamples=20000) == pytest.approx((2 / 3, 2 / 3))
    ap = np.random.default_rng(6).uniform(size=40)
    reference = stats.bootstrap(
        (ap,), np.mean, n_resamples=20000, method="percentile", confidence_level=0.5, random_state=2
    )
    low, high = bootstrap_interval(ap, level=0.5, n_resamples=20000)
    assert low == pytest.approx(reference.confidence_interval.low, abs=0.005)
    assert high == pytest.approx(reference.confidence_interval.high, abs=0.005)
    wide_low, wide_high = bootstrap_interval(ap, level=0.95, n_resamples=20000)
    assert wide_low < low < ap.mean() < high < wide_high


def test_holidays_map_ranks_scores_that_float32_sums_would_tie():
    # q.p = 1 + 2^-30 beats q.n = 1, but a float32 sum rounds it to 1, a tie that
    # ranks the negative first (AP 1/2): the scores are summed in float64 (AP 1).
    X = np.array([[1.0, 1.0], [1.0, 2.0**-30], [1.0, 0.0]], dtype=np.float32)
    groups = np.array([0, 0, 1])
    is_query = np.array([True, False, False])
    assert holidays_map(X, groups, is_query) == 1.0


def test_misses_near_duplicates_compares_hits_with_the_room_for_them():
    """Hand-worked, groups of 3, 2 and 4 images: a top-3 list misses near duplicates
    when it holds fewer than min(3, n_positives) of them."""
    groups = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])
    queries = [0, 3, 5, 0]
    top = np.array(
        [
            [1, 3, 4],  # 1 of its 2 positives: a miss
            [4, 0, 1],  # its only positive: none missed
            [6, 7, 8],  # 3 of 3 positives: none missed
            [2, 1, 8],  # 2 of 2: none missed
        ]
    )
    assert misses_near_duplicates(top, queries, groups).tolist() == [True, False, False, False]
    # With room for one: only the list whose first is a negative misses.
    assert misses_near_duplicates(top[:, :1], queries, groups).tolist() == [False, False, False, False]
    assert misses_near_duplicates(top[:, 1:2], queries, groups).tolist() == [True, True, False, False]


def test_bootstrap_interval_defaults_are_the_documented_ones():
    """The tables' intervals are reproducible: the defaults are level 0.95, 2000
    resamples and seed 0, and another seed or count moves the bounds."""
    ap = np.random.default_rng(7).uniform(size=23)
    default = bootstrap_interval(ap)
    assert default == bootstrap_interval(ap, level=0.95, n_resamples=2000, seed=0)
    assert default != bootstrap_interval(ap, seed=1) and default != bootstrap_interval(ap, n_resamples=2001)


@pytest.mark.parametrize("level", [0.0, -0.5, 1.0, 95])
def test_bootstrap_interval_refuses_a_level_outside_0_1(level):
    with pytest.raises(ValueError, match="level must be in"):
        bootstrap_interval([0.5, 1.0], level=level)
    assert bootstrap_interval([0.5, 1.0], level=0.999)[0] >= 0.5


def test_recall_of_no_image_is_refused():
    with pytest.raises(ValueError, match="no query to evaluate"):
        recall_at_k(np.zeros((0, 3)), np.zeros(0, dtype=int))


def test_precomputed_scores_must_be_square_whatever_string_names_the_metric():
    metric = "".join(["pre", "computed"])  # built at run time, as a config value is
    with pytest.raises(ValueError, match=r"expected \(n_images, n_images\)"):
        recall_at_k(np.zeros((4, 3)), [0, 0, 1, 1], metric=metric)


def test_shapes_that_do_not_describe_the_same_images_are_refused():
    groups, is_query = np.array([0, 0, 1, 1]), np.array([True, False, True, False])
    for rows in (3, 5):
        with pytest.raises(ValueError, match="must describe the same images"):
            holidays_map(np.ones((rows, 2)), groups, is_query)
        with pytest.raises(ValueError, match=r"expected \(n_images, D\) with n_images = 4"):
            recall_at_k(np.ones((rows, 2)), groups)
    with pytest.raises(ValueError, match=r"expected \(n_images, n_images\)"):
        recall_at_k(np.ones((4, 3)), groups, metric="precomputed")
    for queries in (is_query[:3], np.append(is_query, False)):
        with pytest.raises(ValueError, match="must describe the same images"):
            holidays_map(np.ones((4, 2)), groups, queries)
    with pytest.raises(ValueError, match=r"X has shape \(4,\); expected \(n_images, D\)"):
        recall_at_k(np.ones(4), groups)


def test_bootstrap_interval_is_the_central_percentiles_of_seeded_resampled_means():
    """As documented: n_resamples means of the APs resampled with replacement by
    numpy.random.default_rng(seed), and their (1 - level) / 2 and (1 + level) / 2
    percentiles."""
    ap = np.random.default_rng(8).uniform(size=17)
    rng = np.random.default_rng(3)
    means = ap[rng.integers(0, ap.size, size=(500, ap.size))].mean(axis=1)
    assert bootstrap_interval(ap, level=0.9, n_resamples=500, seed=3) == tuple(np.percentile(means, [5.0, 95.0]))
