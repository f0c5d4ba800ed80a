"""The workflow follows Snakemake's own rules (`snakemake --lint` and snakefmt are clean) and the
Python follows ruff's (lint and format, configured in pyproject.toml)."""

import subprocess
import sys

from .conftest import REPO, run_snakemake


def test_snakemake_lint_is_clean(tmp_path):
    result = run_snakemake(REPO, "--lint", check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_snakefmt_is_clean():
    result = subprocess.run(
        [sys.executable, "-m", "snakefmt", "--check", "."], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_lint_is_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
