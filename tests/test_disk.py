"""A full disk, results/ on another disk through a symlink, and Snakemake killed: each
ends with one clear line or keeps working, as a user meets them."""

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from ndir.stages.common import run_rule

from .conftest import REPO, run_snakemake
from .mounts import tmpfs


class _Named(dict):
    """The named input, output or params of a Snakemake job (``.items()``, ``.keys()``, a list)."""

    def __iter__(self):
        return iter(self.values())


def _job(tmp_path, **output):
    return SimpleNamespace(
        input=_Named(), output=_Named(output), params=_Named(), log=[str(tmp_path / "job.log")], threads=1
    )


def _write_two_megabytes(out):
    with open(out, "wb") as handle:
        handle.write(b"\0" * (2 << 20))


def test_a_full_disk_names_the_file_the_room_left_and_the_fix(tmp_path, capsys):
    with tmpfs(tmp_path / "small", size="1m"):
        out = tmp_path / "small" / "results" / "big.npy"
        out.parent.mkdir()
        with pytest.raises(SystemExit) as exited:
            run_rule(_job(tmp_path, out=str(out)), _write_two_megabytes)
        assert exited.value.code == 1
        line = capsys.readouterr().err
        assert line.startswith(f"ndir: error: {out}: no space left on the disk that holds {out.parent} (0 MB free; ")
        assert "free some space and run the same command again, or move results/ to a larger disk" in line
        assert line.rstrip().endswith(f"(traceback in {tmp_path / 'job.log'})")
        assert "OSError: [Errno 28]" in (tmp_path / "job.log").read_text()


CHILD = """
import sys, time
from types import SimpleNamespace
from ndir.stages.common import run_rule

class Named(dict):
    def __iter__(self):
        return iter(self.values())

job = SimpleNamespace(input=Named(), output=Named(), params=Named(), log=[sys.argv[1]], threads=1)
run_rule(job, lambda: time.sleep(60))
"""


def test_a_job_ends_when_snakemake_is_killed(tmp_path):
    """``kill -9`` of Snakemake: its running job notices it was reparented and ends."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; child = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]]); "
            "print(child.pid, flush=True); child.wait()",
            CHILD,
            str(tmp_path / "job.log"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    child = int(parent.stdout.readline())
    log = tmp_path / "job.log"
    deadline = time.monotonic() + 60
    while not log.exists() and time.monotonic() < deadline:  # run_rule opens it after starting its watch
        time.sleep(0.1)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the job outlived its killed parent by 15 s")
    assert "is gone: ending this job" in log.read_text()


@pytest.mark.workflow
def test_results_on_another_disk_through_a_symlink(tmp_path):
    """results/ a symlink to another file system: the first jobs write through it; when
    that disk is full the run stops with the promised line, not in Snakemake's cleanup."""
    tiny = ["--configfile", str(REPO / "tests/configs/tiny.yaml")]
    with tmpfs(tmp_path / "other", size="40m"):
        (tmp_path / "other" / "results").mkdir()
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "results").symlink_to(tmp_path / "other" / "results")
        done = run_snakemake(tmp_path / "run", "results/data/images.csv", "--cores", "2", *tiny, check=False)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "other" / "results" / "data" / "images.csv").is_file()
    with tmpfs(tmp_path / "full", size="64k"):
        (tmp_path / "full" / "results").mkdir()
        (tmp_path / "run2").mkdir()
        (tmp_path / "run2" / "results").symlink_to(tmp_path / "full" / "results")
        failed = run_snakemake(tmp_path / "run2", "--cores", "2", *tiny, check=False)
        assert failed.returncode != 0
        assert "ndir: error: " in failed.stderr and "no space left on the disk" in failed.stderr, failed.stderr
        assert "NotADirectoryError" not in failed.stderr
