"""Writing results so that a crash never leaves a half-written one: into a temporary
file or folder beside the target, renamed into place on success (a rename within one
folder is atomic), removed on failure."""

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_output(path):
    """Yield a temporary path beside ``path``; move it into place on success.

    A job that fails leaves no half-written result behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(obj, path):
    """Write ``obj`` as indented JSON with sorted keys, atomically."""
    with atomic_output(path) as tmp, open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def write_csv(df, path):
    """Write a data frame as CSV without its index, atomically."""
    with atomic_output(path) as tmp:
        df.to_csv(tmp, index=False)


@contextmanager
def atomic_folder(folder):
    """Yield a temporary folder beside ``folder``; swap it in for ``folder`` on success.

    ``folder`` is not touched until the new one is complete, so a failure while
    writing (a full disk, an interrupted job) leaves the old contents working.
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        yield tmp
        _swap_in(tmp, folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _swap_in(new, folder):
    """Move the folder ``new`` to ``folder``, replacing it: the old one is renamed
    aside first and put back if the second rename fails, then deleted."""
    if not folder.exists():
        os.replace(new, folder)
        return
    # A folder may be renamed onto an empty one (POSIX rename), so the name is reserved.
    old = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.old."))
    os.replace(folder, old)
    try:
        os.replace(new, folder)
    except BaseException:
        os.replace(old, folder)
        raise
    shutil.rmtree(old, ignore_errors=True)


def check_writable(folder):
    """Raise OSError (``Read-only file system``, ``Permission denied``, ...) unless a
    file can be created in ``folder``, which is created if missing; call it before
    long work whose result goes there."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(dir=folder, prefix=".ndir-write-test.")
    os.close(fd)
    os.remove(probe)
