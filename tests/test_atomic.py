"""Tests of ndir.atomic: a result is replaced whole or not at all."""

import errno
import os

import pytest

from ndir.atomic import atomic_folder, check_writable

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
