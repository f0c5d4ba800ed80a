"""UKBench's N-S score (ndir.evaluation.ns_score), hand-worked."""

import json

import numpy as np
import pytest

from ndir.evaluation import ns_score
from ndir.report import with_ns_columns

from .conftest import size_limits_for, small_training
from .test_stages_jcf import small_set  # noqa: F401 (the fixture of the JCF stage tests)


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
    args = dict(
        images=tmp_path / "images.csv", signatures=tmp_path / "fv-2.npy", encoding="fv", codebook_size=2, dims=[4]
    )
    evaluate_pca_baseline(results=tmp_path / "ukbench.csv", ns_score=True, **args)
    rows = pd.read_csv(tmp_path / "ukbench.csv")
    test = split == "test"
    assert rows.loc[0, "ns"] == pytest.approx(ns_score(X[test], groups[test], np.ones(24, bool)))
    assert rows["ns"].between(1, 4).all() and rows.loc[0, "n_queries"] == 24
    evaluate_pca_baseline(results=tmp_path / "holidays.csv", ns_score=False, **args)
    assert pd.read_csv(tmp_path / "holidays.csv")["ns"].isna().all()


def test_a_ukbench_training_records_the_ns_score_table2_reads(tmp_path):
    """train_sparse_projector with ns_score: every evaluation row has the test split's
    N-S under both scorings; the last equals ns_score of the saved projector's
    reductions, and final_maps(metric="ns") reads it for Table II."""
    import pandas as pd

    from ndir.encoding import l2_normalise_rows
    from ndir.projection import load_projector
    from ndir.stages.baseline import evaluate_reduction_baselines
    from ndir.stages.sparse import final_maps, table2, train_sparse_projector

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
        encoding="fv",
        codebook_size=16,
        ns_score=True,
        **small_training(max_iter=20),
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

    # Table II (both scorings) shows each final N-S, out of 4, beside its mAP.
    baselines = tmp_path / "baselines.csv"
    evaluate_reduction_baselines(
        tmp_path / "images.csv",
        tmp_path / "fv-16.npy",
        baselines,
        "fv-16",
        [4],
        [0.5],
        [0],
        None,
        8,
        2,
        0,
        ns_score=False,
    )
    report = {"kind": "ukbench", "n_groups": 16, "splits": {"test": {"n_groups": 8, "n_images": 32, "n_queries": 32}}}
    (tmp_path / "report.json").write_text(json.dumps(report))
    l2, dot, ablation = (
        [str(tmp_path / f"{name}.{suffix}") for suffix in ("csv", "md", "tex")] for name in ("l2", "dot", "ablation")
    )
    table2([history], [baselines], tmp_path / "report.json", l2, dot, ablation)
    for scoring, shown in (("l2", last["test_ns_l2"]), ("dot", last["test_ns_dot"])):
        table = pd.read_csv(tmp_path / f"{scoring}.csv")
        assert list(table.columns) == ["Sign.", "50% R4", "N-S 50% R4"]
        assert table["N-S 50% R4"].iloc[0] == pytest.approx(shown, abs=0.005)


def test_every_ukbench_test_image_counts_as_a_test_query(tmp_path):
    from ndir.report import n_test_queries
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
        limits=size_limits_for(4),
        download_record=None,
    )
    assert n_test_queries(out["report.json"]) == 16  # 4 groups of 4 images, each a query


