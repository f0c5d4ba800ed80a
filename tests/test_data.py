"""ndir.data: image decoding, data-set loaders, image checks, group split, embedded set."""

import logging
from itertools import combinations

import cv2
import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

from ndir import embedded
from ndir.data import (
    DatasetScan,
    build_embedded_dataset,
    holdout_mask,
    keep_together_labels,
    read_gray,
    scan_dataset,
    split_groups,
    validate_images,
)
from ndir.errors import ConfigError, DatasetError, ImageReadError

from .conftest import REPO


def _photo(height=48, width=64, seed=0):
    """A random colour image (H, W, 3) uint8 BGR with some structure."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
    return cv2.resize(small, (width, height), interpolation=cv2.INTER_LINEAR)


def _write(path, image=None, ext=None):
    """Write ``image`` (default: a random photo) with OpenCV; returns the path."""
    image = _photo() if image is None else image
    ok, data = cv2.imencode(ext or path.suffix.lower(), image)
    assert ok
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.tobytes())
    return path


# --------------------------------------------------------------------------- read_gray


def test_read_gray_png_gray_is_exact(tmp_path):
    gray = _photo()[:, :, 0]
    out = read_gray(_write(tmp_path / "g.png", gray))
    assert out.dtype == np.uint8 and out.shape == gray.shape
    np.testing.assert_array_equal(out, gray)
    assert out.flags.writeable


def test_read_gray_colour_png_uses_opencv_luminance(tmp_path):
    bgr = _photo()
    out = read_gray(_write(tmp_path / "c.png", bgr))
    np.testing.assert_array_equal(out, cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY))
    # Independent check of the weights: 0.299 R + 0.587 G + 0.114 B.
    b, g, r = (bgr[:, :, i].astype(float) for i in range(3))
    np.testing.assert_allclose(out, 0.299 * r + 0.587 * g + 0.114 * b, atol=1)


def test_read_gray_colour_jpeg_close_to_opencv(tmp_path):
    path = _write(tmp_path / "c.jpg", _photo(96, 128))
    out = read_gray(path)
    reference = cv2.cvtColor(cv2.imread(str(path), cv2.IMREAD_COLOR), cv2.COLOR_BGR2GRAY)
    assert out.shape == reference.shape
    assert np.abs(out.astype(int) - reference).mean() < 1.0


def test_read_gray_drops_alpha(tmp_path):
    bgr = _photo()
    alpha = np.zeros(bgr.shape[:2], np.uint8)  # fully transparent: alpha must not matter
    out = read_gray(_write(tmp_path / "rgba.png", np.dstack([bgr, alpha])))
    np.testing.assert_array_equal(out, cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY))

    gray = bgr[:, :, 1]
    Image.fromarray(np.dstack([gray, alpha]), mode="LA").save(tmp_path / "la.png")
    np.testing.assert_array_equal(read_gray(tmp_path / "la.png"), gray)


def test_read_gray_palette_png(tmp_path):
    bgr = _photo()
    Image.fromarray(bgr[:, :, ::-1]).quantize(16).save(tmp_path / "p.png")
    rgb = np.asarray(Image.open(tmp_path / "p.png").convert("RGB"))
    np.testing.assert_array_equal(read_gray(tmp_path / "p.png"), cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY))


def test_read_gray_scales_16_bit(tmp_path):
    values = np.array([[0, 257, 4096, 32768, 65534, 65535]], dtype=np.uint16)
    out = read_gray(_write(tmp_path / "g16.png", values))
    expected = [[round(v * 255 / 65535) for v in row] for row in values.tolist()]
    np.testing.assert_array_equal(out, expected)  # 4096 -> 16: scaled, not clipped to 255
    assert out.tolist() == [[0, 1, 16, 128, 255, 255]]

    colour = np.dstack([values, values, values])
    out = read_gray(_write(tmp_path / "c16.png", colour))
    assert out.dtype == np.uint8
    assert out[0].tolist() == [0, 1, 16, 128, 255, 255]  # rounded, as the grey image


def test_read_gray_rejects_float_pixels(tmp_path):
    Image.fromarray(np.ones((8, 8), np.float32)).save(tmp_path / "f.tif")
    with pytest.raises(ImageReadError, match="floating-point") as info:
        read_gray(tmp_path / "f.tif")
    assert "truncated" not in str(info.value)


def test_read_gray_truncated_jpeg(tmp_path):
    data = _write(tmp_path / "whole.jpg", _photo(240, 320)).read_bytes()
    assert read_gray(tmp_path / "whole.jpg").shape == (240, 320)
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageReadError, match="truncated") as info:
        read_gray(cut)
    assert str(cut) in str(info.value) and info.value.path == str(cut)
    cut.write_bytes(data[:-2])  # only the end-of-image marker missing
    with pytest.raises(ImageReadError):
        read_gray(cut)


def test_read_gray_truncated_png(tmp_path):
    data = _write(tmp_path / "whole.png", _photo(240, 320)).read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageReadError, match="cut.png"):
        read_gray(tmp_path / "cut.png")


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("notes.jpg", b"these are not pixels\n" * 10, "not an image"),
        ("empty.jpg", b"", "empty"),
    ],
)
def test_read_gray_bad_files(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ImageReadError, match=message) as info:
        read_gray(path)
    assert str(path) in str(info.value)


def test_read_gray_an_image_past_pillows_size_limit_is_called_too_large(tmp_path):
    """A PNG whose header claims 15000 x 15000 pixels (Pillow refuses above about 179 M):
    too large, not corrupt, and the fix says so."""
    import struct
    import zlib

    small = tmp_path / "small.png"
    Image.new("L", (8, 8)).save(small)
    data = bytearray(small.read_bytes())
    header = struct.pack(">II", 15000, 15000) + bytes(data[24:29])  # IHDR: width, height, the rest
    data[16:29] = header
    data[29:33] = struct.pack(">I", zlib.crc32(b"IHDR" + header))
    huge = tmp_path / "huge.png"
    huge.write_bytes(bytes(data))
    with pytest.raises(ImageReadError) as info:
        read_gray(huge)
    message = str(info.value)
    assert message.startswith(f"{huge}: too large to decode safely (Image size (225000000 pixels) exceeds limit")
    assert "shrink it" in message and "corrupt" not in message


def test_read_gray_missing_file_and_folder(tmp_path):
    with pytest.raises(ImageReadError, match="not found") as info:
        read_gray(tmp_path / "missing.jpg")
    assert "missing.jpg" in str(info.value)
    with pytest.raises(ImageReadError, match="folder"):
        read_gray(tmp_path)


# --------------------------------------------------------------------------- scan_dataset


def _touch_images(root, names):
    for name in names:
        _write(root / name, ext=".png")  # content format does not matter to the scan


def test_scan_holidays(tmp_path, caplog):
    _touch_images(tmp_path, ["100001.jpg", "100000.jpg", "100102.jpg", "100101.JPEG", "100100.png", "100201.jpg"])
    (tmp_path / "README.txt").write_text("hello")
    (tmp_path / "Thumbs.db").write_bytes(b"\0")
    with caplog.at_level(logging.WARNING, logger="ndir.data"):
        scan = scan_dataset("holidays", tmp_path)
    assert isinstance(scan, DatasetScan)
    images, ignored = scan
    assert images["image_id"].tolist() == ["100000", "100001", "100100", "100101", "100102"]
    assert images["group"].tolist() == [1000, 1000, 1001, 1001, 1001]
    assert images["is_query"].tolist() == [True, False, True, False, False]
    assert images["group"].dtype == np.int64 and images["is_query"].dtype == bool
    assert images["path"].tolist() == [
        str((tmp_path / n).resolve()) for n in ["100000.jpg", "100001.jpg", "100100.png", "100101.JPEG", "100102.jpg"]
    ]
    reasons = dict(zip(ignored["path"].map(lambda p: p.rsplit("/", 1)[-1]), ignored["reason"]))
    assert set(reasons) == {"README.txt", "Thumbs.db", "100201.jpg"}
    assert "no query" in reasons["100201.jpg"]
    assert "naming" in reasons["README.txt"]
    assert list(ignored.columns) == ["image_id", "path", "reason"]
    assert "README.txt" in caplog.text


def test_scan_holidays_query_first_in_each_group(tmp_path):
    # Ids sort after the query inside a group even when files are listed otherwise.
    _touch_images(tmp_path, ["100599.jpg", "100500.jpg", "100550.jpg"])
    images, _ = scan_dataset("holidays", tmp_path)
    assert images["image_id"].tolist() == ["100500", "100550", "100599"]
    assert images.groupby("group")["is_query"].sum().eq(1).all()


def test_scan_duplicate_ids_are_ignored(tmp_path):
    _touch_images(tmp_path, ["100000.jpg", "100000.png", "100001.jpg"])
    images, ignored = scan_dataset("holidays", tmp_path)
    assert images["image_id"].tolist() == ["100000", "100001"]
    assert len(ignored) == 1 and "duplicate" in ignored["reason"].iloc[0]


def test_scan_embedded_expects_views_csv(tmp_path):
    _touch_images(tmp_path, ["100000.jpg", "100001.jpg"])
    (tmp_path / "views.csv").write_text("image_id\n")
    images, ignored = scan_dataset("embedded", tmp_path)
    assert len(images) == 2 and ignored.empty
    _, ignored = scan_dataset("holidays", tmp_path)
    assert ignored["path"].str.endswith("views.csv").all() and len(ignored) == 1
    # Files sorted after views.csv are still looked at.
    (tmp_path / "zz_notes.txt").write_text("x")
    images, ignored = scan_dataset("embedded", tmp_path)
    assert len(images) == 2 and ignored["path"].str.endswith("zz_notes.txt").tolist() == [True]


def test_scan_ukbench(tmp_path):
    names = [f"ukbench{i:05d}.jpg" for i in range(8)] + ["ukbench00009.jpg", "UKBENCH00012.PNG", "ukbench00013.jpg"]
    _touch_images(tmp_path, names)
    (tmp_path / "index.html").write_text("<html/>")
    images, ignored = scan_dataset("ukbench", tmp_path)
    assert images["group"].tolist() == [0] * 4 + [1] * 4 + [2] + [3, 3]
    # UKBench's protocol: every image is a query, so no group lacks one.
    assert images["is_query"].all()
    assert images["image_id"].iloc[9] == "UKBENCH00012"
    assert ignored["image_id"].tolist() == ["index"] and "naming" in ignored["reason"].iloc[0]
    # The kind as the config gives it (a string read from YAML, not a literal).
    kind = yaml.safe_load("kind: ukbench")["kind"]
    assert scan_dataset(kind, tmp_path)[0].equals(images)


def test_an_unreadable_ukbench_image_costs_its_group_only_itself(tmp_path):
    """Every UKBench image is a query: one that cannot be read leaves its group's other
    three, where a Holidays query that cannot be read takes its group with it."""
    for i in range(8):
        _write(tmp_path / "ukbench" / f"ukbench{i:05d}.jpg", _photo(64, 80))
        _write(tmp_path / "holidays" / f"{100000 + 100 * (i // 4) + i % 4}.jpg", _photo(64, 80))
    (tmp_path / "ukbench/ukbench00000.jpg").write_bytes(b"cut")
    (tmp_path / "holidays/100000.jpg").write_bytes(b"cut")
    kept, skipped = validate_images(scan_dataset("ukbench", tmp_path / "ukbench").images, min_size=16)
    assert kept["image_id"].tolist() == [f"ukbench{i:05d}" for i in range(1, 8)]
    assert skipped["image_id"].tolist() == ["ukbench00000"]
    kept, skipped = validate_images(scan_dataset("holidays", tmp_path / "holidays").images, min_size=16)
    assert kept["group"].tolist() == [1001] * 4 and len(skipped) == 4


def test_scan_ukbench_refuses_numbers_not_of_five_digits(tmp_path):
    """ukbench0001.jpg beside ukbench00001.jpg is not a fifth image of group 0: a
    number not of five digits is ignored, the reason naming the file and the naming."""
    _touch_images(tmp_path, [f"ukbench{i:05d}.jpg" for i in range(4)] + ["ukbench0001.jpg", "ukbench000004.jpg"])
    images, ignored = scan_dataset("ukbench", tmp_path)
    assert images["image_id"].tolist() == ["ukbench00000", "ukbench00001", "ukbench00002", "ukbench00003"]
    reasons = dict(zip(ignored["image_id"], ignored["reason"]))
    assert sorted(reasons) == ["ukbench000004", "ukbench0001"]
    assert reasons["ukbench0001"].startswith("ukbench0001.jpg: number of 4 digits")
    assert reasons["ukbench000004"].startswith("ukbench000004.jpg: number of 6 digits")
    assert all("five (ukbench00000.jpg" in reason for reason in reasons.values())


def test_scan_folders(tmp_path):
    _touch_images(tmp_path, ["b/x.jpg", "b/a.png", "a/z.jpg", "a/y.JPG", "a/w.jpeg"])
    (tmp_path / "a" / "notes.txt").write_text("x")
    (tmp_path / "empty").mkdir()
    _write(tmp_path / "stray.jpg")
    images, ignored = scan_dataset("folders", tmp_path)
    assert images["image_id"].tolist() == ["a/w", "a/y", "a/z", "b/a", "b/x"]
    assert images["group"].tolist() == [0, 0, 0, 1, 1]
    assert images["group_name"].tolist() == ["a", "a", "a", "b", "b"]
    assert images["is_query"].tolist() == [True, False, False, True, False]
    assert sorted(p.rsplit("/", 1)[-1] for p in ignored["path"]) == ["empty", "notes.txt", "stray.jpg"]
    # The kind as the config gives it (a string read from YAML, not a literal).
    from_config = yaml.safe_load("dataset: {kind: folders}")["dataset"]["kind"]
    assert scan_dataset(from_config, tmp_path)[0].equals(images)


def test_scan_errors_name_the_folder_and_layout(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(DatasetError, match="not found") as info:
        scan_dataset("holidays", missing)
    assert str(missing) in str(info.value) and "100000.jpg" in str(info.value)

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetError, match="empty") as info:
        scan_dataset("ukbench", empty)
    assert str(empty) in str(info.value) and "ukbench00000.jpg" in str(info.value)

    other = tmp_path / "other"
    _touch_images(other, ["photo.jpg"])
    (other / "jpg").mkdir()
    with pytest.raises(DatasetError, match="no image named") as info:
        scan_dataset("holidays", other)
    assert str(other) in str(info.value) and "photo.jpg" in str(info.value) and "jpg" in str(info.value)

    with pytest.raises(DatasetError, match="not a folder"):
        scan_dataset("folders", other / "photo.jpg")
    with pytest.raises(DatasetError, match="no image"):
        scan_dataset("folders", other)  # only a stray file and an empty folder


def test_scan_unknown_kind():
    with pytest.raises(ConfigError, match="dataset.kind") as info:
        scan_dataset("imagenet", "/tmp")
    for kind in ("embedded", "holidays", "ukbench", "folders"):
        assert kind in str(info.value)


# --------------------------------------------------------------------------- validate_images


def _dataset_with_bad_images(root):
    """Holidays folder: groups 1000 (fine), 1001 (a tiny match), 1002 (truncated query), 1003 (two images)."""
    for name in [
        "100000.jpg",
        "100001.jpg",
        "100002.jpg",
        "100100.jpg",
        "100101.jpg",
        "100201.jpg",
        "100202.jpg",
        "100300.jpg",
        "100301.jpg",
    ]:
        _write(root / name, _photo(64, 80, seed=len(name)))
    _write(root / "100102.jpg", _photo(16, 80))
    data = _write(root / "100200.jpg", _photo(64, 80)).read_bytes()
    (root / "100200.jpg").write_bytes(data[: len(data) // 2])
    (root / "100301.jpg").write_bytes(b"")
    return scan_dataset("holidays", root).images


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_validate_images(tmp_path, caplog, n_jobs):
    images = _dataset_with_bad_images(tmp_path)
    with caplog.at_level(logging.WARNING, logger="ndir.data"):
        kept, skipped = validate_images(images, min_size=32, n_jobs=n_jobs)
    assert kept["image_id"].tolist() == ["100000", "100001", "100002", "100100", "100101"]
    assert list(kept.columns) == list(images.columns)
    reasons = dict(zip(skipped["image_id"], skipped["reason"]))
    assert set(reasons) == {"100102", "100200", "100201", "100202", "100300", "100301"}
    assert "80x16" in reasons["100102"] and "32" in reasons["100102"]
    assert "truncated" in reasons["100200"]
    assert "query 100200" in reasons["100201"] and "query 100200" in reasons["100202"]
    assert "empty" in reasons["100301"]
    assert reasons["100300"] == "group has a single image"
    assert list(skipped.columns) == ["image_id", "path", "reason"]
    assert caplog.text.count("skipped image") == 6
    # Every image is either kept or skipped, never both.
    assert sorted(kept["image_id"].tolist() + skipped["image_id"].tolist()) == sorted(images["image_id"])


# --------------------------------------------------------------------------- split_groups


def _table(n_groups, per_group=3):
    rows = [
        {"image_id": f"{100000 + 100 * g + v}", "path": f"/x/{g}_{v}.jpg", "group": 1000 + g, "is_query": v == 0}
        for g in range(n_groups)
        for v in range(per_group)
    ]
    return pd.DataFrame(rows)


def test_split_groups():
    images = _table(10)
    split = split_groups(images, train_fraction=0.5, seed=3)
    assert "split" not in images.columns
    pd.testing.assert_frame_equal(split.drop(columns="split"), images)
    per_group = split.groupby("group")["split"].nunique()
    assert (per_group == 1).all()  # no group in both splits
    train_groups = split.loc[split["split"] == "train", "group"].unique()
    assert len(train_groups) == 5 and set(split["split"]) == {"train", "test"}

    pd.testing.assert_frame_equal(split, split_groups(images, train_fraction=0.5, seed=3))
    others = {tuple(sorted(split_groups(images, seed=s).query("split == 'train'")["group"].unique())) for s in range(6)}
    assert len(others) > 1

    assert split_groups(images, train_fraction=0.3).query("split == 'train'")["group"].nunique() == 3
    assert split_groups(_table(5), train_fraction=0.5).query("split == 'train'")["group"].nunique() == round(2.5)


@pytest.mark.parametrize("fraction", [0.0, 1.0, 0.01, 1.5])
def test_split_groups_needs_both_splits(fraction):
    with pytest.raises(ConfigError, match="dataset.train_fraction"):
        split_groups(_table(10), train_fraction=fraction)


def test_split_keeps_linked_groups_together_hand_worked():
    """Groups 0-1 share a photo, 1-2 another: {0, 1, 2} is one block (transitively);
    4-5 share a third; 3, 6, 7 are alone. 4 of 8 groups go to training."""
    images = _table(8, per_group=2)
    photo = {1000: "a", 1001: "a", 1002: "b", 1004: "c", 1005: "c"}
    labels = [photo.get(g) for g in images["group"]]
    labels[3] = "b"  # the second image of group 1001 is a window of photo b
    together = pd.Series(labels, index=images.index, dtype=object)
    for seed in range(20):
        split = split_groups(images, train_fraction=0.5, seed=seed, together=together)
        side = split.groupby("group")["split"].first()
        assert side[1000] == side[1001] == side[1002] and side[1004] == side[1005]
        assert (side == "train").sum() == 4  # blocks of 3, 2, 1, 1, 1 groups: 4 = 3 + 1 = 2 + 1 + 1
    # Without labels, the split is the seeded permutation of the groups, as before.
    plain = split_groups(images, train_fraction=0.5, seed=3)
    expected = np.random.default_rng(3).permutation(np.unique(images["group"]))[:4]
    assert set(plain.query("split == 'train'")["group"]) == set(expected)


def test_holdout_keeps_a_photo_together_hand_worked():
    """Six training groups of two images; groups 0 and 1 are windows of photo "a", 2 and
    3 of "b", 4 of "c", 5 of "d". A third of the groups is held out: 2.

    Seed 1, plain: RandomState(1).permutation(6) = [2, 1, 4, 0, 3, 5] holds out groups
    2 and 1, so photos a and b each have a group on both sides. By photo: the blocks
    {0, 1}, {2, 3}, {4}, {5} are drawn in the order RandomState(1).permutation(4) =
    [3, 2, 0, 1], i.e. {5}, {4}, {0, 1}, {2, 3}; {5} then {4} make the 2 groups.
    Seed 4: the order [0, 1, 3, 2] starts with {0, 1}, which makes 2 groups alone."""
    groups = np.repeat(np.arange(6), 2)
    photos = np.repeat(np.array(["a", "a", "b", "b", "c", "d"], dtype=object), 2)

    def held(seed, together):
        mask = holdout_mask(groups, 1 / 3, np.random.RandomState(seed), together)
        return set(np.unique(groups[mask]).tolist())

    assert held(1, None) == {1, 2}
    assert held(1, photos) == {4, 5}
    assert held(4, photos) == {0, 1}
    # Whatever the seed, no photo has groups on both sides, and 2 groups are held out.
    for seed in range(30):
        mask = holdout_mask(groups, 1 / 3, np.random.RandomState(seed), photos)
        assert len(set(photos[mask]) & set(photos[~mask])) == 0 and len(np.unique(groups[mask])) == 2


def test_holdout_without_labels_is_the_legacy_draw_and_refuses_tiny_holdouts():
    rng = np.random.default_rng(0)
    groups = rng.integers(0, 30, size=100)
    labels, sizes = np.unique(groups, return_counts=True)
    eligible = labels[sizes >= 2]
    legacy = np.random.RandomState(5).choice(eligible, size=round(0.2 * eligible.size), replace=False)
    np.testing.assert_array_equal(holdout_mask(groups, 0.2, np.random.RandomState(5)), np.isin(groups, legacy))
    # Fewer than two groups held out, or left: no hold-out.
    four = np.repeat(np.arange(4), 2)
    assert not holdout_mask(four, 0.1, np.random.RandomState(0)).any()
    assert not holdout_mask(four, 0.7, np.random.RandomState(0)).any()
    assert holdout_mask(four, 0.5, np.random.RandomState(0)).sum() == 4
    # One photo for all groups: nothing can be held out without straddling it.
    assert not holdout_mask(four, 0.5, np.random.RandomState(0), ["p"] * 8).any()
    # Single-image groups are never counted nor drawn, missing labels link nothing.
    lone = np.array([0, 0, 1, 1, 2, 2, 3, 3, 9])
    together = [None, None, np.nan, np.nan, "x", "x", "y", "y", "x"]
    for seed in range(10):
        mask = holdout_mask(lone, 0.5, np.random.RandomState(seed), together)
        assert mask.sum() in (4, 5) and mask[4] == mask[5] == mask[8]


def test_split_that_blocks_cannot_meet_is_an_error_naming_the_key():
    images = _table(4)
    together = pd.Series(["p"] * len(images), index=images.index, dtype=object)
    with pytest.raises(ConfigError, match="dataset.train_fraction"):
        split_groups(images, train_fraction=0.5, together=together)


def test_embedded_split_keeps_each_photo_on_one_side(tmp_path):
    """130 groups from 118 photos: some photos are cut into windows of several groups;
    their groups must share a split, which a plain group split does not ensure."""
    build_embedded_dataset(tmp_path, n_groups=130, seed=0, view_size=64)
    images = scan_dataset("embedded", tmp_path).images
    photos = keep_together_labels(images, tmp_path, tmp_path / "views.csv", "photo")
    assert photos.notna().all()
    groups_per_photo = images.assign(photo=photos).groupby("photo")["group"].nunique()
    assert groups_per_photo.max() > 1

    def straddling(split):
        return int((split.assign(photo=photos).groupby("photo")["split"].nunique() > 1).sum())

    split = split_groups(images, train_fraction=0.5, seed=0, together=photos)
    assert straddling(split) == 0
    assert split.query("split == 'train'")["group"].nunique() == 65
    assert max(straddling(split_groups(images, train_fraction=0.5, seed=s)) for s in range(5)) > 0


def test_keep_together_table_errors_name_the_file_and_key(tmp_path):
    images = _table(2)
    table = tmp_path / "scenes.csv"
    table.write_text("name,scene\n0_0.jpg,a\n")
    with pytest.raises(DatasetError, match=r"scenes\.csv.*'file'.*dataset.keep_together"):
        keep_together_labels(images, "/x", table, "scene")
    with pytest.raises(DatasetError, match="missing.csv"):
        keep_together_labels(images, "/x", tmp_path / "missing.csv", "scene")
    table.write_text("file,scene\n0_0.jpg,a\n1_1.jpg,a\n")
    labels = keep_together_labels(images, "/x", table, "scene")
    assert labels.tolist() == ["a", None, None, None, "a", None]


# --------------------------------------------------------------------------- embedded


def test_shipped_photos_match_manifest():
    photos = embedded.shipped_photos()
    assert len(photos) == 118
    assert {"file", "width", "height", "license", "copyright", "source"} <= set(photos.columns)
    assert (photos["license"] != "").all()
    for name, width, height in zip(photos["file"], photos["width"], photos["height"]):
        image = embedded._decode_photo(name)
        assert image.shape == (height, width, 3), name


@pytest.fixture(scope="module")
def windows_set(tmp_path_factory):
    """124 groups: more than the 118 photos, so some photos are cut into windows."""
    folder = tmp_path_factory.mktemp("embedded") / "set"
    return folder, build_embedded_dataset(folder, n_groups=124, seed=5, view_size=64)


def test_embedded_groups(windows_set):
    folder, table = windows_set
    sizes = table.groupby("group").size()
    assert len(sizes) == 124
    assert sizes.between(2, 5).all() and set(sizes) == {2, 3, 4, 5}
    assert 2.6 < sizes.mean() < 3.4  # Holidays: 2.98 images per group
    assert table.groupby("group")["is_query"].sum().eq(1).all()
    assert table.groupby("group")["is_query"].first().all()  # query first
    numbers = table["image_id"].astype(int)
    assert (numbers // 100 == table["group"]).all() and (table["is_query"] == (numbers % 100 == 0)).all()
    assert (np.maximum(table["width"], table["height"]) == 64).all()  # view_size: the longer side

    images, ignored = scan_dataset("embedded", folder)
    assert ignored.empty
    pd.testing.assert_frame_equal(images, table[["image_id", "path", "group", "is_query"]])
    views = pd.read_csv(folder / "views.csv", dtype={"image_id": str})
    assert views["image_id"].tolist() == table["image_id"].tolist()
    assert {"file", "photo", "license", "copyright", "photo_source", "jpeg_quality"} <= set(views.columns)
    first = cv2.imread(str(folder / views["file"].iloc[0]))
    assert first.shape == (views["height"].iloc[0], views["width"].iloc[0], 3)


def test_embedded_windows_share_the_sibling_overlap(windows_set):
    """Windows of one photo are distinct scenes whose neighbours share
    DEFAULT_SIBLING_OVERLAP (60 %) of a tile's side along the cut, the whole side
    across it (windows are tiles grown by 30 % of a tile into each neighbour)."""
    _, table = windows_set
    scenes = table.drop_duplicates("group")
    boxes = ["window_x0", "window_y0", "window_x1", "window_y1"]
    assert not scenes.duplicated(["photo", *boxes]).any()  # one scene per group
    assert (scenes["photo"].value_counts() > 1).any()  # some photos give several windows
    photos = embedded.shipped_photos().set_index("file")
    # The library's default is the default run's (config.yaml), used by `ndir build-embedded` too.
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    assert embedded.DEFAULT_SIBLING_OVERLAP == config["embedded"]["sibling_overlap"] > 0
    neighbours = 0
    for photo, same_photo in scenes.groupby("photo"):
        if len(same_photo) < 2:
            continue
        width, height = photos.loc[photo, "width"], photos.loc[photo, "height"]
        rows, cols = embedded._grid(width, height, len(same_photo))
        tile_w, tile_h = width / cols, height / rows
        for (_, a), (_, b) in combinations(same_photo.iterrows(), 2):
            overlap_x = min(a.window_x1, b.window_x1) - max(a.window_x0, b.window_x0)
            overlap_y = min(a.window_y1, b.window_y1) - max(a.window_y0, b.window_y0)
            if overlap_x <= 0 or overlap_y <= 0:
                continue  # not neighbours (e.g. the first and last third)
            # Neighbours along x share 60 % of a tile's width, along y of its height.
            shared = sorted([overlap_x / tile_w, overlap_y / tile_h])
            assert shared[0] == pytest.approx(embedded.DEFAULT_SIBLING_OVERLAP, abs=2 / min(tile_w, tile_h))
            neighbours += 1
    assert neighbours > 0
    # Every view samples only pixels inside its own window.
    for row in table.itertuples():
        quad = np.array([[float(v) for v in corner.split(",")] for corner in row.quad.split(";")])
        assert (quad[:, 0] >= row.window_x0 + 1).all() and (quad[:, 0] <= row.window_x1 - 2).all()
        assert (quad[:, 1] >= row.window_y0 + 1).all() and (quad[:, 1] <= row.window_y1 - 2).all()
        assert 0.3 < row.coverage <= 0.96


def test_embedded_default_views_are_sharp_clean_and_well_compressed(windows_set):
    """The property the realistic default relies on (issue 34): no view is blurred
    or noisy and every JPEG quality is 70-95 (80-95 for queries), as written in
    views.csv; blur, noise and strong JPEG moved every affected signature the same
    way and made PCA lose 24-30 points (docs/data.md)."""
    _, table = windows_set
    assert (table["blur_sigma"] == 0).all() and (table["noise_sigma"] == 0).all()
    assert table["jpeg_quality"].between(70, 95).all()
    assert table.loc[table["is_query"], "jpeg_quality"].between(80, 95).all()
    assert (table["lighting"] == 0).all() and (table["occluder_area"] == 0).all()
    assert (table["parallax_px"] == 0).all()
    views = table[~table["is_query"]]
    # Half the other views tilted by up to 15 degrees, half slanted: both kinds occur.
    assert (views["rotation_deg"].abs() > 3).any() and (views["rotation_deg"].abs() <= 15).all()
    assert (views["perspective"] > 0).any() and (views["perspective"] == 0).any()


def test_sibling_overlap_tiles_hand_worked():
    """Tiles grown by overlap / 2 of a tile's side into each neighbour, clipped to the photo."""
    assert embedded._windows(640, 480, 2, 0.5) == [(0, 0, 400, 480), (240, 0, 640, 480)]
    assert embedded._windows(600, 480, 3, 0.6) == [(0, 0, 260, 480), (140, 0, 460, 480), (340, 0, 600, 480)]
    assert embedded._windows(640, 480, 4, 0.5) == [
        (0, 0, 400, 300),
        (240, 0, 640, 300),
        (0, 180, 400, 480),
        (240, 180, 640, 480),
    ]


