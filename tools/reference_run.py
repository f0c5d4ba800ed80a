"""Write the block of the documented default run from docs/reference_run/ into
docs/results.md: Tables I and II and the readings of the paper's findings
(``ndir.readings``). The README quotes no figures; it links that page.

    python tools/reference_run.py          # rewrite the block
    python tools/reference_run.py --check  # exit 1 if the page disagrees

tests/test_docs.py runs the check: the page's figures are the stored run's, never typed.
"""

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from ndir.readings import summary_table

ROOT = Path(__file__).resolve().parents[1]
#: The pages that quote the documented run, between :data:`BEGIN` and :data:`END`.
PAGES = (ROOT / "docs" / "results.md",)
RUN = ROOT / "docs" / "reference_run"
BEGIN = "<!-- reference run: written by tools/reference_run.py from docs/reference_run; do not edit -->"
END = "<!-- end of the reference run -->"


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


def replaced(text, run=RUN):
    """``text`` (a page of :data:`PAGES`) with its block rewritten."""
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n\n{block(run)}\n\n{END}{tail}"


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