def _ukbench_like(folder, n_groups=16, dims=64, seed=3):
    """Noisy views of ``n_groups`` points in groups of 4 (half of them training), every
    image a query as on UKBench: the image table, FV-like signatures ``fv-16.npy`` and
    word counts ``bovw.npz``; returns their paths, the signatures and the groups."""
    import pandas as pd
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_groups), 4)
    X = rng.standard_normal((n_groups, dims))[groups] + rng.standard_normal((groups.size, dims))
    X = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)
    words = rng.poisson(2.0, size=(n_groups, 50))[groups] + rng.poisson(0.5, size=(groups.size, 50))
    split = np.where(groups < n_groups // 2, "train", "test")
    paths = {"images": folder / "images.csv", "signatures": folder / "fv-16.npy", "counts": folder / "bovw.npz"}
    pd.DataFrame(
        {"image_id": np.arange(groups.size), "path": [f"{i}.jpg" for i in range(groups.size)], "group": groups,
         "is_query": True, "split": split}
    ).to_csv(paths["images"], index=False)  # fmt: skip
    np.save(paths["signatures"], X)
    sp.save_npz(paths["counts"], sp.csr_matrix(words.astype(np.float64)))
    return paths, X, words, groups, split == "test"


def test_the_seeds_comparison_scores_ns_on_ukbench_only(tmp_path):
    """On UKBench every row of the seeds comparison (a score-pairs learner, PCA, a
    sparse rank projector, a baseline reduction) carries the N-S score of ns_score on
    its own test signatures, and the table shows it beside the mAP; elsewhere neither.
    Records or baselines written without it are refused on UKBench, naming the file."""
    import pandas as pd

    from ndir import bovw
    from ndir.encoding import l2_normalise_rows
    from ndir.errors import ResultFileError
    from ndir.projection import PCAProjection, load_projector
    from ndir.stages.baseline import evaluate_reduction_baselines
    from ndir.stages.seeds import evaluate_tfidf, seeds_comparison
    from ndir.stages.sparse import train_sparse_projector

    paths, X, words, groups, test = _ukbench_like(tmp_path)
    every = np.ones(test.sum(), bool)
    (tmp_path / "fv-16").mkdir()
    projector, history = tmp_path / "fv-16" / "R4-tau0.5.npz", tmp_path / "fv-16" / "R4-tau0.5.csv"
    train_sparse_projector(
        images=paths["images"], signatures=paths["signatures"], projector=projector, history=history, encoding="fv",
        codebook_size=16, ns_score=True, **small_training(max_iter=10),
    )  # fmt: skip

    def compare(folder, ns):
        folder.mkdir()
        evaluate_tfidf(paths["images"], paths["counts"], folder / "tfidf.json", ns_score=ns)
        evaluate_reduction_baselines(
            paths["images"], paths["signatures"], folder / "fv-16.csv", "fv-16", dims=[4], sparsity=[0.5],
            random_seeds=[0], pq_bytes=None, pq_nbits=8, pq_subvector_dims=2, seed=0, ns_score=ns,
        )  # fmt: skip
        seeds_comparison(
            paths["images"], [folder / "tfidf.json"], [paths["signatures"]], [projector], [history],
            [folder / "fv-16.csv"], [folder / f"table.{ext}" for ext in ("csv", "md", "tex")],
            [folder / "figure.png", folder / "figure.pdf"], folder / "records.csv", signature_names=["fv-16"], dims=[4],
            ns_score=ns,
        )  # fmt: skip
        return pd.read_csv(folder / "records.csv").set_index("method"), pd.read_csv(folder / "table.csv")

    records, table = compare(tmp_path / "ukbench", ns=True)
    X_train, X_test = X[~test], X[test]
    idf = bovw.inverse_document_frequency(words[~test])
    U = load_projector(projector)[0].toarray()
    expected = {
        "tf-idf": bovw.tfidf(words[test], idf).toarray(),
        "PCA R=4": PCAProjection(4).fit(X_train).transform(X_test),
        "sparse rank R=4 τ=0.5": l2_normalise_rows(X_test.astype(np.float64) @ U),
        "whitened PCA R=4": l2_normalise_rows(PCAProjection(4, whiten=True).fit(X_train).transform(X_test)),
    }
    for method, Y in expected.items():
        assert records.loc[method, "test_ns"] == pytest.approx(ns_score(Y, groups[test], every)), method
    assert records["test_ns"].between(1, 4).all() and records["test_ns"].nunique() > 2
    assert list(table.columns[table.columns.get_loc("Test mAP") :][:2]) == ["Test mAP", "N-S"]
    np.testing.assert_allclose(table.set_index("Method")["N-S"], records.loc[table["Method"], "test_ns"], atol=0.005)
    assert "N-S: UKBench's score" in (tmp_path / "ukbench" / "table.md").read_text()

    records, table = compare(tmp_path / "holidays", ns=False)
    assert "test_ns" not in records and "N-S" not in table
    assert "N-S" not in (tmp_path / "holidays" / "table.md").read_text()

    # Files an older ndir wrote (no N-S) on a UKBench run: refused, each named.
    stale = dict(
        images=paths["images"], signatures=[paths["signatures"]], projectors=[projector], histories=[history],
        table=[tmp_path / f"stale.{ext}" for ext in ("csv", "md", "tex")],
        figure=[tmp_path / "stale.png", tmp_path / "stale.pdf"], records_csv=tmp_path / "stale.csv",
        signature_names=["fv-16"], dims=[4], ns_score=True,
    )  # fmt: skip
    with pytest.raises(ResultFileError, match=r"holidays/tfidf.json: record without \['test_ns'\]"):
        seeds_comparison(records=[tmp_path / "holidays" / "tfidf.json"], baselines=[], **stale)
    with pytest.raises(ResultFileError, match=r"holidays/fv-16.csv: baselines without \['test_ns'\].*snakemake"):
        seeds_comparison(records=[], baselines=[tmp_path / "holidays" / "fv-16.csv"], **stale)


def test_jcf_records_score_ns_on_ukbench_only():
    """A JCF model's and a second-order pooling's records (from signatures and from
    their similarities) carry ns_score of the same test signatures with ns_score only."""
    from ndir.stages.jcf import jcf_record, pooling_record

    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(6), 4)
    Y = rng.standard_normal((6, 10))[groups] + 1.2 * rng.standard_normal((24, 10))
    Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    every = np.ones(24, bool)
    expected = ns_score(Y, groups, every)
    assert 1 < expected < 4
    learned = jcf_record("JCF", "local-fv-4", 4, 10, None, Y, groups, every, 40, 1.0, "learned", ns_score=True)
    pooled = pooling_record("local-pca-8", 1, 10, Y @ Y.T, groups, every, ns_score=True)
    assert learned["test_ns"] == pooled["test_ns"] == pytest.approx(expected)
    assert "test_ns" not in jcf_record("JCF", "local-fv-4", 4, 10, None, Y, groups, every, 40, 1.0, "learned")
    assert "test_ns" not in pooling_record("local-pca-8", 1, 10, Y @ Y.T, groups, every)