def convex_quad_area(quad):
    """Area of a convex quadrilateral (4, 2) as two triangles split along the
    diagonal 0-2 (half the cross product's magnitude each); asserts convexity (the
    turns at the four corners have one sign)."""
    q = np.asarray(quad, dtype=np.float64)

    def cross(u, v):
        return u[0] * v[1] - u[1] * v[0]

    turns = [cross(q[(i + 1) % 4] - q[i], q[(i + 2) % 4] - q[(i + 1) % 4]) for i in range(4)]
    assert all(t > 0 for t in turns) or all(t < 0 for t in turns)
    return 0.5 * (abs(cross(q[1] - q[0], q[2] - q[0])) + abs(cross(q[2] - q[0], q[3] - q[0])))


def test_embedded_coverage_is_the_quads_area_over_the_windows(windows_set):
    """``coverage`` is the area of the view's source quadrilateral over the window's:
    recomputed from the written corners (rounded to 0.01 px, hence the tolerance),
    as two triangles, for every view of the set."""
    _, table = windows_set
    for row in table.itertuples():
        quad = [[float(v) for v in corner.split(",")] for corner in row.quad.split(";")]
        window = (row.window_x1 - row.window_x0) * (row.window_y1 - row.window_y0)
        assert row.coverage == pytest.approx(convex_quad_area(quad) / window, rel=1e-3)


