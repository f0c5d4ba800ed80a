"""Stages of ``workflow/rules/data.smk``: build the embedded set, scan, check and split a data set."""

import json
import logging
from pathlib import Path

import pandas as pd

from ndir import data
from ndir.atomic import atomic_folder, write_csv, write_json
from ndir.descriptors import min_image_size
from ndir.errors import DatasetError
from ndir.model_files import read_result
from ndir.sizes import SplitCounts, check_sizes

logger = logging.getLogger(__name__)


def build_embedded_dataset(folder, n_groups, view_size, allow_overlap, sibling_overlap, seed, recipe=None):
    """Write the embedded near-duplicate set into ``folder`` (Holidays naming);
    ``recipe``: the views' :class:`ndir.embedded.ViewRecipe` (None: the default)."""
    with atomic_folder(folder) as tmp:
        table = data.build_embedded_dataset(
            tmp,
            n_groups=n_groups,
            seed=seed,
            view_size=view_size,
            allow_overlap=allow_overlap,
            recipe=recipe,
            sibling_overlap=sibling_overlap,
        )
    logger.info("built %d images in %d groups into %s", len(table), table["group"].nunique(), folder)


def index_dataset(
    images, skipped, report, kind, root, train_fraction, keep_together, seed, descriptors, limits, download_record
):
    """Scan, check and split a data set; write the image table and a data report.

    Parameters
    ----------
    images, skipped, report : str
        Output paths: the image table (CSV, one row per kept image, with its
        ``split`` and its ``together`` label, empty without ``keep_together``), the
        skipped images with reasons (CSV) and a JSON summary.
    kind, root : str
        Data set kind (``embedded``, ``holidays``, ``ukbench``, ``folders``) and folder.
    train_fraction : float
        Share of groups in the training split.
    keep_together : dict or None
        ``{"table": CSV, "column": name}``: images with equal labels stay in one
        split (:func:`ndir.data.keep_together_labels`); None splits by group alone.
    seed : int
        Seed of the group split.
    descriptors : dict
        Descriptor parameters; images too small for one patch are skipped.
    limits : dict
        The settings the data set's size limits (:func:`ndir.sizes.size_limits`),
        checked on the split before any model is fitted (:func:`ndir.sizes.check_sizes`).
    download_record : str or None
        The JSON record of a fetched data set's archives (:func:`fetch_dataset`), copied
        into the report as ``download``, so that ``run_info.json`` keeps their SHA-256.
    """
    table, ignored = data.scan_dataset(kind, root)
    kept, skipped_rows = data.validate_images(table, min_size=descriptors_min_size(descriptors))
    if kept.empty:
        raise DatasetError(f"{root}: no usable image groups left after checking the images; see {skipped}")
    together = (
        None
        if keep_together is None
        else data.keep_together_labels(kept, root, keep_together["table"], keep_together["column"])
    )
    split = data.split_groups(kept, train_fraction=train_fraction, seed=seed, together=together)
    # The learners' hold-outs (ndir.data.holdout_mask) keep these labels together too.
    split["together"] = together
    where = "embedded.n_groups (the embedded set)" if kind == "embedded" else f"dataset.path: {root}"
    check_sizes(limits, SplitCounts.of(split, limits["descriptors_per_image"]), where)
    summary = {
        "kind": kind,
        "root": str(root),
        "n_images_found": int(len(table)),
        "n_files_ignored": int(len(ignored)),
        "n_images_skipped": int(len(skipped_rows)),
        "skipped_reasons": {
            str(k): int(v) for k, v in skipped_rows.get("reason", pd.Series(dtype=str)).value_counts().items()
        },
        "n_images": int(len(split)),
        "n_groups": int(split["group"].nunique()),
        "kept_together": None if keep_together is None else keep_together["column"],
        "download": None if download_record is None else json.loads(Path(download_record).read_text()),
        "splits": {
            name: {
                "n_groups": int(part["group"].nunique()),
                "n_images": int(len(part)),
                "n_queries": int(part["is_query"].sum()),
            }
            for name, part in split.groupby("split")
        },
    }
    write_csv(split, images)
    write_csv(pd.concat([skipped_rows, ignored], ignore_index=True), skipped)
    if len(skipped_rows) or len(ignored):
        logger.info("the files ignored or skipped, with reasons: %s", skipped)
    write_json(summary, report)
    logger.info("data set: %s", summary)


def fetch_dataset(images, record, archives, kind, source):
    """Download the archives of ``source`` (``download.<kind>`` of the config: its
    ``archives``, each a name and URLs tried in order, and their ``sha256`` pins) into
    the folder ``archives``, unpack and check their images into the folder ``images``
    and write ``record`` (:func:`ndir.download.fetch_dataset`)."""
    from ndir.download import fetch_dataset as fetch

    entries = fetch(
        source["archives"],
        archives,
        images,
        record,
        inside=source["folder_in_archive"],
        kind=kind,
        n_images=source["n_images"],
        n_groups=source["n_groups"],
        sha256=source["sha256"],
    )
    for entry in entries:
        logger.info(
            "%s: %d bytes, SHA-256 %s, %s",
            entry["file"],
            entry["bytes"],
            entry["sha256"],
            f"from {entry['url']}" if entry["url"] else "already there",
        )


def input_summary(report, listing):
    """The console's line at the end of a run, when input files were left out: how many
    images were skipped as unusable and how many other files ignored, and the file
    ``listing`` (skipped.csv) that names them; None when none were. ``report`` is
    the data set's ``report.json`` (:func:`index_dataset`), absent before it is written."""
    if not Path(report).is_file():
        return None
    summary = read_result(report, load=lambda path: json.loads(Path(path).read_text()))
    skipped, ignored = summary["n_images_skipped"], summary["n_files_ignored"]
    if not skipped and not ignored:
        return None
    return (
        f"ndir: {summary['n_images']} images of {summary['root']} used; {skipped} skipped as unusable and "
        f"{ignored} other file{'' if ignored == 1 else 's'} ignored, each listed with its reason in {listing}"
    )


def descriptors_min_size(params):
    """Smallest image side (px) that fits one descriptor patch at the finest scale."""
    return min_image_size(params["cell_sizes"])
