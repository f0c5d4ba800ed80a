"""Writing results so that a crash never leaves a half-written one: into a temporary
file or folder beside the target, renamed into place on success (a rename within one
folder is atomic), removed on failure."""

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


@contextmanager
def atomic_folder(folder):
    """Yield a temporary folder beside ``folder``; replace ``folder`` by it on success."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        yield tmp
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