@pytest.mark.parametrize("is_query", [True, False])
def test_sampled_geometry_coverage_hand_worked(is_query):
    """From _sample_geometry's own (unrounded) corners: coverage = area / window area,
    the area as two triangles. A query's crop has no perspective: a rotated rectangle
    of the returned sides, so its area is also rect_w x rect_h."""
    box = (40, 10, 440, 310)  # 400 x 300 window
    rng = np.random.default_rng(3)
    for _ in range(20):
        recipe = embedded.QUERY_RECIPE if is_query else embedded.DEFAULT_RECIPE
        quad, rect_w, rect_h, params = embedded._sample_geometry(box, recipe, rng)
        area = convex_quad_area(quad)
        assert params["coverage"] == pytest.approx(area / (400 * 300), rel=1e-12)
        if is_query:
            assert params["perspective"] == 0.0
            assert area == pytest.approx(rect_w * rect_h, rel=1e-9)
            sides = np.linalg.norm(np.roll(quad, -1, axis=0) - quad, axis=1)
            np.testing.assert_allclose(sides, [rect_w, rect_h, rect_w, rect_h], rtol=1e-9)


def test_tone_curve_identity_and_hand_worked():
    """_tone_curve's (256, 1, 3) BGR look-up table: gains 1, contrast 1, brightness 0
    and gamma 1 leave every level unchanged (the identity). Hand-worked: gamma 2 maps
    128 to 255 (128/255)^2 = 64.25 -> 64; contrast 2 about 128 maps 100 to 72 and
    clips 200 (272) to 255 and 50 (-28) to 0; gain_b = .5 maps 200 to 100 in blue
    only; brightness +10 maps 250 to 255 (clipped) and 0 to 10. Applied with cv2.LUT,
    channel 0 of the image (blue) follows gain_b."""
    identity = {"gain_b": 1.0, "gain_g": 1.0, "gain_r": 1.0, "contrast": 1.0, "brightness": 0.0, "gamma": 1.0}
    lut = embedded._tone_curve(identity)
    assert lut.shape == (256, 1, 3) and lut.dtype == np.uint8
    np.testing.assert_array_equal(lut[:, 0, :], np.repeat(np.arange(256)[:, None], 3, axis=1))
    assert embedded._tone_curve(identity | {"gamma": 2.0})[[0, 128, 255], 0, 1].tolist() == [0, 64, 255]
    assert embedded._tone_curve(identity | {"contrast": 2.0})[[50, 100, 200], 0, 2].tolist() == [0, 72, 255]
    assert embedded._tone_curve(identity | {"brightness": 10.0})[[0, 250], 0, 0].tolist() == [10, 255]
    gained = embedded._tone_curve(identity | {"gain_b": 0.5})
    assert gained[200, 0].tolist() == [100, 200, 200]
    image = np.full((2, 3, 3), 200, dtype=np.uint8)
    assert cv2.LUT(image, gained)[0, 0].tolist() == [100, 200, 200]


