"""The SLURM profile plans the paper grid with memory and time for every job (no cluster)."""

import os
import re
from collections import Counter

import pytest

from .conftest import REPO, import_or_skip, run_snakemake

import_or_skip(
    "snakemake_executor_plugin_slurm",
    reason="the SLURM profile needs snakemake-executor-plugin-slurm: pip install -e '.[slurm]'",
)

PROFILE = REPO / "profiles/slurm"
RULE = re.compile(r"^(?:local)?rule (\w+):$")
TOTAL = re.compile(r"^total\s+(\d+)$")


def planned_resources(output):
    """(rule, wildcards, resources line) for each job block a dry run prints (wildcards
    as printed, "" for none), and its job total."""
    jobs, rule, wildcards, total = [], None, "", None
    for line in output.splitlines():
        if match := RULE.match(line):
            rule, wildcards = match.group(1), ""
        elif line.startswith("    wildcards:") and rule is not None:
            wildcards = line.split(":", 1)[1].strip()
        elif line.startswith("    resources:") and rule is not None:
            jobs.append((rule, wildcards, line))
            rule = None
        elif match := TOTAL.match(line):
            total = int(match.group(1))
    return jobs, total


def dry_run(workdir, config, *extra):
    result = run_snakemake(workdir, "--profile", str(PROFILE), "-n", "--configfile", str(config), *extra, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    jobs, total = planned_resources(result.stdout + "\n" + result.stderr)
    assert total is not None and len(jobs) == total, "a job block printed no resources line"
    return jobs


def test_every_planned_job_has_memory_and_runtime(tmp_path, paper_grid):
    jobs = dry_run(tmp_path, paper_grid)
    counts = Counter(rule for rule, _, _ in jobs)
    assert counts["fit_vlad_codebook"] == counts["fit_fisher_codebook"] == 4
    assert counts["train_sparse_projectors"] == 8 * 2 + 1 and counts["train_sparse_projector"] == 1
    for rule, _, resources in jobs:
        assert "mem_mb=" in resources and "runtime=" in resources, (rule, resources)


def test_trainings_ask_for_the_time_their_size_and_sparsity_need(tmp_path, paper_grid):
    """2,000 steps at FV-512, R = 256 (D R = 4 x 20,480 x 256, about 4 s a step at
    tau = 0.9): 3 x 2,000 x 4.05 s = 405 min; at R = 128 205 min; R = 64 and 32 keep
    the 2 h floor; their grid job (every R at tau = 0.9, one after the other) asks for
    the sum. At R = 64, tau = 0.5 (Fig. 3's own training; D R = 20,480 x 256, measured
    2.3-3.5 s a step) 3 x 2,000 x 2.55 s = 255 min, where the tau = 0.9 count would
    give 2 h; the smallest grid jobs ask for four times the floor."""
    steps = tmp_path / "steps.yaml"
    steps.write_text("sparse: {max_iter: 2000}\n")
    jobs = dry_run(tmp_path, paper_grid, str(steps))
    minutes = {
        (rule, wildcards): int(re.search(r"runtime=(\d+)", resources).group(1))
        for rule, wildcards, resources in jobs
        if rule.startswith("train_sparse_projector")
    }
    grid = {wildcards: value for (rule, wildcards), value in minutes.items() if rule == "train_sparse_projectors"}
    assert grid["signature=fv-512, tau=0.9"] == 405 + 205 + 120 + 120
    assert min(grid.values()) == 4 * 120
    assert minutes["train_sparse_projector", "signature=fv-512, R=64, tau=0.5"] == 255


def test_account_and_partition_from_the_command_line(tmp_path, paper_grid):
    """The README's command: it replaces the profile's default-resources, so the
    memory and time still shown are the ones each rule declares."""
    jobs = dry_run(tmp_path, paper_grid, "--default-resources", "slurm_account=ci", "slurm_partition=debug")
    for rule, _, resources in jobs:
        assert "slurm_account=ci" in resources and "slurm_partition=debug" in resources
        if rule != "all":  # no action: never submitted
            assert "mem_mb=" in resources and "runtime=" in resources, (rule, resources)


@pytest.mark.workflow
@pytest.mark.skipif(
    not os.environ.get("NDIR_SLURM_CLUSTER"),
    reason="no SLURM cluster: .ci/run starts one with ../shared/slurm/up.sh and sets NDIR_SLURM_CLUSTER=1",
)
def test_cluster_run_gives_the_local_tables(tiny_run, tmp_path):
    """The tiny config through a real SLURM cluster gives the local run's Tables I and II, byte for byte."""
    tables = ["results/tables/table1.csv", "results/tables/table2.csv"]
    result = run_snakemake(
        tmp_path,
        *tables,
        "--configfile",
        str(REPO / "tests/configs/tiny.yaml"),
        "--profile",
        str(PROFILE),
        "--default-resources",
        "slurm_account=ci",
        "slurm_partition=debug",
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    for table in tables:
        assert (tmp_path / table).read_bytes() == (tiny_run / table).read_bytes(), table