def test_every_rule_of_a_stage_that_scores_ns_passes_the_ukbench_flag():
    """A stage with an ``ns_score`` argument gets it from its rule as everywhere else:
    true exactly when dataset.kind is ukbench (a rule that left it out would write
    records without N-S, which the seeds comparison refuses only at the end)."""
    import importlib
    import inspect
    import re

    from .conftest import REPO

    flag = 'ns_score=config["dataset"]["kind"] == "ukbench",'
    rules = {}
    for path in (REPO / "workflow/rules").glob("*.smk"):
        for name, body in re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)*)", path.read_text(), re.MULTILINE):
            rules[name] = body
    scoring = []
    for name, body in rules.items():
        script = re.search(r'"\.\./scripts/(\w+)\.py"', body)
        if script is None:
            continue
        source = (REPO / "workflow/scripts" / f"{script.group(1)}.py").read_text()
        stage = re.search(r"run_rule\(snakemake, (\w+)\)", source).group(1)
        module = re.search(rf"from (ndir\.stages\.\w+) import {stage}\n", source).group(1)
        if "ns_score" in inspect.signature(getattr(importlib.import_module(module), stage)).parameters:
            scoring.append(name)
            assert flag in body, f"rule {name} does not pass {flag}"
    assert {"evaluate_tfidf", "train_soml", "train_similarity_matrix", "seeds_comparison", "train_jcf",
            "evaluate_second_order", "evaluate_reduction_baselines", "evaluate_pca_baseline",
            "train_sparse_projector", "train_sparse_projectors"} <= set(scoring)  # fmt: skip


def test_the_jcf_stages_write_the_ns_score_on_ukbench(small_set, tmp_path):  # noqa: F811 (the imported fixture)
    """evaluate_second_order and train_jcf pass their ns_score flag on to the records
    (the small JCF set of tests/test_stages_jcf.py: groups of 3, so at most 3 of 4)."""
    import json

    from ndir.stages.jcf import evaluate_second_order, train_jcf

    out = {name: tmp_path / f"run.{ext}" for name, ext in (("model", "npz"), ("record", "json"), ("history", "csv"))}
    out["random_record"] = tmp_path / "run-random.json"
    evaluate_second_order(small_set["images"], small_set["features"], tmp_path / "pooling.json",
                          tmp_path / "pooling.npy", 1, ns_score=True)  # fmt: skip
    train_jcf(
        small_set["images"], small_set["features"], **out, n_clusters=1, n_components=3, n_shared=None, seed=0,
        ns_score=True, settings=dict(
            margin=0.3, learning_rate=0.2, epochs=1, epochs_no_change=None, batch_groups=2, holdout_fraction=0.5,
            sqrt_eps=1e-4, posterior_threshold=0.0,
        ),
    )  # fmt: skip
    for path in (tmp_path / "pooling.json", out["record"], out["random_record"]):
        assert 1 <= json.loads(path.read_text())["test_ns"] <= 3, path.name