def test_relight_ramp_hand_worked():
    """A ramp of strength 0.5 along x (angle 0) over a grey 100 image 5 px wide:
    gains 0.5, 0.75, 1, 1.25, 1.5 from left to right; along y (90 degrees) the
    same down the rows."""
    view = np.full((3, 5, 3), 100, dtype=np.uint8)
    np.testing.assert_array_equal(embedded._relight(view, 0.5, 0.0)[1, :, 0], [50, 75, 100, 125, 150])
    tall = np.full((5, 2, 3), 100, dtype=np.uint8)
    np.testing.assert_array_equal(embedded._relight(tall, 0.5, 90.0)[:, 0, 2], [50, 75, 100, 125, 150])


def test_occluder_changes_only_its_box():
    rng = np.random.default_rng(0)
    view = np.full((60, 80, 3), 10, dtype=np.uint8)
    other = np.full((100, 100, 3), 250, dtype=np.uint8)
    occluder = embedded._sample_occluder(embedded.ViewRecipe(occluder_probability=1.0), 80, 60, rng)
    x0, y0, x1, y1 = (int(v) for v in occluder["occluder_box"].split(","))
    assert occluder["occluder_area"] == pytest.approx((x1 - x0) * (y1 - y0) / (80 * 60))
    assert 0.05 <= occluder["occluder_area"] <= 0.16  # the recipe's 5-15 %, rounded to pixels
    out = embedded._paste_occluder(view, occluder, other, rng)
    outside = np.ones((60, 80), dtype=bool)
    outside[y0:y1, x0:x1] = False
    assert (out[outside] == 10).all()
    # The ellipse's centre is the other photo's; its soft edge blends towards the corners.
    assert out[(y0 + y1) // 2, (x0 + x1) // 2, 0] > 200 and out[y0, x0, 0] < 100


def test_parallax_reads_only_its_window():
    """A displaced view of the left half (black) of a photo whose right half is
    white: however strong the field, no pixel comes from the neighbour."""
    photo = np.zeros((200, 400, 3), dtype=np.uint8)
    photo[:, 200:] = 255
    box = (0, 0, 200, 200)
    quad = np.array([[10.0, 10.0], [189.0, 10.0], [189.0, 189.0], [10.0, 189.0]])
    homography = cv2.getPerspectiveTransform(quad.astype(np.float32), np.float32([[0, 0], [99, 0], [99, 99], [0, 99]]))
    parallax = {"parallax_px": 30.0, "parallax_cell_px": 20.0}
    view = embedded._warp_with_parallax(photo, homography, (100, 100), box, parallax, 1.0, np.random.default_rng(0))
    assert view.shape == (100, 100, 3) and view.max() == 0


def test_embedded_plan_at_capacity_and_overlap():
    photos = embedded.shipped_photos()
    capacity = embedded.max_groups(photos)
    assert capacity > 300
    plan = embedded._plan_scenes(photos, capacity, False, np.random.default_rng(0))
    assert len(plan["box"]) == capacity
    for i in np.unique(plan["photo_index"]):
        boxes = plan["box"][plan["photo_index"] == i]
        width, height = photos["width"].iloc[i], photos["height"].iloc[i]
        # Tiles of the photo: areas add up to the photo's and pairs do not intersect.
        assert ((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])).sum() == width * height
        assert np.minimum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]).min() >= embedded.MIN_WINDOW_SIDE
    with pytest.raises(ConfigError, match="embedded.n_groups"):
        embedded._plan_scenes(photos, capacity + 1, False, np.random.default_rng(0))
    plan = embedded._plan_scenes(photos, capacity + 50, True, np.random.default_rng(0))
    boxes, index = plan["box"], plan["photo_index"]
    assert len(boxes) == capacity + 50
    assert (boxes[:, :2] >= 0).all() and (boxes[:, 2] <= photos["width"].to_numpy()[index]).all()
    assert (boxes[:, 3] <= photos["height"].to_numpy()[index]).all()


