"""The workflow's stage functions (:mod:`ndir.stages`), run without Snakemake on small folders."""

import itertools
import json
import logging
import time
from types import SimpleNamespace

import cv2
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from ndir.atomic import atomic_output
from ndir.data import build_embedded_dataset
from ndir.errors import ConfigError, DatasetError
from ndir.projection.sparse_rank import STOP_CALLBACK, STOP_MAX_ITER
from ndir.stages.baseline import table1
from ndir.stages.common import run_rule, shard_rows, split_together
from ndir.stages.data import index_dataset, input_summary

from .conftest import size_limits_for, small_training

DESCRIPTORS = {"max_width": 512, "step": 4, "cell_sizes": [4, 8]}


def _write_holidays(folder, n_groups, per_group=3, size=(96, 128)):
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for group in range(n_groups):
        base = rng.integers(0, 256, size=size, dtype=np.uint8)
        for view in range(per_group):
            noisy = np.clip(base + rng.normal(0, 8, size=size), 0, 255).astype(np.uint8)
            cv2.imwrite(str(folder / f"{100000 + 100 * group + view}.jpg"), noisy)
    return folder


def _index(folder, tmp_path, max_dim=4, keep_together=None, kind="holidays"):
    outputs = {name: str(tmp_path / f"out/{name}") for name in ("images.csv", "skipped.csv", "report.json")}
    index_dataset(
        images=outputs["images.csv"],
        skipped=outputs["skipped.csv"],
        report=outputs["report.json"],
        kind=kind,
        root=str(folder),
        train_fraction=0.5,
        keep_together=keep_together,
        seed=0,
        descriptors=DESCRIPTORS,
        limits=size_limits_for(max_dim),
        download_record=None,
    )
    return (
        pd.read_csv(outputs["images.csv"]),
        pd.read_csv(outputs["skipped.csv"]),
        json.loads(open(outputs["report.json"]).read()),
    )


def test_a_keep_together_table_keeps_its_groups_on_one_side(tmp_path):
    """A real data set in Holidays naming with a table of scenes: the six groups of
    scene "s" (and the two of "t") land on one side of the split, whatever the seed."""
    folder = _write_holidays(tmp_path / "holidays", n_groups=12, per_group=2)
    table = tmp_path / "scenes.csv"
    rows = [f"{100000 + 100 * g}.jpg,s" for g in range(6)] + ["100600.jpg,t", "100701.jpg,t"]
    table.write_text("file,scene\n" + "\n".join(rows) + "\n")
    images, _, report = _index(folder, tmp_path, keep_together={"table": str(table), "column": "scene"})
    side = images.groupby("group")["split"].first()
    assert side.loc[1000:1005].nunique() == 1 and side[1006] == side[1007]
    assert (side == "train").sum() == 6 and report["kept_together"] == "scene"
    # The labels stay in the table, missing where the table lists no image, for the
    # learners' hold-outs (split_together).
    labels = images.set_index("image_id")["together"]
    assert labels[100000] == labels[100500] == "s" and labels[100600] == labels[100701] == "t"
    assert labels.isna().sum() == len(images) - 8
    train = split_together(tmp_path / "out/images.csv", "train")
    expected = images.loc[images["split"] == "train", "together"]
    assert pd.Series(train).fillna("").tolist() == expected.fillna("").tolist()


