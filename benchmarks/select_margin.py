"""Choose the margin epsilon of Eq. 7 on held-out *training* groups, never the test split.

Usage (after a default run, from the repository root)::

    python benchmarks/select_margin.py --run . [--margins 1e-6 1e-3 1e-2 3e-2 1e-1]

For every signature in ``<run>/results/signatures/`` (VLAD/FV), the training split's
groups are divided once (seeded, whole source photographs) into 80 % to learn from and
20 % held out; a sparse rank projector (R = 32, tau = 0.99, the config's other settings)
is learned on the 80 % for each margin and scored on the held-out groups, as Holidays
mAP of the L2-normalised and of the raw reductions. Prints one row per (signature,
margin) and the mean over signatures per margin: the default ``sparse.margin`` is the
best mean held-out mAP (L2).

Why a margin at all: the columns of U are unit-norm (``sparse.renormalize``) and the
signatures are L2-normalised, so the scores are bounded by 1 and a margin of 1e-6 (the
paper's "e.g.") asks for no separation at all; the objective reaches 0 as soon as each
positive edges past the pivot.
"""

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ndir.data import holdout_mask
from ndir.evaluation import holidays_map
from ndir.projection import SparseRankProjector
from ndir.stages.common import split_signatures, split_together


def held_out_maps(X, groups, is_query, held, margin, args):
    model = SparseRankProjector(
        n_components=args.dims,
        sparsity=args.sparsity,
        max_iter=args.max_iter,
        n_queries_per_step=20,
        margin=margin,
        n_jobs=1,
        random_state=args.seed,
    ).fit(X[~held], groups[~held], queries=is_query[~held])
    Y = model.transform(X[held])
    Y_l2 = Y / np.maximum(np.linalg.norm(Y, axis=1, keepdims=True), 1e-30)
    return {
        "held_out_map_l2": 100 * holidays_map(Y_l2, groups[held], is_query[held]),
        "held_out_map_dot": 100 * holidays_map(Y, groups[held], is_query[held]),
        "steps": model.n_iter_,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=Path("."), help="a finished default run")
    parser.add_argument("--margins", type=float, nargs="+", default=[1e-6, 1e-3, 1e-2, 3e-2, 1e-1])
    parser.add_argument("--dims", type=int, default=32)
    parser.add_argument("--sparsity", type=float, default=0.99)
    parser.add_argument("--max-iter", type=int, default=200)
    parser.add_argument("--held-out", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    images = args.run / "results" / "data" / "images.csv"
    rows = []
    for path in sorted((args.run / "results" / "signatures").glob("*.npy")):
        X, groups, is_query = split_signatures(images, path)["train"]
        # Whole source photographs held out, as the split and the learners' hold-outs.
        held = holdout_mask(groups, args.held_out, np.random.default_rng(args.seed), split_together(images, "train"))
        for margin in args.margins:
            start = time.perf_counter()
            row = {"signature": path.stem, "margin": margin}
            row.update(held_out_maps(X, groups, is_query, held, margin, args))
            row["seconds"] = time.perf_counter() - start
            print(row, flush=True)
            rows.append(row)
    frame = pd.DataFrame(rows)
    printed = frame.assign(margin=frame["margin"].map("{:g}".format))
    print(printed.to_markdown(index=False, floatfmt=".2f"))
    mean = frame.groupby("margin")[["held_out_map_l2", "held_out_map_dot"]].mean()
    print("\nMean over signatures (held-out training groups, mAP %):\n")
    print(mean.set_axis(mean.index.map("{:g}".format)).to_markdown(floatfmt=".2f"))
    print(f"\nbest margin (L2): {mean['held_out_map_l2'].idxmax():g}")


if __name__ == "__main__":
    main()