def test_embedded_deterministic(tmp_path):
    def files(folder):
        return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}

    a = build_embedded_dataset(tmp_path / "a", n_groups=3, seed=11, view_size=96)
    build_embedded_dataset(tmp_path / "b", n_groups=3, seed=11, view_size=96)
    c = build_embedded_dataset(tmp_path / "c", n_groups=3, seed=12, view_size=96)
    assert files(tmp_path / "a") == files(tmp_path / "b")
    same = set(files(tmp_path / "a")) & set(files(tmp_path / "c"))
    assert all(files(tmp_path / "a")[n] != files(tmp_path / "c")[n] for n in same)
    assert not a[["photo", "coverage"]].equals(c[["photo", "coverage"]])


def test_embedded_views_are_near_duplicates(windows_set):
    _, table = windows_set

    def thumbnail(path):
        gray = cv2.resize(read_gray(path), (12, 12), interpolation=cv2.INTER_AREA).astype(np.float64).ravel()
        gray -= gray.mean()
        return gray / (np.linalg.norm(gray) + 1e-9)

    thumbs = np.array([thumbnail(p) for p in table["path"]])
    corr = thumbs @ thumbs.T
    groups = table["group"].to_numpy()
    same = groups[:, None] == groups[None, :]
    off_diagonal = ~np.eye(len(groups), dtype=bool)
    within, between = corr[same & off_diagonal].mean(), corr[~same].mean()
    assert within > between + 0.3
    # ...yet no two views of a group are the same picture.
    assert corr[same & off_diagonal].max() < 0.999


