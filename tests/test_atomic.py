"""Tests of ndir.atomic: a result is replaced whole or not at all."""

import builtins
import errno
import os
import stat
from contextlib import contextmanager

import pytest

from ndir.atomic import atomic_folder, atomic_output, check_writable, current_umask, write_json

from .mounts import tmpfs


def write_folder(folder, text):
    with atomic_folder(folder) as tmp:
        (tmp / "a.txt").write_text(text)


def test_atomic_folder_replaces_the_old_folder_and_leaves_nothing_beside(tmp_path):
    folder = tmp_path / "index"
    write_folder(folder, "old")
    (folder / "stale.txt").write_text("from the old run")
    write_folder(folder, "new")
    assert sorted(p.name for p in folder.iterdir()) == ["a.txt"]
    assert (folder / "a.txt").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["index"]


def test_a_failure_while_writing_leaves_the_old_folder_as_it_was(tmp_path):
    folder = tmp_path / "index"
    write_folder(folder, "old")
    with pytest.raises(OSError):
        with atomic_folder(folder) as tmp:
            (tmp / "a.txt").write_text("half")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert (folder / "a.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["index"]


def test_a_failed_swap_puts_the_old_folder_back(tmp_path, monkeypatch):
    folder = tmp_path / "index"
    write_folder(folder, "old")
    replace = os.replace

    def new_one_refused(source, target):
        if os.fspath(target) == os.fspath(folder) and "old" not in os.path.basename(source):
            raise OSError(errno.EIO, "Input/output error")
        return replace(source, target)

    monkeypatch.setattr(os, "replace", new_one_refused)
    with pytest.raises(OSError, match="Input/output"):
        write_folder(folder, "new")
    assert (folder / "a.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["index"]


def test_check_writable_refuses_a_read_only_folder_and_leaves_no_probe(tmp_path):
    check_writable(tmp_path / "new" / "deep")
    assert list((tmp_path / "new" / "deep").iterdir()) == []
    with tmpfs(tmp_path / "ro") as make_read_only:
        make_read_only()
        with pytest.raises(OSError) as refused:
            check_writable(tmp_path / "ro")
        assert refused.value.errno == errno.EROFS


@contextmanager
def umask(mask):
    """The process's umask set to ``mask`` for the block, put back after it."""
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(
    "mask, file_mode, folder_mode",
    [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700), (0o002, 0o664, 0o775)],
    ids=["umask 022", "umask 077", "umask 002"],
)
def test_atomic_outputs_get_the_modes_open_and_mkdir_give_under_the_umask(tmp_path, mask, file_mode, folder_mode):
    """Not the private 0600 and 0700 of their temporary files: new ones and ones that
    replace an older result alike."""
    with umask(mask):
        # What open() and mkdir give here, the reference.
        (tmp_path / "plain.txt").write_text("x")
        (tmp_path / "plain").mkdir()
        for _ in range(2):  # made, then replaced
            with atomic_output(tmp_path / "result.csv") as tmp, open(tmp, "w") as handle:
                handle.write("a,b\n")
            write_json({"a": 1}, tmp_path / "report.json")
            write_folder(tmp_path / "index", "new")
    assert (mode(tmp_path / "plain.txt"), mode(tmp_path / "plain")) == (file_mode, folder_mode)
    assert {name: mode(tmp_path / name) for name in ("result.csv", "report.json", "index", "index/a.txt")} == {
        "result.csv": file_mode,
        "report.json": file_mode,
        "index": folder_mode,
        "index/a.txt": file_mode,
    }


@pytest.mark.parametrize("proc", [True, False])
def test_current_umask_reads_it_without_changing_it(monkeypatch, proc):
    """From /proc/self/status, or without it by setting it and putting it back."""
    if not proc:
        real_open = builtins.open

        def no_proc(path, *args, **kwargs):
            if str(path).startswith("/proc/"):
                raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", no_proc)
    elif not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc/self/status here")
    with umask(0o027):
        assert current_umask() == 0o027
        assert os.umask(0o027) == 0o027  # unchanged
