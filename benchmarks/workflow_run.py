"""Run the workflow and summarise its time and memory from Snakemake's benchmark files.

Usage (from the repository root)::

    python benchmarks/workflow_run.py --workdir /tmp/ndir-bench --cores 2 [--configfile FILE] [TARGET ...]

Runs ``snakemake`` in a fresh working directory under GNU time, then reads every
``benchmarks/rules/**.tsv`` that Snakemake's ``benchmark:`` directive wrote and prints,
per rule: jobs, summed and largest wall time (s) and largest peak RSS (MiB). Writes
the same table to ``<workdir>/results/benchmarks/summary.{csv,md}``, and the run's
totals with the machine reference to ``<workdir>/results/benchmarks/run.json`` (what
``tools/reference_run.py`` quotes of the documented run).

With ``--peers`` (or ``--peers-quick``), ``benchmarks/peers.py`` then times ndir's stages
against the tools a user would pick instead on the same machine, and its table of
ratios goes to ``<workdir>/results/benchmarks/peers.md`` and the end of ``summary.md``.

Peak RSS of the whole run: Snakemake's own process and each job are measured
separately; with ``--cores N`` at most N single-thread jobs run at once, so the run's
peak is at most the master's RSS plus the N largest job peaks, which is printed.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from timing import machine_figures, machine_reference

from ndir.provenance import job_benchmarks, summarise_benchmarks

REPO = Path(__file__).resolve().parents[1]


def run_workflow(workdir, cores, configfile, targets, extra_args=(), repo=REPO, env=None):
    """Run snakemake under GNU time on ``repo``'s Snakefile (``env``: extra environment
    variables, e.g. another checkout's ``PYTHONPATH``); return (wall seconds, master peak
    RSS in MiB)."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = dict(os.environ, PATH=path, **(env or {}))
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "snakemake", *targets]
    cmd += ["-s", str(Path(repo) / "Snakefile"), "-d", str(workdir), "--cores", str(cores)]
    cmd += ["--configfile", str(Path(configfile).resolve()), *extra_args]
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    (workdir / "workflow_run.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        sys.exit(f"snakemake failed (exit {result.returncode}); see {workdir / 'workflow_run.log'}")
    match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", result.stderr)
    return wall, int(match.group(1)) / 1024 if match else float("nan")


def run_totals(wall, master_rss, jobs, cores):
    """The run's totals as ``run.json`` holds them: wall and job time, jobs, peak RSS (the
    largest job's, Snakemake's, and their bound for ``cores`` concurrent jobs) and the
    machine reference, measured now."""
    return {
        "wall_s": round(wall, 1),
        "job_s": round(float(jobs["s"].sum()), 1),
        "jobs": len(jobs),
        "cores": cores,
        "largest_job_rss_mib": round(float(jobs["max_rss"].max())),
        "snakemake_rss_mib": round(master_rss),
        "bound_rss_mib": round(master_rss + jobs["max_rss"].nlargest(cores).sum()),
        "machine": machine_figures(),
    }


def run_peers(out, threads, quick):
    """Run benchmarks/peers.py into ``out/peers.md`` and append its table to ``out/summary.md``."""
    cmd = [sys.executable, str(REPO / "benchmarks" / "peers.py"), "--threads", str(threads)]
    cmd += ["--out", str(out / "peers.md")] + (["--quick"] if quick else [])
    subprocess.run(cmd, check=True, cwd=REPO / "benchmarks")
    with open(out / "summary.md", "a") as summary:
        summary.write("\nAgainst the peers (speed-up = peer time / ndir time):\n\n")
        summary.write((out / "peers.md").read_text())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--configfile", default=str(REPO / "config.yaml"))
    parser.add_argument(
        "--snakemake-args",
        default="",
        help="extra snakemake arguments, e.g. '--rerun-triggers mtime' to resume a run "
        "in an existing workdir from another checkout",
    )
    parser.add_argument("--peers", action="store_true", help="then run benchmarks/peers.py (about 5 min)")
    parser.add_argument("--peers-quick", action="store_true", help="then run benchmarks/peers.py --quick")
    args = parser.parse_args()

    extra = args.snakemake_args.split()
    wall, master_rss = run_workflow(args.workdir, args.cores, args.configfile, args.targets, extra)
    jobs = job_benchmarks(args.workdir / "benchmarks" / "rules")
    summary = summarise_benchmarks(jobs)
    out = args.workdir / "results" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    summary.to_csv(out / "summary.csv", index=False)
    (out / "summary.md").write_text(summary.to_markdown(index=False) + "\n")
    if args.peers or args.peers_quick:
        run_peers(out, args.cores, quick=args.peers_quick)

    totals = run_totals(wall, master_rss, jobs, args.cores)
    (out / "run.json").write_text(json.dumps(totals, indent=2) + "\n")
    print(f"{machine_reference(totals['machine'])}; {os.cpu_count()} cores, --cores {args.cores}")
    print(f"wall time: {wall:.1f} s ({wall / 60:.1f} min); job time summed: {jobs['s'].sum():.1f} s")
    print(
        f"peak RSS: largest job {jobs['max_rss'].max():.0f} MiB, snakemake {master_rss:.0f} MiB, "
        f"bound for {args.cores} concurrent jobs {totals['bound_rss_mib']} MiB"
    )
    print(summary.to_markdown(index=False))


if __name__ == "__main__":
    main()