def test_embedded_rejects_bad_arguments(tmp_path):
    with pytest.raises(ConfigError, match="embedded.n_groups"):
        build_embedded_dataset(tmp_path / "x", n_groups=0, seed=0)
    with pytest.raises(ConfigError, match="embedded.view_size"):
        build_embedded_dataset(tmp_path / "x", n_groups=2, seed=0, view_size=10)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "old.jpg").write_bytes(b"x")
    with pytest.raises(DatasetError, match="full"):
        build_embedded_dataset(tmp_path / "full", n_groups=2, seed=0)


def test_window_tiling():
    # The tiling helper: halves along the longer side, thirds, then 2 x 2.
    assert embedded._windows(640, 480, 2) == [(0, 0, 320, 480), (320, 0, 640, 480)]
    assert embedded._windows(640, 960, 3) == [(0, 0, 640, 320), (0, 320, 640, 640), (0, 640, 640, 960)]
    assert embedded._windows(640, 480, 4) == [
        (0, 0, 320, 240),
        (320, 0, 640, 240),
        (0, 240, 320, 480),
        (320, 240, 640, 480),
    ]
    assert embedded._max_windows(640, 480) == 4
    assert embedded._max_windows(640, 260) == 3  # quarters would be 130 px high


def test_a_split_of_one_group_on_a_side_is_allowed():
    """round(0.25 * 4) = 1 training group: the smallest split allowed; 0.1 of 4
    (none) and 0.9 of 4 (every group) are refused."""
    images = pd.DataFrame({"group": np.repeat(np.arange(4), 2)})
    split = split_groups(images, train_fraction=0.25, seed=0)
    assert split.loc[split["split"] == "train", "group"].nunique() == 1
    assert split.loc[split["split"] == "test", "group"].nunique() == 3
    for fraction in (0.1, 0.9):
        with pytest.raises(ConfigError, match="dataset.train_fraction"):
            split_groups(images, train_fraction=fraction, seed=0)


