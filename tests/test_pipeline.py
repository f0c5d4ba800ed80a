"""The workflow's stage functions, run without Snakemake on small folders."""

import json

import cv2
import numpy as np
import pandas as pd
import pytest

from ndir import pipeline
from ndir.errors import ConfigError, DatasetError

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


def _index(folder, tmp_path, max_dim=4, keep_together=None):
    outputs = {name: str(tmp_path / f"out/{name}") for name in ("images.csv", "skipped.csv", "report.json")}
    pipeline.index_dataset(
        images=outputs["images.csv"],
        skipped=outputs["skipped.csv"],
        report=outputs["report.json"],
        kind="holidays",
        root=str(folder),
        train_fraction=0.5,
        keep_together=keep_together,
        seed=0,
        descriptors=DESCRIPTORS,
        max_dim=max_dim,
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


def test_too_few_training_images_names_the_key(tmp_path):
    folder = _write_holidays(tmp_path / "holidays", n_groups=4)
    with pytest.raises(ConfigError, match="baseline.dims"):
        _index(folder, tmp_path, max_dim=32)


def test_missing_folder_names_it(tmp_path):
    with pytest.raises(DatasetError, match="nowhere"):
        _index(tmp_path / "nowhere", tmp_path)


def test_a_failed_stage_leaves_no_output(tmp_path):
    target = tmp_path / "table.csv"
    with pytest.raises(RuntimeError), pipeline.atomic_output(target) as tmp:
        open(tmp, "w").write("half a table")
        raise RuntimeError("crash while writing")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_shards_cover_every_image_once():
    rows = [pipeline.shard_rows(10, s, 3) for s in range(3)]
    covered = np.concatenate([np.arange(10)[r] for r in rows])
    assert np.array_equal(covered, np.arange(10))