def test_bad_images_are_skipped_logged_and_counted(tmp_path, caplog):
    folder = _write_holidays(tmp_path / "holidays", n_groups=12)
    good = (folder / "100101.jpg").read_bytes()
    (folder / "100102.jpg").write_bytes(good[: len(good) // 2])  # truncated JPEG
    (folder / "100201.jpg").write_bytes(b"not an image at all")  # non-image file
    cv2.imwrite(str(folder / "100301.png"), np.zeros((10, 10), np.uint8))  # smaller than a patch
    (folder / "100302.jpg").unlink()
    (folder / "100300.jpg").unlink()  # group 1003 keeps the tiny image and one more
    (folder / "notes.txt").write_text("a file that is not part of the data set")
    images, skipped, report = _index(folder, tmp_path)

    reasons = dict(zip(skipped["path"].map(lambda p: p.rsplit("/", 1)[-1]), skipped["reason"]))
    assert {"100102.jpg", "100201.jpg", "notes.txt"} <= set(reasons)
    assert report["n_images"] == len(images)
    assert report["n_images"] + report["n_images_skipped"] == report["n_images_found"]
    assert report["n_files_ignored"] >= 1
    assert not set(images["image_id"]) & {"100102", "100201"}
    assert "100102.jpg" in caplog.text
    # The line the workflow prints on the console at the end of the run.
    listing = tmp_path / "out/skipped.csv"
    assert (report["n_images_skipped"], report["n_files_ignored"]) == (2, 3)
    # One query per Holidays group: as many test queries as test groups.
    assert report["splits"]["test"]["n_queries"] == report["splits"]["test"]["n_groups"]
    from ndir.report import n_test_queries

    assert n_test_queries(tmp_path / "out/report.json") == report["splits"]["test"]["n_groups"]
    assert input_summary(tmp_path / "out/report.json", listing) == (
        f"ndir: {len(images)} images of {folder} used; 2 skipped as unusable and 3 other files ignored, "
        f"each listed with its reason in {listing}"
    )
    assert len(pd.read_csv(listing)) == report["n_images_skipped"] + report["n_files_ignored"]


def test_a_data_set_with_nothing_left_out_adds_no_line_to_the_console(tmp_path):
    _write_holidays(tmp_path / "holidays", n_groups=4)
    _index(tmp_path / "holidays", tmp_path)
    assert input_summary(tmp_path / "out/report.json", tmp_path / "out/skipped.csv") is None
    assert input_summary(tmp_path / "absent.json", tmp_path / "out/skipped.csv") is None


def test_too_few_training_images_names_the_key(tmp_path):
    folder = _write_holidays(tmp_path / "holidays", n_groups=4)
    with pytest.raises(ConfigError, match="baseline.dims"):
        _index(folder, tmp_path, max_dim=32)
    # 2 training groups of 3 images: N = 6; R = N - 1 = 5 is refused (the centred matrix
    # has rank N - 1 at most), R = N - 2 = 4 passes.
    with pytest.raises(ConfigError, match=r"sparse.dims: \[5\] too large for PCA on 6 training images") as refused:
        _index(folder, tmp_path, max_dim=5)
    # The message names the folder, the counts and the largest R that fits.
    assert str(refused.value).startswith(f"dataset.path: {folder}: 6 training images in 2 groups, 2 test groups")
    assert "use at most 4, or a larger data set" in str(refused.value)
    images, _, _ = _index(folder, tmp_path, max_dim=4)
    assert (images["split"] == "train").sum() == 6
    embedded = build_embedded_dataset(tmp_path / "embedded", n_groups=4, seed=0, view_size=96)
    with pytest.raises(ConfigError) as refused:
        _index(tmp_path / "embedded", tmp_path, max_dim=len(embedded), kind="embedded")
    assert str(refused.value).startswith("embedded.n_groups (the embedded set): ")


def test_missing_folder_names_it(tmp_path):
    with pytest.raises(DatasetError, match="nowhere"):
        _index(tmp_path / "nowhere", tmp_path)


def test_a_failed_stage_leaves_no_output(tmp_path):
    target = tmp_path / "table.csv"
    with pytest.raises(RuntimeError), atomic_output(target) as tmp:
        open(tmp, "w").write("half a table")
        raise RuntimeError("crash while writing")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_shards_cover_every_image_once():
    rows = [shard_rows(10, s, 3) for s in range(3)]
    covered = np.concatenate([np.arange(10)[r] for r in rows])
    assert np.array_equal(covered, np.arange(10))


class _Named(dict):
    """A Snakemake job's named ``input``, ``output`` or ``params``: ``.items()`` of names."""


def _fake_job(tmp_path):
    return SimpleNamespace(
        input=_Named(images=str(tmp_path / "images.csv")),
        output=_Named(table=str(tmp_path / "table.csv")),
        params=_Named(seed=3),
        log=[str(tmp_path / "job.log")],
        threads=1,
    )


def _failing_stage(error):
    def stage(images, table, seed):
        logging.getLogger("ndir.stages.test").info("stage started with seed %d", seed)
        raise error

    return stage


def test_a_failing_stage_leaves_its_traceback_in_the_log(tmp_path, capsys):
    """Any error, not only bad input, is logged with its traceback before it propagates,
    and the console line names the log."""
    job = _fake_job(tmp_path)
    with pytest.raises(ValueError, match="singular matrix"):
        run_rule(job, _failing_stage(ValueError("singular matrix")))
    assert capsys.readouterr().err == f"ndir: stage failed: ValueError: singular matrix (traceback in {job.log[0]})\n"
    log = (tmp_path / "job.log").read_text()
    assert "stage started with seed 3" in log
    assert "Traceback (most recent call last)" in log
    assert "ValueError: singular matrix" in log
    assert "in stage\n    raise error" in log


def test_bad_input_ends_the_job_with_one_line_and_a_logged_traceback(tmp_path, capsys):
    """Bad input exits with status 1 and a one-line message on stderr; the log has the traceback."""
    job = _fake_job(tmp_path)
    error = DatasetError("data/holidays: no images found")
    with pytest.raises(SystemExit) as exit_info:
        run_rule(job, _failing_stage(error))
    assert exit_info.value.code == 1
    assert exit_info.value.__cause__ is error
    assert capsys.readouterr().err == f"ndir: error: data/holidays: no images found (traceback in {job.log[0]})\n"
    log = (tmp_path / "job.log").read_text()
    assert "Traceback (most recent call last)" in log
    assert "ndir.errors.DatasetError: data/holidays: no images found" in log
    assert "in stage\n    raise error" in log


def _data_report(path, kind, n_images, n_groups):
    report = {
        "kind": kind,
        "n_images_found": n_images,
        "n_images": n_images,
        "n_groups": n_groups,
        "splits": {"test": {"n_groups": n_groups // 2, "n_images": n_images // 2}},
    }
    path.write_text(json.dumps(report))
    return path


@pytest.mark.parametrize(
    ("kind", "n_images", "n_groups", "with_paper", "says"),
    [
        ("holidays", 1491, 500, True, "INRIA Holidays (1,491 images, 500 groups)"),
        # The folder: real photos in Holidays naming, not INRIA Holidays.
        ("holidays", 98, 31, False, "not INRIA Holidays (98 images, 31 groups"),
        ("embedded", 629, 200, False, "shown only on INRIA Holidays"),
        # Holidays naming and 500 groups but an image short of 1,491.
        ("holidays", 1490, 500, False, "not INRIA Holidays (1,490 images, 500 groups"),
        # INRIA Holidays' counts in another layout.
        ("folders", 1491, 500, False, "shown only on INRIA Holidays"),
    ],
)
def test_paper_columns_only_on_inria_holidays(tmp_path, kind, n_images, n_groups, with_paper, says):
    results = tmp_path / "fv-64.csv"
    pd.DataFrame(
        {
            "signature": "fv-64",
            "encoding": "fv",
            "K": 64,
            "dim": 10240,
            "R": [0, 32],
            "map": [0.8, 0.6],
            "n_queries": 500,
        }
    ).to_csv(results, index=False)
    report = _data_report(tmp_path / "report.json", kind, n_images, n_groups)
    table1([str(results)], str(report), [str(tmp_path / f"table1.{suffix}") for suffix in ("csv", "md", "tex")])
    table = pd.read_csv(tmp_path / "table1.csv")
    assert ("Full (paper)" in table.columns) == with_paper
    assert table.loc[0, "Full"] == 80.0
    assert says in (tmp_path / "table1.md").read_text()


def test_table1_rows_carry_95_percent_intervals_printed_when_queries_are_few(tmp_path):
    """evaluate_pca_baseline's map_low and map_high are the 95 % bootstrap interval of
    its per-query APs (recomputed here from holidays_map), and table1 prints them
    beside each mAP in the Markdown table when the test split has fewer than
    INTERVAL_MAX_QUERIES queries, not otherwise."""
    from ndir.evaluation import bootstrap_interval, holidays_map
    from ndir.stages.baseline import evaluate_pca_baseline
    from ndir.stages.common import split_signatures

    rng = np.random.default_rng(4)
    groups = np.repeat(np.arange(24), 3)
    table = pd.DataFrame(
        {
            "image_id": [f"i{j}" for j in range(groups.size)], "path": "x", "group": groups,
            "is_query": np.arange(groups.size) % 3 == 0, "split": np.where(groups < 12, "train", "test"),
        }
    )  # fmt: skip
    table.to_csv(tmp_path / "images.csv", index=False)
    centres = rng.normal(size=(24, 16))
    np.save(tmp_path / "fv-8.npy", (centres[groups] + 1.2 * rng.normal(size=(groups.size, 16))).astype(np.float32))
    results = tmp_path / "fv-8.csv"
    evaluate_pca_baseline(tmp_path / "images.csv", tmp_path / "fv-8.npy", results, "fv", 8, dims=[4], ns_score=False)
    rows = pd.read_csv(results)
    X, test_groups, is_query = split_signatures(tmp_path / "images.csv", tmp_path / "fv-8.npy")["test"]
    mean_ap, ap = holidays_map(X, test_groups, is_query, return_per_query=True)
    assert rows.loc[0, "map"] == pytest.approx(mean_ap) and rows.loc[0, "n_queries"] == 12
    low, high = bootstrap_interval(ap, level=0.95)
    assert (rows.loc[0, "map_low"], rows.loc[0, "map_high"]) == pytest.approx((low, high))
    assert low < bootstrap_interval(ap, level=0.5)[0] and low < mean_ap < high

    report = _data_report(tmp_path / "report.json", "holidays", 72, 24)
    stems = [str(tmp_path / f"table1.{suffix}") for suffix in ("csv", "md", "tex")]
    table1([str(results)], str(report), stems)
    markdown = (tmp_path / "table1.md").read_text()
    assert f"{100 * mean_ap:.2f} [{100 * low:.1f}, {100 * high:.1f}]" in markdown
    rows.assign(n_queries=100).to_csv(results, index=False)
    table1([str(results)], str(report), stems)
    assert f"{100 * mean_ap:.2f} [" not in (tmp_path / "table1.md").read_text()


def test_table1_shows_each_signatures_dim_and_its_ns_score_out_of_4_on_ukbench(tmp_path):
    """evaluate_pca_baseline writes the columns its docstring lists, in that order, with
    the signature's dimension; Table I shows each N-S score (out of 4, 2 decimals)
    beside its mAP."""
    from ndir.evaluation import ns_score
    from ndir.stages.baseline import evaluate_pca_baseline

    rng = np.random.default_rng(5)
    groups = np.repeat(np.arange(16), 4)
    table = pd.DataFrame(
        {
            "image_id": [f"ukbench{j:05d}" for j in range(groups.size)], "path": "x", "group": groups,
            "is_query": True, "split": np.where(groups < 8, "train", "test"),
        }
    )  # fmt: skip
    table.to_csv(tmp_path / "images.csv", index=False)
    X = (rng.normal(size=(16, 12))[groups] + 0.9 * rng.normal(size=(groups.size, 12))).astype(np.float32)
    np.save(tmp_path / "vlad-4.npy", X)
    results = tmp_path / "vlad-4.csv"
    evaluate_pca_baseline(tmp_path / "images.csv", tmp_path / "vlad-4.npy", results, "vlad", 4, dims=[3], ns_score=True)
    rows = pd.read_csv(results)
    columns = ["signature", "encoding", "K", "dim", "R", "map", "n_queries", "map_low", "map_high", "ns"]
    assert list(rows.columns) == columns
    assert rows["dim"].tolist() == [12, 12] and rows["R"].tolist() == [0, 3]
    test = groups >= 8
    assert rows.loc[0, "ns"] == pytest.approx(ns_score(X[test], groups[test], np.ones(32, bool)))

    report = _data_report(tmp_path / "report.json", "ukbench", 64, 16)
    table1([str(results)], str(report), [str(tmp_path / f"table1.{suffix}") for suffix in ("csv", "md", "tex")])
    shown = pd.read_csv(tmp_path / "table1.csv")
    assert list(shown.columns) == ["Sign.", "Dim.", "Full", "N-S Full", "3", "N-S 3"]
    assert shown["N-S Full"].tolist() == [round(rows.loc[0, "ns"], 2)]
    assert shown["N-S 3"].tolist() == [round(rows.loc[1, "ns"], 2)]
    assert "N-S: UKBench's score" in (tmp_path / "table1.md").read_text()


@pytest.mark.parametrize("sparsity", [0.99, 0.5])
def test_reduced_aps_score_x_u_like_the_dense_product(sparsity):
    """The history's mAPs: ``X U`` through the sparse U (tau = 0.99) or dense BLAS
    (tau = 0.5) rank the images like the dense product, scored raw and L2-normalised."""
    from ndir.evaluation import holidays_map
    from ndir.projection import SparseRankProjector
    from ndir.stages.sparse import reduced_aps

    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(12), 3)
    centres = rng.standard_normal((12, 1000)).astype(np.float32)
    X = centres[groups] + 0.5 * rng.standard_normal((groups.size, 1000)).astype(np.float32)
    is_query = np.tile([True, False, False], 12)
    projector = SparseRankProjector(8, sparsity=sparsity, max_iter=3, random_state=0)
    projector.fit(X, groups, queries=is_query)
    Y = X @ projector.components_.toarray()
    expected = {
        "dot": Y,
        "l2": Y / np.linalg.norm(Y, axis=1, keepdims=True),
    }
    aps = reduced_aps(projector, X, groups, is_query)
    assert set(aps) == set(expected)
    from ndir.projection.product import TransposedBlocks

    for scoring, ap in reduced_aps(projector, TransposedBlocks(X), groups, is_query).items():
        assert np.array_equal(ap, aps[scoring])
    for scoring, reduced in expected.items():
        _, ap = holidays_map(reduced, groups, is_query, return_per_query=True)
        np.testing.assert_allclose(aps[scoring], ap, atol=1e-12)


def test_histories_say_their_run_or_are_refused_naming_the_file(tmp_path):
    """A history's (signature, R, tau) come from its columns, whatever its path; an old
    history without them, or without the column a table reads, is refused naming the
    file and the command that writes it anew instead of failing in pandas."""
    from ndir.errors import ResultFileError
    from ndir.stages.sparse import final_maps, read_history

    # A path that says another run: only the columns count.
    good = tmp_path / "results" / "sparse" / "vlad-8" / "R4-tau0.5.csv"
    good.parent.mkdir(parents=True)
    run = {"signature": "fv-64", "encoding": "fv", "K": 64, "R": 32, "tau": 0.99}
    pd.DataFrame({**run, "iteration": [0, 10], "test_map_l2": [0.5, 0.75]}).to_csv(good, index=False)
    signature, R, tau, curve = read_history(good)
    assert (signature, R, tau, len(curve)) == ("fv-64", 32, 0.99, 2)
    maps = final_maps([good])
    assert maps[["signature", "encoding", "K", "R", "tau", "initial", "final"]].values.tolist() == [
        ["fv-64", "fv", 64, 32, 0.99, 0.5, 0.75]
    ]
    with pytest.raises(ResultFileError, match=r"R4-tau0.5.csv: no test_map_dot measured .*; delete it and run "
                       r"`snakemake results/sparse/vlad-8/R4-tau0.5.csv --cores all`"):  # fmt: skip
        final_maps([good], scoring="dot")
    old = tmp_path / "results" / "sparse" / "fv-64" / "R32-tau0.99.csv"
    old.parent.mkdir()
    pd.DataFrame({"iteration": [0, 10], "test_map_l2": [0.5, 0.75]}).to_csv(old, index=False)
    with pytest.raises(ResultFileError, match=r"R32-tau0.99.csv: a training history without its run's "
                       r"signature, encoding, K, R, tau.*"
                       r"`snakemake results/sparse/fv-64/R32-tau0.99.csv --cores all`"):  # fmt: skip
        final_maps([old])


def test_table_stem_is_the_stem_of_the_three_declared_files():
    """The stages write a table's csv, md and tex from one stem: the rule's outputs
    must be exactly those three, else the stage refuses rather than write others."""
    from pathlib import Path

    from ndir.report import table_stem

    files = ["results/tables/table2.csv", "results/tables/table2.md", "results/tables/table2.tex"]
    assert table_stem(files) == Path("results/tables/table2")
    with pytest.raises(ValueError, match="table2.tex"):
        table_stem(files[:2] + ["results/tables/table2.pdf"])


def test_an_unknown_soml_variant_is_refused_before_training(tmp_path):
    """The variant picks the estimator and the method's name: an unknown one names
    the config key at once, instead of a KeyError after the whole training."""
    from ndir.stages.seeds import SOML_VARIANTS, train_soml

    assert set(SOML_VARIANTS) == {"tg", "da", "da-algorithm2"}
    with pytest.raises(ConfigError, match=r"seeds.soml: variant 'dual' is none of"):
        train_soml(
            images=tmp_path / "images.csv",
            signatures=tmp_path / "fv-8.npy",
            model=tmp_path / "model.npz",
            record=tmp_path / "record.json",
            signature="fv-8",
            variant="dual",
            options={},
            negatives_per_pair=1,
            epochs=1,
            seed=0,
            ns_score=False,
        )


def test_a_rule_whose_names_collide_is_refused(tmp_path):
    """An output named like an input would silently replace it in the stage's
    arguments: refused before the stage runs."""
    job = _fake_job(tmp_path)
    job.output = _Named(images=str(tmp_path / "other.csv"))
    with pytest.raises(ValueError, match=r"share the names \['images'\]"):
        run_rule(job, _failing_stage(RuntimeError("must not run")))


def test_signatures_of_another_image_table_name_both_files(tmp_path):
    """Signatures whose row count is not the image table's: the error names the
    signatures file and the table, and the rules to rerun."""
    from ndir.errors import ResultFileError
    from ndir.stages.common import split_signatures

    images = tmp_path / "images.csv"
    pd.DataFrame(
        {
            "image_id": ["a", "b", "c"],
            "path": ["a", "b", "c"],
            "group": [0, 0, 1],
            "is_query": [True, False, True],
            "split": ["train", "train", "test"],
        }
    ).to_csv(images, index=False)
    signatures = tmp_path / "fv-8.npy"
    np.save(signatures, np.zeros((2, 8), dtype=np.float32))
    with pytest.raises(
        ResultFileError, match=r"fv-8.npy: 2 rows, but .*images.csv lists 3 images; rerun the encoding rules"
    ):
        split_signatures(images, signatures)
    np.save(signatures, np.zeros((4, 8), dtype=np.float32))
    with pytest.raises(ResultFileError, match=r"fv-8.npy: 4 rows, but .*images.csv lists 3 images"):
        split_signatures(images, signatures)


def _two_image_table():
    """An image table of two images of one group, one in each split."""
    return pd.DataFrame(
        {
            "image_id": ["a", "b"],
            "path": ["a", "b"],
            "group": [0, 0],
            "is_query": [True, False],
            "split": ["train", "test"],
        }
    )


def test_signatures_of_more_than_256_images_split_by_the_table(tmp_path):
    """A table of 300 images (past CPython's cached small ints, so that a row count is
    compared by value): each split gets its own rows, groups and queries, in order."""
    from ndir.stages.common import split_signatures

    n = 300
    split = np.where(np.arange(n) % 3 == 0, "test", "train")
    pd.DataFrame(
        {
            "image_id": [f"i{j}" for j in range(n)], "path": "x", "group": np.arange(n) // 2,
            "is_query": np.arange(n) % 2 == 0, "split": split,
        }
    ).to_csv(tmp_path / "images.csv", index=False)  # fmt: skip
    X = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    np.save(tmp_path / "fv-2.npy", X)
    splits = split_signatures(tmp_path / "images.csv", tmp_path / "fv-2.npy")
    for name in ("train", "test"):
        rows = np.flatnonzero(split == name)
        np.testing.assert_array_equal(splits[name][0], X[rows])
        np.testing.assert_array_equal(splits[name][1], rows // 2)
        np.testing.assert_array_equal(splits[name][2], rows % 2 == 0)


def test_damaged_results_are_named_with_the_fix(results_path):
    """A signature file or a shard cut short: ResultFileError naming the file and what
    to do, instead of NumPy's or zipfile's bare error."""
    from ndir.errors import ResultFileError
    from ndir.stages.common import split_signatures
    from ndir.stages.signatures import gather_signatures

    images = results_path / "images.csv"
    _two_image_table().to_csv(images, index=False)
    signatures = results_path / "fv-8.npy"
    np.save(signatures, np.zeros((2, 8), dtype=np.float32))
    signatures.write_bytes(signatures.read_bytes()[:-20])
    fix = r"cut short or damaged: delete it and run `snakemake \S+ --cores all` in the workflow's folder"
    with pytest.raises(ResultFileError, match=rf"fv-8.npy: unreadable \(ValueError: .*\), {fix}"):
        split_signatures(images, signatures)
    shard = results_path / "0.npz"
    np.savez(shard, image_id=np.array(["a", "b"]), **{"fv-8": np.zeros((2, 8), dtype=np.float32)})
    shard.write_bytes(shard.read_bytes()[:200])
    with pytest.raises(ResultFileError, match=rf"0.npz: unreadable \(BadZipFile: .*\), {fix}"):
        gather_signatures(images, [shard], results_path / "out.npy", "fv-8")
    assert not (results_path / "out.npy").exists()


def _damaged(path, write):
    """``write(path)``, then the file cut to its first 100 bytes."""
    write(path)
    path.write_bytes(path.read_bytes()[:100])
    return path


def _call_sites():
    """(name, file written, how to damage it, the stage call reading it) for every
    stage that reads a result array file back."""
    from ndir.stages import codebooks, jcf, seeds, signatures

    descriptors = lambda path: np.save(path, np.ones((50, 8), dtype=np.float32))  # noqa: E731
    counts = lambda path: sp.save_npz(path, sp.csr_matrix(np.eye(2, 4, dtype=np.float32)))  # noqa: E731

    def count_shard(path):
        np.savez(path, image_id=np.array(["a", "b"]), data=np.ones(2, np.float32), indices=np.arange(2),
                 indptr=np.arange(3), shape=np.array([2, 4]))  # fmt: skip

    def feature_shard(path, drop=None):
        arrays = dict(image_id=np.array(["a", "b"]), features=np.ones((4, 3), np.float32),
                      offsets=np.array([0, 2, 4]), pca_components=np.eye(3, 8))  # fmt: skip
        np.savez(path, **{key: value for key, value in arrays.items() if key != drop})

    return [
        ("descriptor PCA sample", "sample.npy", descriptors, lambda t, f: codebooks.fit_descriptor_pca(f, t / "o", 4)),
        ("VLAD sample", "sample.npy", descriptors, lambda t, f: codebooks.fit_vlad_codebook(f, t / "o", 2, 4, 2, 0)),
        ("FV sample", "sample.npy", descriptors,
         lambda t, f: codebooks.fit_fisher_codebook(f, t / "p", t / "o", 2, 2, 0)),
        ("vocabulary sample", "sample.npy", descriptors,
         lambda t, f: seeds.fit_visual_vocabulary(f, t / "o", 2, 2, 1, 0)),
        ("word-count shard", "0.npz", count_shard, lambda t, f: seeds.gather_bovw(t / "images.csv", [f], t / "o")),
        ("word counts", "bovw.npz", counts,
         lambda t, f: seeds.evaluate_tfidf(t / "images.csv", f, t / "o", ns_score=False)),
        ("signature shard", "0.npz",
         lambda path: np.savez(path, image_id=np.array(["a", "b"]), **{"fv-8": np.ones((2, 8))}),
         lambda t, f: signatures.gather_signatures(t / "images.csv", [f], t / "o", "fv-8")),
        ("JCF feature shard", "0.npz", feature_shard,
         lambda t, f: jcf.gather_jcf_features(t / "images.csv", [f], t / "o")),
        ("JCF features", "features.npz", feature_shard, lambda t, f: jcf.load_features(t / "images.csv", f)),
    ]  # fmt: skip


@pytest.mark.parametrize("site", range(9), ids=[site[0] for site in _call_sites()])
def test_every_damaged_result_array_is_named_with_the_fix(results_path, site):
    """Each stage reading an array file written by an earlier rule (samples, shards,
    word counts, JCF features) names that file with the fix when it is cut short,
    and leaves no output behind."""
    from ndir.errors import ResultFileError

    name, filename, write, call = _call_sites()[site]
    _two_image_table().to_csv(results_path / "images.csv", index=False)
    damaged = _damaged(results_path / filename, write)
    fix = r"cut short or damaged: delete it and run `snakemake \S+ --cores all`"
    with pytest.raises(ResultFileError, match=rf"{filename}: unreadable \(\w+: .*\), {fix}"):
        call(results_path, damaged)
    assert not (results_path / "o").exists()


def test_a_result_file_without_an_array_is_named_with_the_fix(tmp_path):
    """A shard missing one of its arrays (NumPy's KeyError) is a ResultFileError too."""
    from ndir.errors import ResultFileError
    from ndir.stages.jcf import gather_jcf_features

    _two_image_table().to_csv(tmp_path / "images.csv", index=False)
    shard = tmp_path / "0.npz"
    np.savez(shard, image_id=np.array(["a", "b"]), features=np.ones((4, 3), np.float32), pca_components=np.eye(3, 8))
    with pytest.raises(ResultFileError, match=r"0.npz: unreadable \(KeyError: .*offsets.*\), cut short or damaged"):
        gather_jcf_features(tmp_path / "images.csv", [shard], tmp_path / "o")


def test_a_garbled_image_table_is_named_with_the_fix(results_path):
    """images.csv without its header line or without a column: ResultFileError naming
    the file and what to do, instead of a bare KeyError from the first rule reading it."""
    from ndir.errors import ResultFileError
    from ndir.stages.codebooks import sample_descriptors

    images = results_path / "images.csv"
    table = _two_image_table()
    fix = "cut short or damaged: delete it and run"  # the advice of read_result, whatever its command
    table.to_csv(images, index=False)
    images.write_text(images.read_text().split("\n", 1)[1])
    with pytest.raises(
        ResultFileError, match=rf"images.csv: unreadable \(ValueError: no column 'image_id', .*'split'\), {fix}"
    ):
        sample_descriptors(images, results_path / "sample.npy", per_image=1, seed=0, descriptors={})
    table.drop(columns="split").to_csv(images, index=False)
    with pytest.raises(ResultFileError, match=rf"images.csv: unreadable \(ValueError: no column 'split'\), {fix}"):
        sample_descriptors(images, results_path / "sample.npy", per_image=1, seed=0, descriptors={})
    assert not (results_path / "sample.npy").exists()


def test_map_is_flat_compares_the_last_evaluations():
    """Hand-worked: the last k + 1 training mAPs within 0.1 point are flat; fewer than
    k + 1 evaluations never are."""
    from ndir.stages.sparse import map_is_flat

    assert not map_is_flat([0.5, 0.9], 2)
    assert map_is_flat([0.5, 0.9, 0.9005, 0.9], 2)
    assert not map_is_flat([0.5, 0.9, 0.902, 0.9], 2)
    assert map_is_flat([0.5, 0.9, 0.902, 0.902], 1)


def _small_training_set(tmp_path, name, seed):
    """An image table of 16 groups of 3 (10 training groups, a query per group) and
    their 64-d signatures ``name``.npy, noisy copies of one centre per group: the
    (images, signatures) paths of a small training."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(16), 3)
    X = rng.standard_normal((16, 64))[groups] + rng.standard_normal((groups.size, 64))
    X = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)
    images = tmp_path / "images.csv"
    pd.DataFrame(
        {
            "image_id": np.arange(groups.size),
            "path": [f"{i}.jpg" for i in range(groups.size)],
            "group": groups,
            "is_query": np.arange(groups.size) % 3 == 0,
            "split": np.where(groups < 10, "train", "test"),
        }
    ).to_csv(images, index=False)
    signatures = tmp_path / f"{name}.npy"
    np.save(signatures, X)
    return images, signatures


def _small_training_stopper(tmp_path, seed):
    """``train(name, flat_map_evaluations, max_iter=60, stop_at_perfect_map=False)``: the
    history (DataFrame) and projector (D, R) of a small training on the fv-16
    signatures of :func:`_small_training_set` drawn with ``seed``."""
    from ndir.projection import load_projector
    from ndir.stages.sparse import train_sparse_projector

    images, signatures = _small_training_set(tmp_path, "fv-16", seed)

    def train(name, flat_map_evaluations, max_iter=60, stop_at_perfect_map=False):
        train_sparse_projector(
            images=images,
            signatures=signatures,
            projector=tmp_path / f"{name}.npz",
            history=tmp_path / f"{name}.csv",
            encoding="fv",
            codebook_size=16,
            ns_score=False,
            **small_training(max_iter, flat_map_evaluations, stop_at_perfect_map),
        )
        return pd.read_csv(tmp_path / f"{name}.csv"), load_projector(tmp_path / f"{name}.npz")[0]

    return train


def test_a_training_stopped_on_flat_map_is_the_prefix_of_the_full_one(tmp_path):
    """sparse.flat_map_evaluations: the history of the stopped training is the full
    training's history up to the first evaluation where map_is_flat holds there, and
    its projector is the one at that step; None runs to max_iter."""
    from ndir.projection import load_projector
    from ndir.stages.sparse import map_is_flat

    train = _small_training_stopper(tmp_path, seed=3)
    full, _ = train("full", None)
    # The history and the projector record their run, which no path is read for.
    assert full[["signature", "encoding", "K", "R", "tau"]].drop_duplicates().values.tolist() == [
        ["fv-16", "fv", 16, 4, 0.5]
    ]
    meta = load_projector(tmp_path / "full.npz")[1]
    assert (meta["signature"], meta["n_components"], meta["sparsity"]) == ("fv-16", 4, 0.5)
    stopped, projector = train("stopped", 2)
    maps = full["train_map_dot"].dropna().tolist()
    stop = 5 * next(i for i in range(len(maps)) if map_is_flat(maps[: i + 1], 2))
    # Here training mAP reaches 97.9 % at step 25 and stays: the stop is at step 35.
    assert full["iteration"].iloc[-1] == 60 and stop == 35
    # The same curve up to the stop, each history saying what ended it.
    pd.testing.assert_frame_equal(stopped.drop(columns="stopped_by"), full.iloc[: stop + 1].drop(columns="stopped_by"))
    assert (set(stopped["stopped_by"]), set(full["stopped_by"])) == ({STOP_CALLBACK}, {STOP_MAX_ITER})
    _, reference = train("reference", None, max_iter=stop)
    np.testing.assert_array_equal(projector.toarray(), reference.toarray())
    # 6 test queries, under INTERVAL_MAX_QUERIES: the test mAPs carry their bootstrap
    # intervals, the training mAPs none.
    assert {"test_map_dot_low", "test_map_dot_high", "test_map_l2_low", "test_map_l2_high"} <= set(full.columns)
    assert not any(column.startswith("train_map") and column.endswith(("_low", "_high")) for column in full.columns)
    measured = full.dropna(subset=["test_map_dot"])
    assert (measured["test_map_dot_low"] <= measured["test_map_dot"]).all()
    assert (measured["test_map_dot"] <= measured["test_map_dot_high"]).all()
    seconds = load_projector(tmp_path / "full.npz")[1]["fit_seconds"]
    assert seconds > 0 and seconds == round(seconds, 3)


def test_a_training_stopped_at_perfect_map_ends_at_its_first_evaluation_of_1(tmp_path):
    """sparse.stop_at_perfect_map: the training stops at the first evaluation whose
    training mAP is 1, before a flat stop would; its history is the full one's prefix
    and its projector the one of a run of exactly that many steps. Without it (and
    without a flat stop) the training runs on."""
    train = _small_training_stopper(tmp_path, seed=5)
    full, _ = train("full", None)
    maps = full.dropna(subset=["train_map_dot"])
    perfect = int(maps["iteration"][maps["train_map_dot"] >= 1.0].iloc[0])
    # Here training mAP reaches 100 % at step 25 and stays; the full training runs on,
    # to step 60 (to step 35 under OpenBLAS Haswell, where its objective reaches 0
    # there), and a flat stop over 2 evaluations would come at step 35.
    assert perfect == 25 and full["iteration"].iloc[-1] >= perfect + 10
    stopped, projector = train("stopped", 2, stop_at_perfect_map=True)
    assert stopped["iteration"].iloc[-1] == perfect and set(stopped["stopped_by"]) == {STOP_CALLBACK}
    pd.testing.assert_frame_equal(
        stopped.drop(columns="stopped_by"), full.iloc[: perfect + 1].drop(columns="stopped_by")
    )
    _, reference = train("reference", None, max_iter=perfect)
    np.testing.assert_array_equal(projector.toarray(), reference.toarray())


def _grouped_signatures(tmp_path, name="fv-8.npy", n_groups=12, dims=16, seed=4):
    """An image table (groups of 3, half of them train, the first of each a query) and
    dense positive signatures of near duplicates (no zero entry)."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_groups), 3)
    pd.DataFrame(
        {
            "image_id": [f"i{j}" for j in range(groups.size)], "path": [f"{j}.jpg" for j in range(groups.size)],
            "group": groups, "is_query": np.arange(groups.size) % 3 == 0,
            "split": np.where(groups < n_groups // 2, "train", "test"),
        }
    ).to_csv(tmp_path / "images.csv", index=False)  # fmt: skip
    X = np.abs(rng.normal(size=(n_groups, dims))[groups] + 0.5 * rng.normal(size=(groups.size, dims))) + 0.01
    np.save(tmp_path / name, (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32))
    return tmp_path / "images.csv", tmp_path / name, groups


def test_soml_record_of_dense_signatures(tmp_path, monkeypatch):
    """train_soml on FV signatures (an .npy): the record names the signature, times the
    training alone (a fake clock), and counts per query D multiply-adds to weight the query and one
    per retained dimension and database image (dense signatures, no zero entry)."""
    from ndir.stages import seeds
    from ndir.stages.seeds import train_soml

    images, signatures, groups = _grouped_signatures(tmp_path)
    clock = itertools.count(1000.0, 1.0)  # every reading one second after the last
    monkeypatch.setattr(seeds, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    train_soml(
        images=images, signatures=signatures, model=tmp_path / "model.npz", record=tmp_path / "record.json",
        signature="fv-8", variant="tg", options={"learning_rate": 1.0, "l1": 1e-3}, negatives_per_pair=2, epochs=1,
        seed=0, ns_score=False,
    )  # fmt: skip
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["method"] == "SOML-TG" and record["signature"] == "fv-8"
    assert record["train_s"] == 1.0  # the clock read before and after the fit only
    n_test, D = 18, 16
    assert 0 < record["n_nonzero"] <= D
    assert record["madds_per_query"] == pytest.approx(D + record["n_nonzero"] * n_test)
    assert np.load(tmp_path / "model.npz")["signature"] == "fv-8"


def test_descriptors_are_sampled_from_the_training_images_only(tmp_path):
    """The codebooks' sample reads only the training split's images (per_image each):
    a test image that cannot be read is never opened."""
    from ndir.stages.codebooks import sample_descriptors

    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(5)
    paths = []
    for j in range(3):
        paths.append(folder / f"{j}.png")
        cv2.imwrite(str(paths[-1]), rng.integers(0, 256, size=(48, 64), dtype=np.uint8))
    missing = folder / "missing.png"  # a test image: never read
    pd.DataFrame(
        {
            "image_id": ["a", "b", "c", "d"], "path": [str(p) for p in paths] + [str(missing)], "group": [0, 0, 1, 1],
            "is_query": [True, False, True, False], "split": ["train", "train", "train", "test"],
        }
    ).to_csv(tmp_path / "images.csv", index=False)  # fmt: skip
    sample_descriptors(tmp_path / "images.csv", tmp_path / "sample.npy", per_image=5, seed=0, descriptors=DESCRIPTORS)
    assert np.load(tmp_path / "sample.npy").shape[0] == 3 * 5


def test_final_maps_take_the_last_measured_interval(tmp_path):
    """A history's final mAP and its bootstrap bounds are those of its last evaluation."""
    from ndir.stages.sparse import final_maps

    history = tmp_path / "history.csv"
    pd.DataFrame(
        {
            "signature": "fv-8", "encoding": "fv", "K": 8, "R": 4, "tau": 0.9, "iteration": [0, 1, 2, 3],
            "test_map_dot": [0.5, np.nan, 0.7, 0.8],
            "test_map_dot_low": [0.4, np.nan, 0.6, 0.75], "test_map_dot_high": [0.6, np.nan, 0.8, 0.85],
        }
    ).to_csv(history, index=False)  # fmt: skip
    row = final_maps([history], scoring="dot").iloc[0]
    assert (row["initial"], row["final"], row["final_low"], row["final_high"]) == (0.5, 0.8, 0.75, 0.85)


def _encode_word_counts(tmp_path, sample):
    """A word-count shard (:func:`ndir.stages.signatures.encode_shard`, no codebook) of
    ``images.csv``."""
    from ndir import bovw
    from ndir.stages.signatures import encode_shard

    bovw.fit_visual_vocabulary(sample, 2, n_iter=2, nprobe=1).save(tmp_path / "vocabulary.npz")
    encode_shard(
        tmp_path / "images.csv", [], None, 0, 1, 1.0, DESCRIPTORS, tmp_path / "vocabulary.npz", tmp_path / "0.npz"
    )


def _encode_signatures(tmp_path, sample):
    """A VLAD signature shard (:func:`ndir.stages.signatures.encode_shard`) of ``images.csv``."""
    from ndir.codebooks import fit_vlad_codebook
    from ndir.stages.signatures import encode_shard

    fit_vlad_codebook(sample, 2, n_components=4, n_iter=2).save(tmp_path / "vlad-2.npz")
    encode_shard(tmp_path / "images.csv", [tmp_path / "vlad-2.npz"], tmp_path / "0.npz", 0, 1, 1.0, DESCRIPTORS)


@pytest.mark.parametrize(
    ("encode", "logger", "prefix"),
    [(_encode_word_counts, "ndir.stages.signatures", "shard"), (_encode_signatures, "ndir.stages.signatures", "shard")],
    ids=["word counts", "signatures"],
)
def test_encoding_shards_log_their_progress_every_25_images(tmp_path, caplog, encode, logger, prefix):
    """A long shard of word counts or of signatures says how far it got: after the
    25th and 50th of 51 images, not after the others."""
    from ndir.descriptors import image_descriptors_with

    rng = np.random.default_rng(6)
    base = rng.integers(0, 256, size=(40, 48), dtype=np.uint8)
    path = tmp_path / "image.png"
    cv2.imwrite(str(path), base)
    n = 51
    pd.DataFrame(
        {
            "image_id": [f"i{j}" for j in range(n)], "path": [str(path)] * n, "group": np.arange(n) // 3,
            "is_query": np.arange(n) % 3 == 0, "split": "train",
        }
    ).to_csv(tmp_path / "images.csv", index=False)  # fmt: skip
    sample = np.tile(image_descriptors_with(path, DESCRIPTORS), (10, 1))
    with caplog.at_level(logging.INFO, logger=logger):
        encode(tmp_path, sample)
    progress = [r.getMessage() for r in caplog.records if r.name == logger and r.getMessage().endswith("images")]
    assert progress == [f"{prefix} 0: 25 / 51 images", f"{prefix} 0: 50 / 51 images"]


def _smoothed_idf(counts):
    """ln((1 + n) / (1 + df_w)) + 1 over the rows of ``counts`` (scikit-learn's smoothing)."""
    return np.log((1 + counts.shape[0]) / (1 + np.count_nonzero(counts, axis=0))) + 1


def _unit_tfidf(counts, idf):
    weighted = counts * idf
    return weighted / np.linalg.norm(weighted, axis=1, keepdims=True)


def test_tfidf_weights_both_splits_by_the_training_splits_idf(tmp_path):
    """The tf-idf baseline and the learners' tf-idf input weight the word counts of
    both splits by the idf of the training split alone: the record's test mAP and
    Recall@1 are those of that weighting, computed here from the counts, and differ
    from those of an idf of the test split, of all images or of none."""
    from ndir.evaluation import holidays_map
    from ndir.stages import seeds

    rng = np.random.default_rng(1)
    train = rng.poisson(0.8, (6, 6)) * (rng.random((6, 6)) < 0.6)
    train[np.flatnonzero(train.sum(axis=1) == 0), 0] = 1  # no image without a word
    test = rng.poisson(1.5, (12, 6)) * (rng.random((12, 6)) < 0.7)
    assert np.all(test.sum(axis=1) > 0)
    # The test groups come first in the table, the training ones after.
    groups = np.concatenate([np.repeat(np.arange(4), 3), np.repeat([4, 5], 3)])
    pd.DataFrame(
        {
            "image_id": [f"i{j}" for j in range(18)], "path": [f"{j}.jpg" for j in range(18)], "group": groups,
            "is_query": np.arange(18) % 3 == 0, "split": ["test"] * 12 + ["train"] * 6,
        }
    ).to_csv(tmp_path / "images.csv", index=False)  # fmt: skip
    sp.save_npz(tmp_path / "bovw.npz", sp.csr_matrix(np.vstack([test, train]).astype(np.float32)))
    start = time.perf_counter()
    seeds.evaluate_tfidf(tmp_path / "images.csv", tmp_path / "bovw.npz", tmp_path / "record.json", ns_score=False)
    wall = time.perf_counter() - start
    record = json.loads((tmp_path / "record.json").read_text())
    # The idf's fit time lies within the call's wall time (perf_counter() * start would not).
    assert 0 < record["train_s"] < wall

    test_groups, is_query = groups[:12], np.arange(12) % 3 == 0
    idf = _smoothed_idf(train)
    X = _unit_tfidf(test, idf)
    scores = X @ X.T
    np.fill_diagonal(scores, -np.inf)
    recall_at_1 = np.mean(test_groups[scores.argmax(axis=1)] == test_groups)
    assert record["n_words"] == 6 and record["model_bytes"] == 4 * 6
    assert record["test_map"] == pytest.approx(holidays_map(X, test_groups, is_query), abs=1e-6)
    assert record["recall_at_1"] == pytest.approx(recall_at_1)
    assert record["query_dims"] == np.count_nonzero(test[is_query], axis=1).mean()
    others = [_smoothed_idf(test), _smoothed_idf(np.vstack([test, train])), np.ones(6)]
    for idf_elsewhere in others:
        elsewhere = holidays_map(_unit_tfidf(test, idf_elsewhere), test_groups, is_query)
        assert abs(elsewhere - record["test_map"]) > 1e-3

    splits = seeds._learning_splits(tmp_path / "images.csv", tmp_path / "bovw.npz", "tfidf")
    for name, counts in (("train", train), ("test", test)):
        np.testing.assert_allclose(splits[name][0].toarray(), _unit_tfidf(counts, idf), rtol=1e-6)


def test_an_empty_word_count_shard_gathers_with_the_others(tmp_path):
    """More shards than images (2 images, 3 shards): the empty shard holds a (0, words)
    matrix and the gathered counts are those of one shard of every image, a row each."""
    from ndir import bovw
    from ndir.descriptors import image_descriptors_with
    from ndir.stages.seeds import gather_bovw
    from ndir.stages.signatures import encode_shard

    rng = np.random.default_rng(7)
    paths = [tmp_path / f"{j}.png" for j in range(2)]
    for path in paths:
        cv2.imwrite(str(path), rng.integers(0, 256, size=(40, 48), dtype=np.uint8))
    pd.DataFrame(
        {
            "image_id": ["a", "b"], "path": [str(p) for p in paths], "group": [0, 0], "is_query": [True, False],
            "split": ["train", "test"],
        }
    ).to_csv(tmp_path / "images.csv", index=False)  # fmt: skip
    sample = np.vstack([image_descriptors_with(path, DESCRIPTORS) for path in paths])
    bovw.fit_visual_vocabulary(sample, 3, n_iter=2, nprobe=1).save(tmp_path / "vocabulary.npz")
    shards = [tmp_path / f"{shard}.npz" for shard in range(3)]
    for shard, path in enumerate(shards):
        encode_shard(tmp_path / "images.csv", [], None, shard, 3, 1.0, DESCRIPTORS, tmp_path / "vocabulary.npz", path)
    empty = np.load(shards[0])
    assert list(empty["shape"]) == [0, 3] and empty["image_id"].size == 0 and list(empty["indptr"]) == [0]
    gather_bovw(tmp_path / "images.csv", shards, tmp_path / "counts.npz")
    vocabulary = bovw.VisualVocabulary.load(tmp_path / "vocabulary.npz")
    expected = np.vstack([vocabulary.encode(image_descriptors_with(path, DESCRIPTORS)) for path in paths])
    assert expected.shape == (2, 3) and expected.sum() > 0
    np.testing.assert_array_equal(sp.load_npz(tmp_path / "counts.npz").toarray(), expected)


def test_one_pass_writes_the_signatures_and_the_word_counts_of_the_separate_passes(tmp_path):
    """encode_shard with codebooks and a vocabulary: the signatures of the shard encoded
    without a vocabulary, to the bit, and each image's word counts of its own
    descriptors (:meth:`ndir.bovw.VisualVocabulary.encode`)."""
    from ndir import bovw
    from ndir.codebooks import fit_vlad_codebook
    from ndir.descriptors import image_descriptors_with
    from ndir.stages.signatures import encode_shard

    rng = np.random.default_rng(8)
    paths = [tmp_path / f"{j}.png" for j in range(3)]
    for path in paths:
        cv2.imwrite(str(path), rng.integers(0, 256, size=(40, 48), dtype=np.uint8))
    pd.DataFrame(
        {
            "image_id": ["a", "b", "c"], "path": [str(p) for p in paths], "group": [0, 0, 1],
            "is_query": [True, False, True], "split": "test",
        }
    ).to_csv(tmp_path / "images.csv", index=False)  # fmt: skip
    sample = np.vstack([image_descriptors_with(path, DESCRIPTORS) for path in paths])
    fit_vlad_codebook(sample, 2, n_components=4, n_iter=2).save(tmp_path / "vlad-2.npz")
    bovw.fit_visual_vocabulary(sample, 4, n_iter=2, nprobe=1).save(tmp_path / "vocabulary.npz")
    images, codebooks = tmp_path / "images.csv", [tmp_path / "vlad-2.npz"]
    encode_shard(images, codebooks, tmp_path / "both.npz", 0, 1, 0.5, DESCRIPTORS, tmp_path / "vocabulary.npz",
                 tmp_path / "counts.npz")  # fmt: skip
    encode_shard(images, codebooks, tmp_path / "alone.npz", 0, 1, 0.5, DESCRIPTORS)
    both, alone = np.load(tmp_path / "both.npz"), np.load(tmp_path / "alone.npz")
    assert sorted(both.files) == sorted(alone.files) == ["image_id", "vlad-2"]
    np.testing.assert_array_equal(both["vlad-2"], alone["vlad-2"])
    counts = np.load(tmp_path / "counts.npz")
    assert list(counts["image_id"]) == ["a", "b", "c"]
    matrix = sp.csr_array((counts["data"], counts["indices"], counts["indptr"]), shape=tuple(counts["shape"]))
    vocabulary = bovw.VisualVocabulary.load(tmp_path / "vocabulary.npz")
    expected = np.vstack([vocabulary.encode(image_descriptors_with(path, DESCRIPTORS)) for path in paths])
    assert expected.sum(axis=1).min() > 0
    np.testing.assert_array_equal(matrix.toarray(), expected)


def test_seeds_comparison_fits_pca_on_the_training_split_and_draws_only_stored_models(tmp_path, monkeypatch):
    """The comparison's own rows: PCA fitted on the training signatures alone (its test
    mAP recomputed here, unlike a PCA of the test split's), timed around the fit (a fake
    clock); a sparse projector's multiply-adds per query, nnz + R per test image (21
    of 39 images); and the figure drawn without the rows that store no model (a
    second-order pooling record, 0 bytes), with those that store one (1 byte on)."""
    from ndir import figures
    from ndir.evaluation import holidays_map
    from ndir.projection import PCAProjection
    from ndir.projection.storage import save_projector
    from ndir.stages import seeds

    images, signatures, groups = _grouped_signatures(tmp_path, n_groups=13)
    X = np.load(signatures)
    train, test = groups < 6, groups >= 6
    is_query = np.arange(groups.size)[test] % 3 == 0
    U = sp.random(16, 4, density=0.5, random_state=2, format="csc", dtype=np.float32)
    save_projector(tmp_path / "R4-tau0.5.npz", U, n_components=4, sparsity=0.5, signature="fv-8", fit_seconds=2.0)
    (tmp_path / "fv-8").mkdir()
    run = {"signature": "fv-8", "encoding": "fv", "K": 8, "R": 4, "tau": 0.5}
    history = pd.DataFrame({**run, "iteration": [0, 1], "test_map_l2": [0.3, 0.4]})
    history.to_csv(tmp_path / "fv-8/R4-tau0.5.csv", index=False)
    pooling = {
        "method": "second-order pooling", "signature": "fv-8", "query_dims": 16, "model_bytes": 0,
        "db_bytes_per_image": 64, "madds_per_query": 16 * 21, "test_map": 0.5, "recall_at_1": 0.5, "train_s": 0.0,
    }  # fmt: skip
    (tmp_path / "pooling.json").write_text(json.dumps(pooling))
    (tmp_path / "byte.json").write_text(json.dumps({**pooling, "method": "one byte", "model_bytes": 1}))
    drawn = []
    monkeypatch.setattr(figures, "seeds_comparison_figure", lambda records, stem: drawn.append(records))
    clock = itertools.count(1000.0, 1.0)  # every reading one second after the last
    monkeypatch.setattr(seeds, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    table = [str(tmp_path / f"table{suffix}") for suffix in (".csv", ".md", ".tex")]
    seeds.seeds_comparison(
        images, [tmp_path / "pooling.json", tmp_path / "byte.json"], [signatures], [tmp_path / "R4-tau0.5.npz"],
        [tmp_path / "fv-8/R4-tau0.5.csv"], [], table, [str(tmp_path / "figure.png")], tmp_path / "records.csv",
        ["fv-8"], [2], ns_score=False,
    )  # fmt: skip
    rows = pd.read_csv(tmp_path / "records.csv").set_index("method")

    pca = rows.loc["PCA R=2"]
    expected = holidays_map(PCAProjection(2).fit(X[train]).transform(X[test]), groups[test], is_query)
    assert pca["test_map"] == pytest.approx(expected, abs=1e-6)
    of_test = holidays_map(PCAProjection(2).fit(X[test]).transform(X[test]), groups[test], is_query)
    assert abs(of_test - expected) > 1e-3
    assert pca["train_s"] == 1.0
    sparse_row = rows.loc["sparse rank R=4 τ=0.5"]
    assert sparse_row["madds_per_query"] == U.nnz + 4 * 21 and sparse_row["test_map"] == 0.4
    assert len(drawn) == 1 and sorted(drawn[0]["method"]) == ["PCA R=2", "one byte", "sparse rank R=4 τ=0.5"]


def test_the_similarity_matrix_record_counts_the_databases_words_and_one_norm_per_image(tmp_path):
    """train_similarity_matrix's record: the matrix it writes is the estimator's (the
    same fit, refitted here), the database keeps 8 bytes per word of an image and one
    float32 norm sqrt(x^T M x), the fit's time lies within the call's wall time, and the
    test mAP is the estimator's scores' on the test split."""
    from ndir.bovw import VisualVocabulary
    from ndir.evaluation import map_from_scores
    from ndir.similarity_matrix import SparseSimilarityMatrix
    from ndir.stages import seeds

    rng = np.random.default_rng(3)
    n_words, groups = 12, np.repeat(np.arange(8), 3)
    centres = rng.poisson(2.0, (8, n_words)) * (rng.random((8, n_words)) < 0.5)
    counts = np.clip(centres[groups] + rng.poisson(0.5, (24, n_words)) - 1, 0, None).astype(np.float32)
    counts[np.flatnonzero(counts.sum(axis=1) == 0), 0] = 1
    split = np.where(groups < 4, "train", "test")
    pd.DataFrame(
        {
            "image_id": [f"i{j}" for j in range(24)], "path": [f"{j}.jpg" for j in range(24)], "group": groups,
            "is_query": np.arange(24) % 3 == 0, "split": split, "together": [f"p{g}" for g in groups],
        }
    ).to_csv(tmp_path / "images.csv", index=False)  # fmt: skip
    sp.save_npz(tmp_path / "bovw.npz", sp.csr_matrix(counts))
    words = rng.normal(size=(n_words, 128)).astype(np.float32)
    VisualVocabulary(words, seed=0, n_iter=1, nprobe=1).save(tmp_path / "vocabulary.npz")
    options = {"max_iter": 3, "n_random_triplets": 20}
    start = time.perf_counter()
    seeds.train_similarity_matrix(
        tmp_path / "images.csv", tmp_path / "bovw.npz", tmp_path / "vocabulary.npz", tmp_path / "M.npz",
        tmp_path / "record.json", options, seed=0, ns_score=False,
    )  # fmt: skip
    wall = time.perf_counter() - start
    record = json.loads((tmp_path / "record.json").read_text())
    assert 0 < record["train_s"] < wall
    train, test = split == "train", split == "test"
    expected = SparseSimilarityMatrix(**options, random_state=0).fit(
        counts[train], groups[train], words, together=np.array([f"p{g}" for g in groups[train]])
    )
    M = sp.load_npz(tmp_path / "M.npz")
    np.testing.assert_array_equal(M.toarray(), sp.csr_matrix(expected.metric_).toarray())
    test_counts = counts[test]
    assert record["db_bytes_per_image"] == pytest.approx(8 * np.count_nonzero(test_counts, axis=1).mean() + 4)
    query_rows = np.flatnonzero((np.arange(24) % 3 == 0)[test])
    scores = expected.score_pairs(test_counts[query_rows], test_counts)
    assert record["test_map"] == pytest.approx(map_from_scores(scores, query_rows, groups[test]), abs=1e-6)


def test_the_final_map_is_the_last_iterate_not_the_best(tmp_path):
    """Table II reports the projector the training ended with: taking the best test mAP
    of the history would select the model on the test split."""
    from ndir.stages.sparse import final_maps

    history = tmp_path / "history.csv"
    run = {"signature": "fv-8", "encoding": "fv", "K": 8, "R": 4, "tau": 0.9}
    pd.DataFrame({**run, "iteration": [0, 10, 20], "test_map_l2": [0.5, 0.9, 0.7]}).to_csv(history, index=False)
    row = final_maps([history]).iloc[0]
    assert (row["initial"], row["final"]) == (0.5, 0.7)


def test_a_finished_run_says_where_its_results_are_with_a_headline(tmp_path):
    from ndir.stages.report import finished_run

    table1, table2 = tmp_path / "table1.csv", tmp_path / "table2.csv"
    # On Holidays the paper's values and the differences sit beside ours: left out.
    pd.DataFrame(
        {"Sign.": ["VLAD-64", "FV-64"], "Dim.": ["5k", "10k"], "Full": [96.26, 95.66], "Full (paper)": [99.0, 99.0],
         "Full (Δ)": [-2.74, -3.34], "32": [89.38, 91.01], "32 (paper)": [10.0, 10.0], "32 (Δ)": [79.38, 81.01]}
    ).to_csv(table1, index=False)  # fmt: skip
    # UKBench's N-S scores (out of 4) sit beside the mAPs: left out too.
    pd.DataFrame(
        {"Sign.": ["VLAD-64", "FV-64"], "90% R32": [92.3, 94.76], "N-S 90% R32": [3.4, 3.5], "99% R32": [93.72, 91.65]}
    ).to_csv(table2, index=False)
    headline, where = finished_run(table1, table2, "results/tables", "results/figures")
    assert headline == (
        "ndir: test mAP over the signatures: full signatures 95.7–96.3 %, PCA to R 89.4–91.0 %, "
        f"learned sparse 91.7–94.8 % ({table1}, {table2})"
    )
    assert where.startswith("ndir: every table in results/tables/ (csv, md, tex), the figures in results/figures/")
    assert "snakemake --report results/report.html" in where
    # A run of other targets: where things are, no headline.
    assert finished_run(tmp_path / "none.csv", tmp_path / "none2.csv", "t", "f") == [where.replace(
        "results/tables/", "t/").replace("results/figures/", "f/")]  # fmt: skip


def test_a_grid_job_writes_what_its_trainings_write_one_by_one(tmp_path):
    """train_sparse_projectors (every R at one tau, signatures loaded once) writes, for
    each R, the projector and history that train_sparse_projector writes for that cell:
    the same U bit for bit, the same history; only the fit's seconds differ."""
    from ndir.projection import load_projector
    from ndir.stages.sparse import train_sparse_projector, train_sparse_projectors

    images, signatures = _small_training_set(tmp_path, "vlad-16", seed=5)
    cell = small_training(12)
    dims = [4, 2, 6]
    common = dict(images=images, signatures=signatures, encoding="vlad", codebook_size=16, ns_score=False,
                  sparsity=cell["sparsity"], settings=cell["settings"], seed=cell["seed"])  # fmt: skip
    train_sparse_projectors(
        projectors=[tmp_path / f"grid-R{R}.npz" for R in dims],
        histories=[tmp_path / f"grid-R{R}.csv" for R in dims],
        dims=dims,
        **common,
    )
    for R in dims:
        train_sparse_projector(
            projector=tmp_path / f"cell-R{R}.npz", history=tmp_path / f"cell-R{R}.csv", n_components=R, **common
        )
        (grid, grid_meta), (cell_U, cell_meta) = (
            load_projector(tmp_path / f"{job}-R{R}.npz") for job in ("grid", "cell")
        )
        assert grid.shape == (64, R) and grid_meta["n_components"] == R
        np.testing.assert_array_equal(grid.toarray(), cell_U.toarray())
        assert {**grid_meta, "fit_seconds": 0} == {**cell_meta, "fit_seconds": 0}
        pd.testing.assert_frame_equal(
            pd.read_csv(tmp_path / f"grid-R{R}.csv"), pd.read_csv(tmp_path / f"cell-R{R}.csv")
        )
    with pytest.raises(ValueError, match="3 dims for 2 projectors"):
        train_sparse_projectors(projectors=[tmp_path / "a.npz"] * 2, histories=[tmp_path / "a.csv"] * 3, dims=dims,
                                **common)  # fmt: skip


def test_the_descriptor_sample_is_the_same_on_any_number_of_threads(tmp_path, monkeypatch):
    """sample_descriptors describes a batch of images on as many threads as BLAS may
    use, then samples them in order: the same sample on 1 and 2 threads, whatever the
    batch size, and each image's own descriptors."""
    from threadpoolctl import threadpool_limits

    from ndir.descriptors import image_descriptors_with
    from ndir.stages import codebooks

    table, _, _ = _index(_write_holidays(tmp_path / "jpg", 4), tmp_path)
    images = tmp_path / "out/images.csv"
    samples = {}
    for threads, batch in [(1, 8), (2, 8), (2, 3)]:
        monkeypatch.setattr(codebooks, "SAMPLE_BATCH", batch)
        with threadpool_limits(limits=threads, user_api="blas"):
            codebooks.sample_descriptors(images, tmp_path / f"s{threads}{batch}.npy", per_image=5, seed=0,
                                         descriptors=DESCRIPTORS)  # fmt: skip
        samples[threads, batch] = np.load(tmp_path / f"s{threads}{batch}.npy")
    train = table.loc[table["split"] == "train", "path"].tolist()
    assert samples[1, 8].shape == (5 * len(train), 128) and len(train) > 3
    np.testing.assert_array_equal(samples[2, 8], samples[1, 8])
    np.testing.assert_array_equal(samples[2, 3], samples[1, 8])
    first = image_descriptors_with(train[0], DESCRIPTORS)
    picked = first[np.random.default_rng(0).choice(len(first), size=5, replace=False)]
    np.testing.assert_array_equal(samples[2, 3][:5], picked)