@pytest.mark.parametrize(
    ("n_groups", "fraction", "n_held"),
    # At least two eligible groups on each side: 5 groups at .6 hold 3 (2 stay), at
    # .7 would hold 4 (1 stays): none; 10 groups at .6 hold 6, more than half.
    [(5, 0.6, 3), (5, 0.7, 0), (10, 0.6, 6), (10, 0.15, 2), (10, 0.1, 0)],
)
def test_holdout_keeps_two_groups_on_each_side(n_groups, fraction, n_held):
    groups = np.repeat(np.arange(n_groups), 2)
    held = holdout_mask(groups, fraction, np.random.RandomState(0))
    assert np.unique(groups[held]).size == n_held
    assert all(held[groups == g].all() or not held[groups == g].any() for g in range(n_groups))


def test_holdout_of_a_large_set_with_together_labels():
    """300 images (beyond CPython's cached small integers): the together labels'
    length is compared by value."""
    groups = np.repeat(np.arange(150), 2)
    together = np.repeat(np.arange(75), 4)
    held = holdout_mask(groups, 0.2, np.random.RandomState(0), together)
    assert np.unique(groups[held]).size == 30
    assert set(together[held]).isdisjoint(together[~held])
    with pytest.raises(ValueError, match="together has 299 labels for 300 images"):
        holdout_mask(groups, 0.2, np.random.RandomState(0), together[:-1])


