"""UKBench's N-S score (ndir.evaluation.ns_score), hand-worked."""

import numpy as np
import pytest

from ndir.evaluation import ns_score
from ndir.report import with_ns_columns

from .conftest import SMALL_TRAINING


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


def test_table1_on_ukbench_shows_the_ns_score_beside_each_map_column():
    import pandas as pd

    from ndir.report import table1

    rows = pd.DataFrame(
        {
            "encoding": ["vlad", "vlad", "fv"],
            "K": [64, 64, 64],
            "dim": [5120, 5120, 10240],
            "R": [0, 32, 0],
            "map": [0.9, 0.8, 0.95],
            "ns": [3.5, 3.123, 3.75],
        }
    )
    table = with_ns_columns(table1(rows), table1(rows.assign(map=rows["ns"] / 100)))
    assert list(table.columns) == ["Sign.", "Dim.", "Full", "N-S Full", "32", "N-S 32"]
    assert table["Sign."].tolist() == ["VLAD-64", "FV-64"]
    assert table["N-S Full"].tolist() == [3.5, 3.75] and table["Full"].tolist() == [90.0, 95.0]
    assert table["N-S 32"].iloc[0] == 3.12 and np.isnan(table["N-S 32"].iloc[1])


def test_the_pca_baseline_stage_scores_ns_on_ukbench_only(tmp_path):
    import pandas as pd

    from ndir.stages.baseline import evaluate_pca_baseline

    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(12), 4)
    X = (rng.normal(size=(12, 16))[groups] + 0.8 * rng.normal(size=(48, 16))).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    np.save(tmp_path / "fv-2.npy", X)
    split = np.where(groups < 6, "train", "test")
    pd.DataFrame(
        {
            "image_id": [f"ukbench{i:05d}" for i in range(48)],
            "path": [f"ukbench{i:05d}.jpg" for i in range(48)],
            "group": groups,
            "is_query": True,
            "split": split,
        }
    ).to_csv(tmp_path / "images.csv", index=False)
    args = dict(images=tmp_path / "images.csv", signatures=tmp_path / "fv-2.npy", dims=[4])
    evaluate_pca_baseline(results=tmp_path / "ukbench.csv", ns_score=True, **args)
    rows = pd.read_csv(tmp_path / "ukbench.csv")
    test = split == "test"
    assert rows.loc[0, "ns"] == pytest.approx(ns_score(X[test], groups[test], np.ones(24, bool)))
    assert rows["ns"].between(1, 4).all() and rows.loc[0, "n_queries"] == 24
    evaluate_pca_baseline(results=tmp_path / "holidays.csv", **args)
    assert pd.read_csv(tmp_path / "holidays.csv")["ns"].isna().all()


def test_a_ukbench_training_records_the_ns_score_table2_reads(tmp_path):
    """train_sparse_projector with ns_score: every evaluation row has the test split's
    N-S under both scorings; the last equals ns_score of the saved projector's
    reductions, and final_maps(metric="ns") reads it for Table II."""
    import pandas as pd

    from ndir.encoding import l2_normalise_rows
    from ndir.projection import load_projector
    from ndir.stages.sparse import final_maps, train_sparse_projector

    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(16), 4)
    X = rng.standard_normal((16, 64))[groups] + rng.standard_normal((groups.size, 64))
    X = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)
    test = groups >= 8
    pd.DataFrame(
        {
            "image_id": np.arange(groups.size),
            "path": [f"{i}.jpg" for i in range(groups.size)],
            "group": groups,
            "is_query": True,
            "split": np.where(test, "test", "train"),
        }
    ).to_csv(tmp_path / "images.csv", index=False)
    np.save(tmp_path / "fv-16.npy", X)
    (tmp_path / "fv-16").mkdir()
    history = tmp_path / "fv-16" / "R4-tau0.5.csv"
    train_sparse_projector(
        images=tmp_path / "images.csv",
        signatures=tmp_path / "fv-16.npy",
        projector=tmp_path / "fv-16" / "R4-tau0.5.npz",
        history=history,
        max_iter=20,
        ns_score=True,
        **SMALL_TRAINING,
    )
    curve = pd.read_csv(history)
    evaluated = curve["test_map_dot"].notna()
    assert curve.loc[evaluated, ["test_ns_dot", "test_ns_l2"]].notna().all().all()
    U = load_projector(tmp_path / "fv-16" / "R4-tau0.5.npz")[0].toarray()
    Y = X[test].astype(np.float64) @ U
    last = curve.loc[evaluated].iloc[-1]
    assert last["test_ns_dot"] == pytest.approx(ns_score(Y, groups[test], np.ones(32, bool)))
    assert last["test_ns_l2"] == pytest.approx(ns_score(l2_normalise_rows(Y), groups[test], np.ones(32, bool)))
    scores = final_maps([history], metric="ns")
    assert scores["final"].iloc[0] == last["test_ns_l2"] and 1 <= scores["initial"].iloc[0] <= 4


def test_every_ukbench_test_image_counts_as_a_test_query(tmp_path):
    from ndir.report import test_queries
    from ndir.stages.data import index_dataset

    from .test_data import _photo, _write

    for i in range(32):
        _write(tmp_path / "ukbench" / f"ukbench{i:05d}.jpg", _photo(64, 80, seed=i))
    out = {name: tmp_path / name for name in ("images.csv", "skipped.csv", "report.json")}
    index_dataset(
        images=out["images.csv"],
        skipped=out["skipped.csv"],
        report=out["report.json"],
        kind="ukbench",
        root=tmp_path / "ukbench",
        train_fraction=0.5,
        keep_together=None,
        seed=0,
        descriptors={"max_width": 512, "step": 4, "cell_sizes": [4, 8]},
        max_dim=4,
    )
    assert test_queries(out["report.json"]) == 16  # 4 groups of 4 images, each a query
