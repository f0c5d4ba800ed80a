"""What a run was made of: package versions, config, commit, data and time per rule.

:func:`run_info` gathers it into one JSON-serialisable dict
(``results/run_info.json``); :func:`job_benchmarks` and :func:`summarise_benchmarks`
read the ``benchmark:`` files Snakemake writes for every job.
"""

import platform
import subprocess
from importlib import metadata
from pathlib import Path

import pandas as pd

from . import __version__

#: Distributions whose versions decide the numbers in the tables.
PACKAGES = (
    "numpy",
    "scipy",
    "scikit-learn",
    "opencv-python-headless",
    "faiss-cpu",
    "pandas",
    "matplotlib",
    "snakemake",
)


def package_versions(names=PACKAGES):
    """{distribution: version}; ``None`` for one that is not installed."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit(repo):
    """The commit checked out in ``repo`` (with ``+dirty`` if it has changes), or None."""
    def git(*args):
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+dirty" if dirty else "")


def job_benchmarks(folder):
    """One row per job from Snakemake benchmark files under ``folder``.

    Returns
    -------
    DataFrame
        ``rule`` (the first path component), ``job`` (the file's path below
        ``folder``), ``s`` (wall seconds) and ``max_rss`` (peak RSS, MiB).
    """
    folder = Path(folder)
    rows = []
    for path in sorted(folder.rglob("*.tsv")):
        record = pd.read_csv(path, sep="\t").iloc[-1]
        job = path.relative_to(folder)
        rows.append(
            {
                "rule": job.parts[0].removesuffix(".tsv"),
                "job": str(job),
                "s": float(record["s"]),
                "max_rss": float(record["max_rss"]),
            }
        )
    return pd.DataFrame(rows, columns=["rule", "job", "s", "max_rss"])


def summarise_benchmarks(jobs):
    """Per rule: jobs, summed and largest wall time (s), peak RSS (MiB), share of time."""
    summary = jobs.groupby("rule", sort=False).agg(
        jobs=("s", "size"), total_s=("s", "sum"), max_s=("s", "max"), max_rss_mib=("max_rss", "max")
    )
    summary["share_%"] = 100 * summary["total_s"] / summary["total_s"].sum()
    return summary.sort_values("total_s", ascending=False).round(1).reset_index()


def run_info(config, data_summary, benchmarks, repo):
    """Everything needed to tell how a run's tables were made.

    Parameters
    ----------
    config : dict
        The resolved configuration (after schema defaults).
    data_summary : dict
        The data report of ``index_dataset`` (groups, images, skipped files).
    benchmarks : str or Path
        Folder of the run's Snakemake benchmark files.
    repo : str or Path
        The workflow's repository, for its git commit.
    """
    jobs = job_benchmarks(benchmarks)
    return {
        "ndir_version": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": package_versions(),
        "git_commit": git_commit(repo),
        "seed": config["seed"],
        "config": config,
        "data": data_summary,
        "rules": summarise_benchmarks(jobs).to_dict("records") if len(jobs) else [],
        "job_seconds_total": round(float(jobs["s"].sum()), 1),
    }
