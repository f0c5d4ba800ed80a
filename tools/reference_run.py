"""Write the blocks of the documented default run from docs/reference_run/ into
docs/results.md: Tables I and II and the readings of the paper's findings
(``ndir.readings``); its wall time, memory and time per rule (``run.json``, which
``benchmarks/workflow_run.py`` writes, and ``run_info.json``). The README quotes the
wall time and the largest job only: :func:`readme_figures`.

    python tools/reference_run.py          # rewrite the blocks
    python tools/reference_run.py --check  # exit 1 if the page disagrees

tests/test_docs.py runs the check: the page's figures are the stored run's, never typed.
"""

import argparse
import json
import math
import sys
import textwrap
from pathlib import Path

import pandas as pd

from ndir.readings import summary_table

ROOT = Path(__file__).resolve().parents[1]
#: The pages that quote the documented run, between :data:`BEGIN` and :data:`END`.
PAGES = (ROOT / "docs" / "results.md",)
RUN = ROOT / "docs" / "reference_run"
BEGIN = "<!-- reference run: written by tools/reference_run.py from docs/reference_run; do not edit -->"
END = "<!-- end of the reference run -->"
TIME_BEGIN = "<!-- reference run's time: written by tools/reference_run.py from docs/reference_run; do not edit -->"
TIME_END = "<!-- end of the reference run's time -->"
#: Rules below this share of the job time are counted together in the time table.
SMALL_SHARE = 1.0


def block(run=RUN):
    """The Markdown between the markers: Table I, Table II, the readings."""
    table1 = pd.read_csv(run / "table1.csv", dtype={"Dim.": str})
    table2 = pd.read_csv(run / "table2.csv")
    readings = pd.read_csv(run / "readings.csv")
    n_queries = json.loads((run / "run_info.json").read_text())["data"]["splits"]["test"]["n_queries"]
    return "\n\n".join(
        [
            "Table I, test mAP % of the full signatures and of PCA to R dims:",
            table1.to_markdown(index=False, floatfmt=".2f"),
            "Table II, test mAP % of the sparse rank projectors (Algorithm 1; columns τ and R):",
            table2.to_markdown(index=False, floatfmt=".2f"),
            "The paper's findings on this run (`results/tables/readings.csv` has every cell; paired "
            f"bootstrap over the {n_queries} test queries, Holm over each finding's cells):",
            summary_table(readings),
        ]
    )


def wall_time(seconds):
    """``8 min 11 s``."""
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


def readme_figures(run=RUN):
    """What the README quotes of the documented run: its wall time on its cores, its
    commit, and its largest job's peak RSS."""
    totals = json.loads((run / "run.json").read_text())
    commit = json.loads((run / "run_info.json").read_text())["git_commit"][:7]
    return (
        f"{wall_time(totals['wall_s'])} on {totals['cores']} quiet cores",
        f"at {commit}",
        f"({totals['largest_job_rss_mib']} MiB;",
    )


def time_block(run=RUN):
    """The Markdown of the run's time and memory: totals, then the time per rule."""
    totals = json.loads((run / "run.json").read_text())
    info = json.loads((run / "run_info.json").read_text())
    machine = totals["machine"]
    rules = pd.DataFrame(info["rules"])
    largest = rules.loc[rules["max_rss_mib"].idxmax()]
    under = "**under 1 GiB**" if largest["max_rss_mib"] < 1024 else "**over 1 GiB**"
    small = rules[rules["share_%"] < SMALL_SHARE]
    table = rules[rules["share_%"] >= SMALL_SHARE][["rule", "jobs", "total_s", "max_s", "max_rss_mib"]]
    table = pd.concat(
        [
            table,
            pd.DataFrame(
                [
                    {
                        "rule": f"{len(small)} small rules (below)",
                        "jobs": small["jobs"].sum(),
                        "total_s": small["total_s"].sum(),
                        "max_s": small["max_s"].max(),
                        "max_rss_mib": small["max_rss_mib"].max(),
                    }
                ]
            ),
        ]
    )
    table["max_rss_mib"] = table["max_rss_mib"].round().astype(int)
    table.columns = ["rule", "jobs", "total s", "largest job s", "peak RSS MiB"]
    bound_gib = math.ceil(totals["bound_rss_mib"] / 1024 * 10) / 10
    return "\n\n".join(
        [
            _wrapped(
                f"`snakemake --cores {totals['cores']}` from a fresh clone of {info['git_commit'][:7]} in the pinned "
                f"environment (`python benchmarks/workflow_run.py --workdir DIR --cores {totals['cores']}`), on "
                f"{totals['cores']} otherwise idle cores of an {machine['cpu']} (machine reference: OpenCV SIFT "
                f"{machine['sift_ms']:,} ms per 512×384 image, 1-thread SGEMM {machine['sgemm_gflops']} GFLOP/s): "
                f"**{wall_time(totals['wall_s'])}** of wall time, {totals['jobs']} jobs, {totals['job_s']:,.0f} s of "
                f"job time. Its largest job (rule {largest['rule']}) peaked at {totals['largest_job_rss_mib']} MiB: "
                f"{under}; with Snakemake's own {totals['snakemake_rss_mib']} MiB, {totals['cores']} jobs at once "
                f"stay under {bound_gib:.1f} GiB. Time per rule, summed over its jobs (from "
                "`benchmarks/rules/`; also `rules` of its [run_info.json](reference_run/run_info.json)):"
            ),
            table.to_markdown(index=False, floatfmt=".1f", intfmt=","),
            _wrapped(
                f"The small rules, each under {SMALL_SHARE:g} % of the job time: {', '.join(sorted(small['rule']))}."
            ),
        ]
    )


def _wrapped(paragraph):
    """A paragraph cut into lines of the page's width, never inside a word."""
    return textwrap.fill(paragraph, width=92, break_long_words=False, break_on_hyphens=False)


def replaced(text, run=RUN):
    """``text`` (a page of :data:`PAGES`) with its blocks rewritten."""
    for begin, end, content in ((BEGIN, END, block), (TIME_BEGIN, TIME_END, time_block)):
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n\n{content(run)}\n\n{end}{tail}"
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the pages are up to date")
    args = parser.parse_args(argv)
    stale = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        new = replaced(text)
        if new == text:
            continue
        if args.check:
            stale.append(page.relative_to(ROOT).as_posix())
        else:
            page.write_text(new, encoding="utf-8")
    for page in stale:
        print(f"{page}: the reference run's block differs from docs/reference_run; run tools/reference_run.py")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
