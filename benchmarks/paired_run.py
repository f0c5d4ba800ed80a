"""The default run of two commits, alternated on this machine: speed-up and its spread.

Usage (from the repository root)::

    python benchmarks/paired_run.py --baseline 0c483bc --workdir /tmp/ndir-pairs --rounds 2 \
        [--new HEAD] [--cores 2] [--configfile FILE] [--new-first]

Timings on these shared machines drift by 2x from day to day, so a speed-up is only read
from runs made side by side: the baseline and the new commit are cloned from this
repository (committed code only; ``--source``: another one) and their workflows run one
after the other, ``--rounds`` times each, alternating (baseline first in every round unless ``--new-first``), each in a
fresh working directory with its own checkout's Snakefile, config (``config.yaml`` unless
``--configfile``) and code (``PYTHONPATH`` set to its ``src``; the packages are this
environment's). After every run the machine reference is measured again
(``timing.machine_figures``). Prints one row per round (both wall and job times, their
ratios, the largest job's peak RSS and both machine references) and the ratio of the
summed times, and writes the same to ``<workdir>/pairs.json`` and ``pairs.md``.
"""

import argparse
import json
import subprocess
from pathlib import Path

import pandas as pd
from workflow_run import REPO, run_totals, run_workflow

from ndir.provenance import job_benchmarks


def checkout(commit, folder, source=REPO):
    """A clone of the git repository ``source`` at ``commit`` in ``folder`` (reused if
    already there); returns the full commit hash."""
    if not folder.exists():
        subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(source), str(folder)], check=True)
    full = subprocess.run(
        ["git", "-C", str(source), "rev-parse", "--verify", f"{commit}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    subprocess.run(["git", "-C", str(folder), "checkout", "--quiet", "--force", full], check=True)
    return full


def timed_run(source, workdir, cores, configfile):
    """One workflow run of the checkout ``source`` in the fresh ``workdir``: its
    ``run.json`` totals (:func:`workflow_run.run_totals`)."""
    if workdir.exists():
        raise SystemExit(f"{workdir} exists: give paired_run.py a new --workdir")
    config = Path(configfile).resolve() if configfile else source / "config.yaml"
    wall, master_rss = run_workflow(workdir, cores, config, [], repo=source, env={"PYTHONPATH": str(source / "src")})
    return run_totals(wall, master_rss, job_benchmarks(workdir / "benchmarks" / "rules"), cores)


def pair_table(rounds):
    """One row per round of ``{"baseline": totals, "new": totals, "order": ...}``, then
    the row of the summed times."""
    rows = []
    for number, pair in enumerate(rounds, 1):
        old, new = pair["baseline"], pair["new"]
        rows.append(
            {
                "round": str(number),
                "order": pair["order"],
                "baseline_wall_s": old["wall_s"],
                "new_wall_s": new["wall_s"],
                "wall_speedup": round(old["wall_s"] / new["wall_s"], 2),
                "baseline_job_s": old["job_s"],
                "new_job_s": new["job_s"],
                "job_speedup": round(old["job_s"] / new["job_s"], 2),
                "baseline_largest_job_mib": old["largest_job_rss_mib"],
                "new_largest_job_mib": new["largest_job_rss_mib"],
                "sift_ms": f"{old['machine']['sift_ms']}, {new['machine']['sift_ms']}",
                "sgemm_gflops": f"{old['machine']['sgemm_gflops']}, {new['machine']['sgemm_gflops']}",
            }
        )
    table = pd.DataFrame(rows)
    total = {column: table[column].sum() for column in ("baseline_wall_s", "new_wall_s", "baseline_job_s", "new_job_s")}
    total.update(
        round="all",
        wall_speedup=round(total["baseline_wall_s"] / total["new_wall_s"], 2),
        job_speedup=round(total["baseline_job_s"] / total["new_job_s"], 2),
        baseline_largest_job_mib=table["baseline_largest_job_mib"].max(),
        new_largest_job_mib=table["new_largest_job_mib"].max(),
    )
    return pd.concat([table, pd.DataFrame([total])], ignore_index=True).fillna("")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="the commit to compare against, e.g. 0c483bc")
    parser.add_argument("--new", default="HEAD", help="the commit measured (committed code only)")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--configfile", help="the config of both runs (default: each checkout's config.yaml)")
    parser.add_argument("--new-first", action="store_true", help="the new commit first in every round")
    parser.add_argument("--source", type=Path, default=REPO, help="the git repository to clone (default: this one)")
    args = parser.parse_args()

    commits = {
        name: checkout(commit, args.workdir / "checkouts" / name, args.source)
        for name, commit in (("baseline", args.baseline), ("new", args.new))
    }
    order = ("new", "baseline") if args.new_first else ("baseline", "new")
    rounds = []
    for number in range(1, args.rounds + 1):
        pair = {"order": " then ".join(order)}
        for name in order:
            workdir = args.workdir / f"round{number}-{name}"
            pair[name] = timed_run(args.workdir / "checkouts" / name, workdir, args.cores, args.configfile)
            print(f"round {number}, {name} ({commits[name][:7]}): {pair[name]['wall_s']} s", flush=True)
        rounds.append(pair)
    table = pair_table(rounds)
    (args.workdir / "pairs.json").write_text(json.dumps({"commits": commits, "rounds": rounds}, indent=2) + "\n")
    cpu = rounds[0]["new"]["machine"]["cpu"]
    heading = f"baseline {commits['baseline'][:7]}, new {commits['new'][:7]}, --cores {args.cores}, {cpu}\n\n"
    (args.workdir / "pairs.md").write_text(heading + table.to_markdown(index=False) + "\n")
    print(heading + table.to_markdown(index=False))


if __name__ == "__main__":
    main()
