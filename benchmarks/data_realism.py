"""Does a run's data behave like real near-duplicate photos? Table I's shape, with references.

Usage (after a run, from its working directory or with ``--run``)::

    python benchmarks/data_realism.py [--run WORKDIR] [--dims 8 16 32 64 128 256] [--out STEM]

For every VLAD/FV signature of ``<run>/results/signatures/``, the test mAP (%) of the
full signatures and of their reductions to each R below the training split's rank,
fitted on the training split (:func:`ndir.realism.reduction_maps`): PCA (Table I),
whitened PCA, PCA fitted on the test split (an oracle, never a result), PCA
hard-thresholded to tau = 0.9 / 0.99 (the sparse projectors' start), Gaussian and
sparse random projections (density 1 - tau) averaged over 3 seeds, and full - PCA-R;
then, for VLAD-64 and FV-64 when present, which of :data:`ndir.realism.TARGETS`
(the ranges real near-duplicate photos show) hold. Printed, and written to
``STEM.csv`` and ``STEM.md`` (default ``<run>/results/tables/realism``).
"""

import argparse
from pathlib import Path

import pandas as pd

from ndir.realism import DIMS, check_targets, reduction_maps
from ndir.stages.common import split_signatures

#: Signatures whose summary figures the embedded default is tuned on (issue 34).
TARGET_SIGNATURES = ("vlad-64", "fv-64")


def realism_tables(run, dims):
    """The figures of every signature of ``run`` and the targets of :data:`TARGET_SIGNATURES`."""
    images = run / "results" / "data" / "images.csv"
    paths = sorted((run / "results" / "signatures").glob("*.npy"))
    if not paths:
        raise SystemExit(f"data_realism: no signatures in {run / 'results' / 'signatures'}; run the workflow first")
    figures, targets = [], []
    for path in paths:
        table = reduction_maps(split_signatures(images, path), dims=dims)
        figures.append(table.assign(signature=path.stem))
        if path.stem in TARGET_SIGNATURES:
            targets.append(check_targets(table).assign(signature=path.stem))
    figures = pd.concat(figures, ignore_index=True)
    figures = figures[["signature", *[c for c in figures.columns if c != "signature"]]]
    targets = pd.concat(targets, ignore_index=True) if targets else pd.DataFrame()
    return figures, targets


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=Path("."), help="a finished run's working directory")
    parser.add_argument("--dims", type=int, nargs="+", default=list(DIMS))
    parser.add_argument("--out", type=Path, help="stem of the CSV and Markdown written")
    args = parser.parse_args()
    figures, targets = realism_tables(args.run, args.dims)
    text = "Test mAP % (Holidays protocol, reductions L2-normalised), differences in points:\n\n"
    text += figures.to_markdown(index=False, floatfmt=".1f") + "\n"
    if not targets.empty:
        text += "\nTargets of the embedded default (ndir.realism.TARGETS):\n\n"
        text += targets.to_markdown(index=False, floatfmt=".1f") + "\n"
    print(text)
    out = args.out or args.run / "results" / "tables" / "realism"
    out.parent.mkdir(parents=True, exist_ok=True)
    figures.to_csv(out.with_suffix(".csv"), index=False)
    out.with_suffix(".md").write_text(text)
    print(f"wrote {out.with_suffix('.csv')} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
