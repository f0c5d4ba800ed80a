"""Image data sets: decoding images, scanning data-set folders, checking and splitting them.

Every loader returns the *image table* shared by the whole workflow: a
:class:`pandas.DataFrame` with one row per image and the columns

``image_id`` : str
    File stem (``"100000"``, ``"ukbench00004"``); ``"<group folder>/<stem>"`` for
    the ``folders`` kind, where stems repeat from one group folder to the next.
``path`` : str
    Absolute path of the image file.
``group`` : int
    Near-duplicate group; images of one group are the positives of its query.
``is_query`` : bool
    Exactly one ``True`` per group.

sorted by ``(group, is_query descending, image_id)``, so each group starts with
its query. :func:`split_groups` adds ``split`` (``"train"`` or ``"test"``).

Every image or file left out on the way is recorded with a reason, in tables
with the columns ``image_id``, ``path``, ``reason``, so a data report can count
them: nothing is dropped silently.

:func:`build_embedded_dataset` (from :mod:`ndir.embedded`) writes the default
data set, made from the photos shipped with ndir, in Holidays naming.
"""

import logging
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import cv2
import numpy as np
import pandas as pd
import scipy.sparse
import scipy.sparse.csgraph
from PIL import Image, UnidentifiedImageError

from ndir.embedded import PROVENANCE_FILE, build_embedded_dataset
from ndir.errors import ConfigError, DatasetError, ImageReadError

__all__ = [
    "DATASET_KINDS",
    "IMAGE_SUFFIXES",
    "DatasetScan",
    "build_embedded_dataset",
    "holdout_mask",
    "keep_together_labels",
    "read_gray",
    "scan_dataset",
    "split_groups",
    "validate_images",
]

logger = logging.getLogger(__name__)

DATASET_KINDS = ("embedded", "holidays", "ukbench", "folders")

#: File-name suffixes (compared in lower case) that every loader reads as images.
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"})

SKIPPED_COLUMNS = ["image_id", "path", "reason"]

_LAYOUTS = {
    "embedded": "the folder written by `ndir build-embedded`: images named in Holidays "
    "naming (100000.jpg, 100001.jpg, ...) and views.csv",
    "holidays": "image files named by a number, as in INRIA Holidays' jpg folder: "
    "100000.jpg, 100001.jpg, ...; group = number // 100, query = the number ending in 00",
    "ukbench": "image files named ukbench00000.jpg, ukbench00001.jpg, ...: "
    "groups of 4 consecutive numbers, the first is the query",
    "folders": "one sub-folder per group, <root>/<group>/<image>.jpg; "
    "the first image of a group in sorted order is its query",
}

_NUMBERED_NAME = {
    "embedded": re.compile(r"(\d+)", re.ASCII),
    "holidays": re.compile(r"(\d+)", re.ASCII),
    "ukbench": re.compile(r"ukbench(\d+)", re.ASCII | re.IGNORECASE),
}
_GROUP_SPAN = {"embedded": 100, "holidays": 100, "ukbench": 4}

_SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})


class DatasetScan(NamedTuple):
    """What :func:`scan_dataset` found in a data-set folder.

    A named tuple, so ``images, ignored = scan_dataset(kind, root)`` unpacks it.

    Attributes
    ----------
    images : pandas.DataFrame
        The image table (columns ``image_id``, ``path``, ``group``, ``is_query``,
        plus ``group_name`` for the ``folders`` kind), query first in each group.
    ignored : pandas.DataFrame
        Files and folders under the root that were not read as images, with the
        columns ``image_id`` (file stem, ``""`` for a folder), ``path`` and ``reason``:
        names that do not follow the kind's naming (``README.txt``, ``Thumbs.db``),
        duplicate image ids, and every image of a group without a query.
    """

    images: pd.DataFrame
    ignored: pd.DataFrame


# --------------------------------------------------------------------------- reading


