import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_snakemake(workdir, *args, check=True):
    """Run this repository's workflow in ``workdir`` with the test interpreter's tools.

    The interpreter's ``bin`` goes first on PATH because Snakemake's script jobs
    start ``python`` from PATH.
    """
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, check=check)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """The workflow run once on the tiny config; yields its working directory."""
    workdir = tmp_path_factory.mktemp("tiny")
    result = run_snakemake(workdir, "--cores", "2", "--configfile", str(REPO / "tests/configs/tiny.yaml"), check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return workdir
