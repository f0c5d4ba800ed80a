"""Writing results so that a crash never leaves a half-written one: into a temporary
file or folder beside the target, renamed into place on success (a rename within one
folder is atomic), removed on failure.

The temporary file or folder is created private (``tempfile`` gives 0600 and 0700);
before it is renamed into place it gets the mode a plain ``open()`` or ``mkdir`` would
have given it under the process's umask (0644 and 0755 under the usual umask 022), so
that results are shared as any other file of the user's.
"""

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path


def current_umask():
    """The process's umask, read without changing it: from ``/proc/self/status``
    (Linux 4.7 and later), else by setting it and putting it back at once (a file
    another thread creates in between would get mode 0666)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_output(path):
    """Yield a temporary path beside ``path``; move it into place on success, with
    the mode ``open(path, "w")`` would give it (:func:`current_umask`).

    A job that fails leaves no half-written result behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~current_umask())
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
    """Yield a temporary folder beside ``folder``; swap it in for ``folder`` on success,
    with the mode ``mkdir`` would give it (:func:`current_umask`; what is written inside
    gets its own modes as usual).

    ``folder`` is not touched until the new one is complete, so a failure while
    writing (a full disk, an interrupted job) leaves the old contents working.
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~current_umask())
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