def read_gray(path):
    """Decode an image file into grey levels.

    Pillow decodes the file because it reports a truncated JPEG or PNG as an error
    in every version, where OpenCV 4 fills the missing rows with grey and only
    prints a warning. The EXIF orientation tag is not applied: images are used as
    stored, as in the INRIA Holidays evaluation.

    Colour becomes luminance with the BT.601 weights of ``cv2.COLOR_RGB2GRAY``
    (0.299 R + 0.587 G + 0.114 B); for a colour JPEG this is the decoder's own luma
    plane, as with ``cv2.IMREAD_GRAYSCALE``. An alpha channel is dropped (not
    composited). 16-bit samples are scaled to 8 bits, ``round(v * 255 / 65535)``,
    not clipped.

    Parameters
    ----------
    path : str or os.PathLike
        Image file (JPEG, PNG, TIFF, BMP, WebP, ... anything Pillow decodes).

    Returns
    -------
    (H, W) uint8 ndarray
        Grey levels, writable, C-contiguous.

    Raises
    ------
    ndir.errors.ImageReadError
        If the file is missing, empty, not an image, truncated or corrupt, or holds
        pixels that are not 8- or 16-bit integers; the message names the path and
        what to do.
    """
    path = Path(path)
    if path.is_dir():
        raise ImageReadError(
            path, "is a folder, not an image file; pass image files, or take the folder out of the image folder"
        )
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ImageReadError(
            path,
            "file not found; check the path (for a data set that changed, run the workflow again: "
            "it scans the folder anew)",
        ) from None
    except OSError as error:
        raise ImageReadError(path, f"cannot open the file ({error.strerror}); check its permissions") from None
    if size == 0:
        raise ImageReadError(path, "file is empty (0 bytes); copy it again, or remove it from the image folder")
    try:
        with Image.open(path) as image:
            # A colour JPEG is decoded straight to its luma plane: about 3x faster.
            image.draft("L", image.size)
            image.load()
            return _to_gray(image, path)
    except ImageReadError:
        raise
    except UnidentifiedImageError:
        raise ImageReadError(
            path,
            "not an image file that Pillow can decode (JPEG, PNG, TIFF, BMP, WebP, ...); "
            "convert it, or remove it from the image folder",
        ) from None
    except Image.DecompressionBombError as error:
        raise ImageReadError(
            path,
            f"too large to decode safely ({error}); shrink it (descriptors are computed on images "
            "at most 512 px wide by default), or remove it from the image folder",
        ) from None
    except (OSError, SyntaxError, ValueError) as error:
        raise ImageReadError(
            path, f"cannot decode the image ({error}): the file is truncated or corrupt; download or export it again"
        ) from None


