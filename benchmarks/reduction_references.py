"""Where Table I's PCA stands: references for the same R on the same test split.

Usage (after a run, from the repository root)::

    python benchmarks/reduction_references.py --run /path/to/workdir [--dims 32 256]

For every VLAD/FV signature of ``<run>/results/signatures/``, the Holidays mAP (%) on
the test split of the L2-normalised reductions to R dimensions by

- ``pca_train``: PCA fitted on the training split (Table I's numbers),
- ``gaussian``: a seeded Gaussian random projection (no learning at all),
- ``pca_test``: PCA fitted on the test split itself (an oracle that has seen the test
  images; an upper reference for a linear reduction of that size, never a result),

and ``full`` (no reduction). A PCA fitted on few training images spans little more
than the training scenes: when ``gaussian`` comes close to or beats ``pca_train``,
Table I's drop from ``full`` says more about the training set than about PCA.
"""

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from ndir.encoding import l2_normalise_rows
from ndir.evaluation import holidays_map
from ndir.projection import PCAProjection
from ndir.stages.common import split_signatures


def references(X_train, X_test, groups, is_query, R, seed):
    """mAP (%) of the three reductions of ``X_test`` to ``R`` dimensions."""
    gaussian = np.random.default_rng(seed).standard_normal((X_test.shape[1], R)).astype(np.float32)
    return {
        "pca_train": holidays_map(PCAProjection(R).fit(X_train).transform(X_test), groups, is_query),
        "gaussian": holidays_map(l2_normalise_rows(X_test @ gaussian), groups, is_query),
        "pca_test": holidays_map(PCAProjection(R).fit(X_test).transform(X_test), groups, is_query),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=Path("."), help="a finished run's working directory")
    parser.add_argument("--dims", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    images = args.run / "results" / "data" / "images.csv"
    rows = []
    for path in sorted((args.run / "results" / "signatures").glob("*.npy")):
        splits = split_signatures(images, path)
        X_train = np.asarray(splits["train"][0])
        X_test, groups, is_query = splits["test"]
        X_test = np.asarray(X_test)
        full = holidays_map(X_test, groups, is_query)
        for R in args.dims:
            maps = references(X_train, X_test, groups, is_query, R, args.seed)
            rows.append({"signature": path.stem, "R": R, "full": full, **maps})
    table = pd.DataFrame(rows)
    columns = ["full", "pca_train", "gaussian", "pca_test"]
    table[columns] *= 100
    print(f"Test split of {images} (mAP %, n_train = {len(X_train)}, n_test = {len(X_test)}):\n")
    print(table.to_markdown(index=False, floatfmt=".1f"))


if __name__ == "__main__":
    main()