def test_holdout_that_would_leave_one_group_is_none_even_if_blocks_fall_short():
    """Five groups in blocks of 3 and 2 (one photo each): .7 asks for 4 held out, which
    would leave one group to train on; nothing is held out, not the 3 of a block."""
    groups = np.repeat(np.arange(5), 2)
    together = np.repeat(["a", "a", "a", "b", "b"], 2)
    assert not holdout_mask(groups, 0.7, np.random.RandomState(0), together).any()
    assert np.unique(groups[holdout_mask(groups, 0.5, np.random.RandomState(0), together)]).size in (2, 3)


def test_a_folder_without_images_says_what_it_holds(tmp_path):
    """The error for a Holidays folder holding no image names its other files and its
    sub-folders, with the fix for the latter."""
    (tmp_path / "jpg").mkdir()
    (tmp_path / "README.txt").write_text("x")
    with pytest.raises(DatasetError) as error:
        scan_dataset("holidays", tmp_path)
    message = str(error.value)
    assert "found 1 other files, e.g. README.txt" in message
    assert "sub-folders jpg: point dataset.path at the one holding the images" in message


def test_a_split_that_blocks_cannot_meet_says_so(caplog):
    """Four groups, three of them one photo: half of them (2) cannot go to training
    without splitting the photo; 1 goes, and the log says so. A reachable count logs
    nothing."""
    images = _table(4, per_group=1)
    together = pd.Series(["a", "a", "a", None], index=images.index, dtype=object)
    with caplog.at_level(logging.WARNING, logger="ndir.data"):
        split = split_groups(images, train_fraction=0.5, seed=0, together=together)
    assert (split["split"] == "train").sum() == 1
    assert "split: 1 training groups instead of 2" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ndir.data"):
        split_groups(images, train_fraction=0.5, seed=0)
    assert "instead of" not in caplog.text


def test_a_holdout_too_small_for_two_groups_a_side_is_logged(caplog):
    """7 groups at 0.2: round(1.4) = 1 held out, too few to select on; the run says so."""
    groups = np.repeat(np.arange(7), 2)
    with caplog.at_level(logging.WARNING, logger="ndir.data"):
        assert not holdout_mask(groups, 0.2, np.random.RandomState(0)).any()
    assert "holdout_fraction 0.2 of 7 training groups leaves fewer than 2 groups on a side" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ndir.data"):
        assert holdout_mask(np.repeat(np.arange(10), 2), 0.2, np.random.RandomState(0)).sum() == 4
        assert not holdout_mask(groups, 0.0, np.random.RandomState(0)).any()
    assert caplog.text == ""