def _to_gray(image, path):
    """(H, W) uint8 grey levels of a loaded Pillow image."""
    mode = image.mode
    if mode == "L":
        return np.array(image)
    if mode in _SIXTEEN_BIT_MODES or mode == "I":
        values = np.asarray(image)
        if values.size and (values.min() < 0 or values.max() > 65535):
            raise ImageReadError(path, "32-bit integer pixels are not supported; convert the image to 8 or 16 bits")
        # Exact integer rounding of v * 255 / 65535: 0 -> 0, 257 k -> k, 65535 -> 255.
        return ((values.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
    if mode == "F":
        raise ImageReadError(path, "floating-point pixels are not supported; convert the image to 8 or 16 bits")
    if mode in ("1", "LA", "La"):
        return np.array(image.convert("L"))
    # RGB, RGBA, RGBX, P, PA, CMYK, YCbCr, LAB, HSV: Pillow's RGB drops any alpha.
    return cv2.cvtColor(np.asarray(image.convert("RGB")), cv2.COLOR_RGB2GRAY)


# --------------------------------------------------------------------------- scanning


def scan_dataset(kind, root):
    """Find the images of a data set and their near-duplicate groups.

    Parameters
    ----------
    kind : {"embedded", "holidays", "ukbench", "folders"}
        Folder layout (key ``dataset.kind`` of the configuration):

        - ``"holidays"``: a flat folder of files named by a number, ``100000.jpg``;
          group = number // 100, query = the image whose number % 100 == 0. A group
          without a query is left out (reported in ``ignored``): the query defines
          the group.
        - ``"embedded"``: the same naming, in a folder written by
          :func:`build_embedded_dataset` (its ``views.csv`` is expected, not ignored).
        - ``"ukbench"``: ``ukbench00000.jpg``; group = number // 4; every image is a
          query (UKBench's protocol, scored by :func:`ndir.evaluation.ns_score` too).
          A number not of five digits (``ukbench0001.jpg``) is ignored.
        - ``"folders"``: ``root/<group>/<image>``; groups are the sub-folders holding
          images, numbered 0, 1, ... in sorted name order (the name is kept in an
          extra column ``group_name``); the query is a group's first file name in
          sorted order.

        Image files have one of :data:`IMAGE_SUFFIXES`, in any case.
    root : str or os.PathLike
        The data-set folder.

    Returns
    -------
    DatasetScan
        Named tuple ``(images, ignored)``: the image table and the files that were
        not read, each with a reason. Ignored files are also logged at WARNING.

    Raises
    ------
    ndir.errors.ConfigError
        If ``kind`` is not one of :data:`DATASET_KINDS`.
    ndir.errors.DatasetError
        If ``root`` is missing, not a folder, empty, or holds no image named as
        ``kind`` expects; the message names the folder and the expected layout.
    """
    if kind not in DATASET_KINDS:
        raise ConfigError(f"dataset.kind: unknown data set kind {kind!r}; use one of {', '.join(DATASET_KINDS)}")
    root = Path(root).expanduser().resolve()
    layout = _LAYOUTS[kind]
    if not root.exists():
        raise DatasetError(f"{root}: folder not found; set dataset.path to the folder holding {layout}")
    if not root.is_dir():
        raise DatasetError(f"{root}: not a folder; set dataset.path to the folder holding {layout}")
    # Hidden files (.DS_Store, Snakemake's .snakemake_timestamp) are not data.
    entries = sorted(entry for entry in root.iterdir() if not entry.name.startswith("."))
    if not entries:
        raise DatasetError(f"{root}: folder is empty; expected {layout}")

    if kind == "folders":
        rows, ignored = _scan_group_folders(entries)
    else:
        rows, ignored = _scan_numbered_files(kind, entries)
    rows, ignored = _drop_duplicate_ids(rows, ignored)
    rows, ignored = _drop_groups_without_query(rows, ignored)
    if not rows:
        raise DatasetError(f"{root}: no image named as the {kind!r} loader expects; expected {layout}{_hint(entries)}")

    images = _image_table(rows)
    ignored_table = pd.DataFrame(ignored, columns=SKIPPED_COLUMNS)
    if len(ignored_table):
        shown = ", ".join(Path(p).name for p in ignored_table["path"][:5])
        more = f" and {len(ignored_table) - 5} more" if len(ignored_table) > 5 else ""
        logger.warning(
            "%s: ignored %d files that are not %s images: %s%s",
            root,
            len(ignored_table),
            kind,
            shown,
            more,
        )
    logger.info("%s: found %d images in %d groups", root, len(images), images["group"].nunique())
    return DatasetScan(images, ignored_table)


def _scan_numbered_files(kind, entries):
    """Rows and ignored entries of a flat folder of numbered image files."""
    pattern, span = _NUMBERED_NAME[kind], _GROUP_SPAN[kind]
    rows, ignored = [], []
    for entry in entries:
        if kind == "embedded" and entry.name == PROVENANCE_FILE:
            continue
        if entry.is_dir():
            ignored.append(_ignored(entry, f"sub-folder not read: the {kind} loader reads a flat folder"))
            continue
        match = pattern.fullmatch(entry.stem)
        if match is None or entry.suffix.lower() not in IMAGE_SUFFIXES:
            ignored.append(_ignored(entry, f"file name does not follow the {kind} naming"))
            continue
        # ukbench0001.jpg beside ukbench00001.jpg would be two images numbered 1.
        if kind == "ukbench" and len(match[1]) != 5:
            ignored.append(
                _ignored(
                    entry,
                    f"{entry.name}: number of {len(match[1])} digits; "
                    "the ukbench naming has five (ukbench00000.jpg, ukbench00001.jpg, ...)",
                )
            )
            continue
        number = int(match[1])
        # UKBench's protocol queries with every image; Holidays' with the first of a group.
        rows.append(_row(entry.stem, entry, number // span, kind == "ukbench" or number % span == 0))
    return rows, ignored


def _scan_group_folders(entries):
    """Rows and ignored entries of a folder of group sub-folders."""
    rows, ignored = [], []
    group = 0
    for folder in entries:
        if not folder.is_dir():
            ignored.append(_ignored(folder, "file outside the group sub-folders"))
            continue
        images = []
        for entry in sorted(folder.iterdir()):
            if entry.is_dir():
                ignored.append(_ignored(entry, "nested folder not read: images must sit directly in a group folder"))
            elif entry.suffix.lower() not in IMAGE_SUFFIXES:
                ignored.append(
                    _ignored(entry, "not an image file name (suffix not in " + ", ".join(sorted(IMAGE_SUFFIXES)) + ")")
                )
            else:
                images.append(entry)
        if not images:
            ignored.append(_ignored(folder, "group folder holds no image"))
            continue
        for i, entry in enumerate(images):
            rows.append(_row(f"{folder.name}/{entry.stem}", entry, group, i == 0, group_name=folder.name))
        group += 1
    return rows, ignored


def _drop_duplicate_ids(rows, ignored):
    seen = {}
    kept = []
    for row in rows:
        if row["image_id"] in seen:
            ignored.append(
                {
                    **_pick(row),
                    "reason": f"duplicate image id {row['image_id']!r} (also {Path(seen[row['image_id']]).name})",
                }
            )
        else:
            seen[row["image_id"]] = row["path"]
            kept.append(row)
    return kept, ignored


def _drop_groups_without_query(rows, ignored):
    with_query = {row["group"] for row in rows if row["is_query"]}
    kept = []
    for row in rows:
        if row["group"] in with_query:
            kept.append(row)
        else:
            ignored.append(
                {**_pick(row), "reason": f"group {row['group']} has no query image; the query defines the group"}
            )
    return kept, ignored


def _image_table(rows):
    table = pd.DataFrame(rows)
    table["group"] = table["group"].astype(np.int64)
    table["is_query"] = table["is_query"].astype(bool)
    return table.sort_values(["group", "is_query", "image_id"], ascending=[True, False, True], ignore_index=True)


def _row(image_id, path, group, is_query, **extra):
    return {"image_id": image_id, "path": str(path), "group": group, "is_query": is_query, **extra}


def _ignored(path, reason):
    return {"image_id": path.stem if path.is_file() else "", "path": str(path), "reason": reason}


def _pick(row):
    return {"image_id": row["image_id"], "path": row["path"]}


def _hint(entries):
    folders = [entry.name for entry in entries if entry.is_dir()]
    files = [entry.name for entry in entries if not entry.is_dir()]
    parts = []
    if files:
        parts.append(f"found {len(files)} other files, e.g. {', '.join(files[:3])}")
    if folders:
        parts.append(f"sub-folders {', '.join(folders[:3])}: point dataset.path at the one holding the images")
    return " (" + "; ".join(parts) + ")" if parts else ""


# --------------------------------------------------------------------------- checking


def validate_images(images, min_size, n_jobs=1):
    """Decode every image once; leave out the unusable ones, with reasons.

    An image is skipped when it cannot be decoded (:func:`read_gray` fails) or when
    its smaller side is below ``min_size`` pixels. Then, in this order:

    1. a group whose queries were all skipped is skipped whole (the query defines
       the group: in Holidays the other images are its matches; in UKBench, where
       every image is a query, a group loses only its unreadable images);
    2. a group left with a single image is skipped (its query has no positive).

    Each skipped image is logged at WARNING.

    Parameters
    ----------
    images : pandas.DataFrame
        Image table from :func:`scan_dataset`.
    min_size : int
        Smallest accepted image side, in pixels.
    n_jobs : int, default 1
        Threads decoding images at once (the decoders release the GIL).

    Returns
    -------
    kept : pandas.DataFrame
        The rows of ``images`` that are usable, same columns and order, index reset.
    skipped : pandas.DataFrame
        One row per skipped image, columns ``image_id``, ``path``, ``reason``.
    """
    paths = images["path"].tolist()
    with ThreadPoolExecutor(max_workers=max(1, int(n_jobs))) as pool:
        reasons = list(pool.map(lambda path: _check_image(path, min_size), paths))
    reasons = pd.Series(reasons, index=images.index, dtype=object)

    usable_queries = (images["is_query"] & reasons.isna()).groupby(images["group"]).transform("any")
    bad_query_groups = images.loc[images["is_query"] & reasons.notna() & ~usable_queries, ["group", "image_id"]]
    for group, query_id in bad_query_groups.itertuples(index=False):
        in_group = (images["group"] == group) & reasons.isna()
        reasons[in_group] = f"query {query_id} of group {group} was skipped; the query defines the group"

    remaining = images.loc[reasons.isna(), "group"]
    sizes = remaining.map(remaining.value_counts())
    reasons[sizes.index[sizes.to_numpy() == 1]] = "group has a single image"

    skipped_mask = reasons.notna()
    skipped = images.loc[skipped_mask, ["image_id", "path"]].assign(reason=reasons[skipped_mask])
    for image_id, path, reason in skipped.itertuples(index=False):
        logger.warning("skipped image %s (%s): %s", image_id, path, reason)
    return images.loc[~skipped_mask].reset_index(drop=True), skipped.reset_index(drop=True)


def _check_image(path, min_size):
    """None for a usable image, else the reason it is skipped."""
    try:
        gray = read_gray(path)
    except ImageReadError as error:
        return error.reason
    height, width = gray.shape
    if min(height, width) < min_size:
        return f"image is {width}x{height} px, smaller than the {min_size} px needed on a side"
    return None


# --------------------------------------------------------------------------- splitting


def split_groups(images, train_fraction=0.5, seed=0, together=None):
    """Split the groups at random between a training and a test split.

    ``round(train_fraction * n_groups)`` groups (Python rounding, half to even) go
    to ``"train"``, the others to ``"test"``; a group is never in both. With
    ``together``, groups whose images share a label (e.g. windows cut from one
    photograph) form one block that lands whole on one side: blocks are drawn in a
    seeded random order and each goes to training when the blocks after it can still
    complete the target count, so the training split has exactly the target number
    of groups whenever some blocks add up to it (else the nearest count below, logged).
    Without ``together`` every group is its own block and the split is a seeded
    permutation of the groups.

    Parameters
    ----------
    images : pandas.DataFrame
        Image table with a ``group`` column.
    train_fraction : float, default 0.5
        Share of the groups in the training split, in (0, 1).
    seed : int, default 0
        Seed of ``numpy.random.default_rng`` drawing the split.
    together : pandas.Series or None
        Per image (aligned with ``images``), the label of what must not straddle
        the split (source photo, scene, photographer); missing values link nothing.

    Returns
    -------
    pandas.DataFrame
        A copy of ``images`` with a ``split`` column of ``"train"`` / ``"test"``.

    Raises
    ------
    ndir.errors.ConfigError
        If ``train_fraction`` leaves either split without a group.
    """
    groups, group_index = np.unique(images["group"].to_numpy(), return_inverse=True)
    n_train = round(train_fraction * len(groups))
    if not 0 < train_fraction < 1 or not 0 < n_train < len(groups):
        raise ConfigError(
            f"dataset.train_fraction: {train_fraction} puts {n_train} of the {len(groups)} groups in the "
            "training split; each split needs at least one group: use a value in (0, 1) or a larger data set"
        )
    blocks = _group_blocks(group_index, len(groups), together)
    block_sizes = np.bincount(blocks)
    order = np.random.default_rng(seed).permutation(len(block_sizes))
    train_blocks = _blocks_summing_to(block_sizes[order], n_train)
    train_blocks = order[train_blocks]
    n_chosen = int(block_sizes[train_blocks].sum())
    if n_chosen == 0 or n_chosen == len(groups):
        raise ConfigError(
            f"dataset.train_fraction: {train_fraction} cannot be met without splitting images that must "
            f"stay together ({len(block_sizes)} blocks of {block_sizes.max()} groups at most); use a fraction "
            "nearer 0.5 or a larger data set"
        )
    if n_chosen != n_train:
        logger.warning(
            "split: %d training groups instead of %d, so that no block of groups kept together straddles the split",
            n_chosen,
            n_train,
        )
    train = groups[np.isin(blocks, train_blocks)]
    split = images.copy()
    split["split"] = np.where(images["group"].isin(train), "train", "test")
    return split


def _log_no_holdout(fraction, n_eligible):
    logger.warning(
        "holdout_fraction %g of %d training groups leaves fewer than 2 groups on a side: no hold-out, "
        "no model selection (the last iterate is kept); a larger data set brings it back",
        fraction,
        n_eligible,
    )


def holdout_mask(groups, fraction, random_state, together=None):
    """Whole groups of a training set held out for model selection, per image.

    ``round(fraction * n)`` of the ``n`` groups with two images or more (a group of
    one image has no positive to score) are held out; with ``together``, groups whose
    images share a label (windows of one photograph) form one block held out or kept
    whole, as in :func:`split_groups`, so no hold-out group shares a photograph with
    a group trained on. Blocks holding some group of two images or more are drawn in
    a seeded random order and each is held out when the blocks after it can still
    complete the target count of such groups (else the nearest count below). Without
    ``together`` every group is its own block and the hold-out is the first groups of
    a seeded permutation, the draw of ``rng.choice(eligible, n_held, replace=False)``
    for a :class:`numpy.random.RandomState`.

    Parameters
    ----------
    groups : (n_images,) labels; images of one group are near duplicates.
    fraction : float in [0, 1), share of the groups of two images or more held out.
    random_state : numpy.random.RandomState or Generator (its ``permutation`` is drawn once).
    together : (n_images,) labels or None; missing values (None, NaN) link nothing.

    Returns
    -------
    (n_images,) bool, True for the held-out images; all False when fewer than two
    groups of two images or more would be held out or stay for training.
    """
    groups = np.asarray(groups)
    labels, group_index, sizes = np.unique(groups, return_inverse=True, return_counts=True)
    if together is not None and len(together) != groups.size:
        raise ValueError(f"together has {len(together)} labels for {groups.size} images")
    blocks = _group_blocks(group_index, labels.size, together)
    eligible_per_block = np.bincount(blocks, weights=sizes >= 2).astype(int)
    candidates = np.flatnonzero(eligible_per_block)
    n_eligible = int(eligible_per_block.sum())
    n_held = int(round(fraction * n_eligible))
    none = np.zeros(groups.size, dtype=bool)
    if fraction and (n_held < 2 or n_eligible - n_held < 2):
        _log_no_holdout(fraction, n_eligible)
    if n_held < 2 or n_eligible - n_held < 2:
        return none
    order = candidates[random_state.permutation(candidates.size)]
    held_blocks = order[_blocks_summing_to(eligible_per_block[order], n_held)]
    n_chosen = int(eligible_per_block[held_blocks].sum())
    if n_chosen < 2 or n_eligible - n_chosen < 2:
        _log_no_holdout(fraction, n_eligible)
        return none
    return np.isin(blocks[group_index], held_blocks)


def _blocks_summing_to(sizes, target):
    """Indices of blocks, taken in the given order whenever the blocks after them
    can still complete the sum, whose sizes add up to ``target`` (or to the largest
    reachable total below it). With blocks of size 1, the first ``target``."""
    sizes = [int(size) for size in sizes]
    # reachable[i]: bit t set when some blocks among sizes[i:] sum to t.
    reachable = [1] * (len(sizes) + 1)
    for i in range(len(sizes) - 1, -1, -1):
        reachable[i] = reachable[i + 1] | (reachable[i + 1] << sizes[i])
    need = max(t for t in range(target + 1) if reachable[0] >> t & 1)
    chosen = []
    for i, size in enumerate(sizes):
        if size <= need and reachable[i + 1] >> (need - size) & 1:
            chosen.append(i)
            need -= size
    return np.array(chosen, dtype=int)


def _group_blocks(group_index, n_groups, together):
    """Block label (n_groups,) of each group: the connected components of the graph
    joining groups whose images share a ``together`` label (each group alone without)."""
    if together is None:
        return np.arange(n_groups)
    labels = pd.Series(np.asarray(together, dtype=object))
    known = labels.notna().to_numpy()
    units, unit_index = np.unique(labels[known].astype(str).to_numpy(), return_inverse=True)
    # Bipartite graph: groups 0..n_groups-1, then the labels.
    links = scipy.sparse.coo_array(
        (np.ones(known.sum()), (group_index[known], n_groups + unit_index)),
        shape=(n_groups + len(units),) * 2,
    )
    _, components = scipy.sparse.csgraph.connected_components(links, directed=False)
    # Renumber the groups' components 0, 1, ... in order of first group.
    return np.unique(components[:n_groups], return_inverse=True)[1]


def keep_together_labels(images, root, table, column):
    """Per image of ``images``, the ``column`` of the CSV ``table``, matched by file.

    ``table`` has a ``file`` column: the image's path relative to the data-set
    folder ``root`` (``100000.jpg``; ``<group>/<name>`` for the ``folders`` kind), as the
    embedded set's ``views.csv`` has. Images the table does not list get a missing
    label (they link nothing).

    Raises
    ------
    ndir.errors.DatasetError
        If the table cannot be read or lacks ``file`` or ``column``.
    """
    path = Path(table)
    try:
        rows = pd.read_csv(path, dtype=str)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise DatasetError(
            f"{path}: cannot read the table of images kept together (dataset.keep_together.table): {error}"
        ) from error
    missing = [name for name in ("file", column) if name not in rows.columns]
    if missing:
        raise DatasetError(
            f"{path}: no column {', '.join(map(repr, missing))} (dataset.keep_together needs a 'file' column and "
            f"the column it names, here {column!r}); columns found: {', '.join(rows.columns)}"
        )
    root = Path(root).expanduser().resolve()
    files = [Path(p).relative_to(root).as_posix() for p in images["path"]]
    labels = dict(zip(rows["file"], rows[column]))
    return pd.Series([labels.get(name) for name in files], index=images.index, dtype=object)
