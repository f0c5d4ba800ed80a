"""benchmarks/paired_run.py: the table of alternated runs, and tiny runs of a commit and its parent."""

import json
import subprocess
import sys

import pytest

from .conftest import REPO, benchmark_script

SCRIPT = REPO / "benchmarks" / "paired_run.py"


@pytest.fixture
def paired_run():
    return benchmark_script("paired_run")


def totals(wall_s, job_s, largest_mib, sift_ms):
    machine = {"sift_ms": sift_ms, "sgemm_gflops": 190, "cpu": "test CPU"}
    return {"wall_s": wall_s, "job_s": job_s, "largest_job_rss_mib": largest_mib, "machine": machine}


def test_pair_table_ratios_per_round_and_of_the_summed_times(paired_run):
    rounds = [
        {
            "order": "baseline then new",
            "baseline": totals(600.0, 1100.0, 900, 1100),
            "new": totals(300.0, 540.0, 880, 1110),
        },
        {
            "order": "baseline then new",
            "baseline": totals(620.0, 1150.0, 910, 1105),
            "new": totals(290.0, 520.0, 890, 1108),
        },
    ]
    table = paired_run.pair_table(rounds).set_index("round")
    assert table.loc["1", "wall_speedup"] == 2.0 and table.loc["2", "wall_speedup"] == round(620 / 290, 2)
    assert table.loc["1", "job_speedup"] == round(1100 / 540, 2)
    assert table.loc["all", "baseline_wall_s"] == 1220.0 and table.loc["all", "new_wall_s"] == 590.0
    assert table.loc["all", "wall_speedup"] == round(1220 / 590, 2)
    assert table.loc["all", "job_speedup"] == round(2250 / 1060, 2)
    assert table.loc["all", "new_largest_job_mib"] == 890
    assert table.loc["2", "sift_ms"] == "1105, 1108"


def test_an_existing_workdir_is_refused_before_any_run(paired_run, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(paired_run, "run_workflow", lambda *args, **kwargs: calls.append((args, kwargs)) or (1.0, 2.0))
    monkeypatch.setattr(paired_run, "job_benchmarks", lambda folder: folder)
    monkeypatch.setattr(paired_run, "run_totals", lambda wall, rss, jobs, cores: {"wall_s": wall, "jobs": jobs})
    with pytest.raises(SystemExit, match="new --workdir"):
        paired_run.timed_run(REPO, tmp_path, 2, None)
    assert calls == []
    # As the message says: a new workdir runs, with the checkout's Snakefile, config and code.
    totals = paired_run.timed_run(REPO, tmp_path / "new", 2, None)
    ((args, kwargs),) = calls
    assert args == (tmp_path / "new", 2, REPO / "config.yaml", [])
    assert kwargs == {"repo": REPO, "env": {"PYTHONPATH": str(REPO / "src")}}
    assert totals == {"wall_s": 1.0, "jobs": tmp_path / "new" / "benchmarks" / "rules"}


@pytest.mark.workflow
def test_one_round_runs_each_commit_with_its_own_code(tmp_path):
    """A commit on top of HEAD that only changes ``ndir.__version__``, which the run's
    ``run_info.json`` records from the code it imported, against HEAD itself."""
    source = tmp_path / "source"
    if subprocess.run(["git", "clone", "--quiet", str(REPO), str(source)]).returncode != 0:
        pytest.skip("not a git checkout")
    init = source / "src" / "ndir" / "__init__.py"
    init.write_text(init.read_text().replace('__version__ = "', '__version__ = "9.9.9+'))
    git = ["git", "-C", str(source), "-c", "user.name=test", "-c", "user.email=test@example.org"]
    subprocess.run([*git, "commit", "--quiet", "-am", "version"], check=True)
    commits = {
        name: subprocess.run([*git, "rev-parse", rev], capture_output=True, text=True, check=True).stdout.strip()
        for name, rev in (("baseline", "HEAD~1"), ("new", "HEAD"))
    }
    workdir = tmp_path / "pairs"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--baseline", "HEAD~1", "--source", str(source), "--workdir", str(workdir)]
        + ["--rounds", "1", "--configfile", str(REPO / "tests/configs/tiny.yaml")],
        check=True,
        cwd=REPO / "benchmarks",
    )
    pairs = json.loads((workdir / "pairs.json").read_text())
    assert pairs["commits"] == commits
    for name in ("baseline", "new"):
        info = json.loads((workdir / f"round1-{name}" / "results" / "run_info.json").read_text())
        assert info["git_commit"] == commits[name]  # its Snakefile
        assert info["ndir_version"].startswith("9.9.9+") == (name == "new")  # its code
    (pair,) = pairs["rounds"]
    assert pair["order"] == "baseline then new"
    assert pair["baseline"]["wall_s"] > 0 and pair["new"]["jobs"] == pair["baseline"]["jobs"]
    assert "| all " in (workdir / "pairs.md").read_text()
