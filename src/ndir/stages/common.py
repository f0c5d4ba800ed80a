"""What several stages share: running a rule, and reading the image table, its shards
and its splits.

The stage modules' counterpart of ``workflow/rules/common.smk``. Atomic writes are
:mod:`ndir.atomic`'s, tables' captions :mod:`ndir.report`'s, result files read back
:mod:`ndir.model_files`'.
"""

import errno
import logging
import os
import shutil
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from ndir.errors import NdirInputError, ResultFileError
from ndir.model_files import read_result

logger = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


# --------------------------------------------------------------------------- running


def run_rule(smk, stage):
    """Run ``stage`` with a Snakemake job's named input, output and params.

    Logging goes to the job's log file (stderr when the rule has none); BLAS and
    OpenMP get the job's threads. A failing stage leaves its traceback in the log
    file whatever the error, and a line on stderr naming that file. Bad input
    (:class:`~ndir.errors.NdirInputError`) then ends the job with that one line
    (``SystemExit(1)``); any other exception propagates as it is.
    """
    named = [*smk.input.keys(), *smk.output.keys(), *smk.params.keys()]
    shared = sorted({name for name in named if named.count(name) > 1})
    if shared:
        raise ValueError(f"the rule's input, output and params share the names {shared}; rename them")
    kwargs = {**dict(smk.input.items()), **dict(smk.output.items()), **dict(smk.params.items())}
    log = smk.log[0] if smk.log else None
    where = f" (traceback in {log})" if log else ""
    _end_with_parent()
    with _logging_to(log), threadpool_limits(limits=smk.threads):
        try:
            stage(**kwargs)
        except (NdirInputError, OSError) as error:
            if isinstance(error, OSError) and error.errno not in DISK_FULL:
                logger.exception("%s failed", stage.__name__)
                print(f"ndir: {stage.__name__} failed: {type(error).__name__}: {error}{where}", file=sys.stderr)
                raise
            message = error if isinstance(error, NdirInputError) else disk_full_message(error, list(smk.output))
            logger.exception("%s", message)
            print(f"ndir: error: {message}{where}", file=sys.stderr)
            raise SystemExit(1) from error
        except Exception as error:
            logger.exception("%s failed", stage.__name__)
            print(f"ndir: {stage.__name__} failed: {type(error).__name__}: {error}{where}", file=sys.stderr)
            raise


#: errno of a write that found no room: a full disk, or a user's quota.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
#: What a run writes under results/, measured (docs/data.md, "Disk space").
RESULTS_ROOM = "a default run's results/ take 1.1 GB, a Holidays-scale run's several GB"


def disk_full_message(error, outputs):
    """The one line for a write that found the disk full: the file (the job's first
    output when the system names none), the room left on its disk and what to do."""
    path = Path(error.filename or (outputs[0] if outputs else "."))
    folder = next((parent for parent in (path, *path.parents) if parent.is_dir()), Path("."))
    free_mb = shutil.disk_usage(folder).free / 2**20
    return (
        f"{path}: no space left on the disk that holds {folder.resolve()} ({free_mb:,.0f} MB free; {RESULTS_ROOM}); "
        "free some space and run the same command again, or move results/ to a larger disk (a symlink "
        "results -> /larger/disk/results works)"
    )


def _end_with_parent(poll_seconds=2.0):
    """End this job when Snakemake, its parent, is gone (``kill -9`` of Snakemake leaves
    its jobs running otherwise): a daemon thread polls the parent's pid and sends this
    process SIGTERM once it has changed (the job was reparented)."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        logger.error("Snakemake (pid %d) is gone: ending this job", parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="end-with-snakemake", daemon=True).start()


@contextmanager
def _logging_to(path):
    """Send INFO and above of every logger to the file ``path`` (None: stderr) meanwhile."""
    handler = logging.StreamHandler() if path is None else logging.FileHandler(path)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()


# --------------------------------------------------------------------------- the image table


#: Columns of the image table that its readers rely on; ``together`` (absent from
#: tables of older ndir versions) and ``group_name`` (``folders`` kind only) are optional.
IMAGE_TABLE_COLUMNS = ("image_id", "path", "group", "is_query", "split")


def read_image_table(path):
    """Read the image table written by :func:`ndir.stages.data.index_dataset`;
    ResultFileError as :func:`read_result` when it cannot be parsed or lacks one of
    :data:`IMAGE_TABLE_COLUMNS` (its header line lost, a column cut)."""

    def load(path):
        table = pd.read_csv(path, dtype={"image_id": str, "group_name": str})
        missing = [column for column in IMAGE_TABLE_COLUMNS if column not in table.columns]
        if missing:
            raise ValueError(f"no column {', '.join(map(repr, missing))}")
        return table

    return read_result(path, load)


def shard_rows(n_images, shard, n_shards):
    """Row slice of shard ``shard`` of ``n_shards`` contiguous, near-equal shards."""
    return slice(shard * n_images // n_shards, (shard + 1) * n_images // n_shards)


def read_shard(images, shard, n_shards):
    """The rows of the image table ``images`` in shard ``shard`` of ``n_shards``."""
    table = read_image_table(images)
    return table.iloc[shard_rows(len(table), shard, n_shards)]


def check_shard_order(images, image_ids, what, rule):
    """Raise :class:`~ndir.errors.ResultFileError` unless the shards' concatenated
    ``image_ids`` are the image table's, in its order; the message names the
    shards (``what``) and the ``rule`` that writes them."""
    table = read_image_table(images)
    if not np.array_equal(np.concatenate(image_ids), table["image_id"].to_numpy(dtype=str)):
        raise ResultFileError(f"{images}: the {what} shards do not match the image table; rerun {rule}")


def split_together(images, split):
    """The ``together`` labels (source photographs) of the images of one ``split``.

    Parameters
    ----------
    images : path of the image table written by :func:`ndir.stages.data.index_dataset`.
    split : ``"train"`` or ``"test"``.

    Returns
    -------
    (n_split_images,) object array in the table's order, missing values (NaN) where
    nothing is kept together; pass it to :func:`ndir.data.holdout_mask`.
    """
    table = read_image_table(images)
    if "together" not in table.columns:
        raise ResultFileError(f"{images}: no 'together' column (written by an older ndir); rerun index_dataset")
    mask = (table["split"] == split).to_numpy()
    return table.loc[mask, "together"].to_numpy(dtype=object)


# --------------------------------------------------------------------------- splits


def split_rows(images, X, source):
    """Rows of ``X`` (one per image of the table ``images``), read from the file
    ``source``, by split.

    Returns ``{split: (X_split, groups, is_query)}`` for ``train`` and ``test``;
    ``X`` may be a NumPy array (returned as contiguous float32) or a sparse matrix.
    """
    table = read_image_table(images)
    if X.shape[0] != len(table):
        raise ResultFileError(
            f"{source}: {X.shape[0]} rows, but {images} lists {len(table)} images; rerun the encoding rules"
        )
    out = {}
    for name in ("train", "test"):
        mask = (table["split"] == name).to_numpy()
        rows = X[mask] if sp.issparse(X) else np.ascontiguousarray(X[mask], dtype=np.float32)
        out[name] = (
            rows,
            table.loc[mask, "group"].to_numpy(),
            table.loc[mask, "is_query"].to_numpy(dtype=bool),
        )
    return out


def split_signatures(images, signatures):
    """Load signatures (an (n_images, D) ``.npy``) and the image table;
    return ``{split: (X, groups, is_query)}`` as :func:`split_rows`."""
    return split_rows(images, read_result(signatures, mmap_mode="r"), signatures)
