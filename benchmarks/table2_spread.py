"""Spread of Table II's cells over the random queries of Algorithm 1, and across BLAS kernels.

Usage (after a run, from the repository root)::

    python benchmarks/table2_spread.py --run . --seeds 5 --out spread
    OPENBLAS_CORETYPE=Haswell python benchmarks/table2_spread.py --run . --seeds 5 --out spread-haswell
    python benchmarks/table2_spread.py --compare spread.csv spread-haswell.csv

Every cell of the run's Table II (each signature x R x tau of its config, read from
``results/run_info.json``) is trained again by the workflow's own stage,
:func:`ndir.stages.sparse.train_sparse_projector`, with the run's settings and
``--seeds`` values of the random state that draws the stochastic half of each step's
queries: the run's seed, then the next ones. Prints and writes (``<out>.csv``,
``<out>.md``) per cell the mean, standard deviation (n - 1), minimum and maximum of the
final test mAP scored as Table II (L2-normalised reductions), in %, and ``run_seed``,
the value at the run's seed: Table II's own cell when the run was made on this machine
with the same BLAS kernel.

One invocation measures one BLAS kernel (OpenBLAS picks it from the CPU; set
``OPENBLAS_CORETYPE`` to force another); ``--compare A.csv B.csv`` prints, per cell, how
the second differs from the first at the run's seed and in the mean, and how these
differences compare with the seeds' spread.

The trainings run ``--jobs`` at a time, one process each with single-threaded BLAS (the
workflow's trainings run on one thread too). A training costs what its
``train_sparse_projector`` job did (``benchmarks/rules/``): the default run's 48 Table
II cells take about 5 min of job time per seed (about 2.5 min on 2 cores).
"""

import argparse
import json
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.stats
from threadpoolctl import threadpool_limits

from ndir import names
from ndir.stages.sparse import final_maps, train_sparse_projector, training_settings

#: The columns of a spread table after the cell's (signature, R, tau), mAP in %.
STATISTICS = ("n_seeds", "mean", "sd", "min", "max", "run_seed")


def run_config(run):
    """The resolved config of a finished run (``results/run_info.json``)."""
    path = run / "results" / "run_info.json"
    if not path.exists():
        raise SystemExit(f"{path} not found: give --run the working directory of a finished run")
    return json.loads(path.read_text())["config"]


def table2_cells(config):
    """(encoding, K, R, tau) of every Table II cell, in the workflow's order
    (``table2_histories`` in ``workflow/rules/common.smk``)."""
    return [
        (encoding, K, R, tau)
        for encoding in config["signatures"]["encodings"]
        for K in config["signatures"]["codebook_sizes"]
        for tau in config["sparse"]["sparsity"]
        for R in config["sparse"]["dims"]
    ]


def limit_blas():
    """Each worker's BLAS on one thread: the workers share the cores."""
    threadpool_limits(1)


def final_test_map(run, config, encoding, K, R, tau, seed):
    """Final test mAP (%, L2 scoring as Table II) of one training with ``random_state`` seed."""
    signature = names.signature_name(encoding, K)
    with tempfile.TemporaryDirectory() as work:
        stem = Path(work) / names.projector_name(R, tau)
        train_sparse_projector(
            run / "results" / "data" / "images.csv",
            run / "results" / "signatures" / f"{signature}.npy",
            stem.with_suffix(".npz"),
            stem.with_suffix(".csv"),
            encoding=encoding,
            codebook_size=K,
            n_components=R,
            sparsity=tau,
            settings=training_settings(config["sparse"]),
            seed=seed,
            ns_score=False,
        )
        return 100 * final_maps([stem.with_suffix(".csv")], scoring="l2")["final"].iloc[0]


def measure(run, seeds, jobs):
    """Long table ``signature, R, tau, seed, test_map`` (%) of every cell and seed."""
    config = run_config(run)
    tasks = [(cell, seed) for cell in table2_cells(config) for seed in seeds]
    maps = [None] * len(tasks)
    with ProcessPoolExecutor(jobs, initializer=limit_blas) as pool:
        futures = {pool.submit(final_test_map, run, config, *cell, seed): i for i, (cell, seed) in enumerate(tasks)}
        for done, future in enumerate(as_completed(futures), 1):
            (encoding, K, R, tau), seed = tasks[futures[future]]
            maps[futures[future]] = future.result()
            signature = names.signature_name(encoding, K)
            print(f"[{done}/{len(tasks)}] {signature} R{R} tau {tau:g} seed {seed}: {future.result():.2f}", flush=True)
    cells = pd.DataFrame(
        [(names.signature_name(encoding, K), R, tau, seed) for (encoding, K, R, tau), seed in tasks],
        columns=["signature", "R", "tau", "seed"],
    )
    return cells.assign(test_map=maps)


def spread(maps, run_seed, keys=("signature", "R", "tau")):
    """Per cell (``keys``; Table II's signature, R and tau): :data:`STATISTICS` of
    ``maps``, a long table of ``keys``, ``seed`` and ``test_map`` (from :func:`measure`)."""
    keys = list(keys)
    cells = maps.groupby(keys, sort=False)["test_map"]
    table = cells.agg(n_seeds="size", mean="mean", sd="std", min="min", max="max")
    table["run_seed"] = maps[maps["seed"] == run_seed].set_index(keys)["test_map"]
    return table.reset_index()


def compare(first, second):
    """Per cell: ``second - first`` at the run's seed and in the mean (points), beside
    the larger of the two seed spreads (max - min) and s.d.s; then how the second
    stands against the first's seeds, as issue 48's accuracy guard reads it: whether its
    run's seed lies inside the first's range at the tables' two decimals and by how much
    it falls outside, whether the two ranges overlap, and Welch's t of the difference of
    the means (0 where both s.d.s are 0)."""
    cell = ["signature", "R", "tau"]
    a, b = (pd.read_csv(path) for path in (first, second))
    both = a.merge(b, on=cell, suffixes=("_a", "_b"), validate="one_to_one")
    low, high, run_seed = (both[column].round(2) for column in ("min_a", "max_a", "run_seed_b"))
    mean_diff = both["mean_b"] - both["mean_a"]
    standard_error = np.sqrt(both["sd_a"] ** 2 / both["n_seeds_a"] + both["sd_b"] ** 2 / both["n_seeds_b"])
    return pd.DataFrame(
        {
            **{name: both[name] for name in cell},
            "run_seed_a": both["run_seed_a"],
            "run_seed_b": both["run_seed_b"],
            "run_seed_diff": both["run_seed_b"] - both["run_seed_a"],
            "mean_diff": mean_diff,
            "seed_range": pd.concat([both["max_a"] - both["min_a"], both["max_b"] - both["min_b"]], axis=1).max(axis=1),
            "seed_sd": both[["sd_a", "sd_b"]].max(axis=1),
            "outside_a_by": np.maximum(low - run_seed, run_seed - high).clip(lower=0.0),
            "ranges_overlap": (both["min_b"] <= both["max_a"]) & (both["max_b"] >= both["min_a"]),
            "welch_t": mean_diff.div(standard_error).where(standard_error > 0, 0.0),
            "n_seeds": both[["n_seeds_a", "n_seeds_b"]].min(axis=1),
        }
    )


def summary(differences):
    """Two lines on a :func:`compare` table: how the cells moved, and the guard's counts
    (the second's run seed inside the first's seed range, and as many expected if the
    cells that moved drew again from unchanged distributions; the ranges overlapping; the
    means apart at the 5 % level, two-sided, with as many cells expected by chance)."""
    moved = differences["run_seed_diff"].abs()
    inside = differences["outside_a_by"] == 0
    # A cell whose value only drew again from the same distribution lands inside n
    # earlier draws' range with probability (n - 1) / (n + 1); one that did not move is
    # inside.
    n = differences["n_seeds"]
    expected_inside = np.where(moved > 0, (n - 1) / (n + 1), 1.0).sum()
    # Student's t at 2.5 % for the smaller seed count of each cell: the usual Welch
    # degrees of freedom are at least n - 1, so this tests at 5 % or below.
    critical = scipy.stats.t.ppf(0.975, differences["n_seeds"] - 1)
    apart = differences["welch_t"].abs() > critical
    return (
        f"{(moved > 0).sum()} of {len(moved)} cells differ at the run's seed; |difference| mean "
        f"{moved.mean():.2f}, max {moved.max():.2f} points; mean |difference of the means| "
        f"{differences['mean_diff'].abs().mean():.2f}; mean seed s.d. {differences['seed_sd'].mean():.2f}, "
        f"mean seed range {differences['seed_range'].mean():.2f} points\n"
        f"B's run seed inside A's seed range in {inside.sum()} of {len(moved)} cells ({expected_inside:.1f} "
        f"expected if the cells that moved only drew again; at 2 decimals; the others outside by at most "
        f"{differences['outside_a_by'].max():.2f} points); seed ranges overlap in "
        f"{differences['ranges_overlap'].sum()}; means apart at 5 % (Welch's t) in {apart.sum()} "
        f"({0.05 * len(moved):.1f} expected by chance), mean difference of the means "
        f"{differences['mean_diff'].mean():+.2f} points"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="the working directory of a finished run")
    parser.add_argument("--seeds", type=int, default=5, help="random states per cell: the run's seed and the next ones")
    parser.add_argument("--jobs", type=int, default=2, help="trainings at once, one core each")
    parser.add_argument("--out", type=Path, help="write <out>.csv and <out>.md")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"), help="two spread CSVs: B - A per cell")
    args = parser.parse_args()
    if args.compare:
        differences = compare(*args.compare)
        print(differences.to_markdown(index=False, floatfmt=".2f"))
        print(summary(differences))
        if args.out:
            differences.to_csv(args.out.with_suffix(".csv"), index=False)
        return
    if args.run is None:
        parser.error("--run is required unless --compare is given")
    run_seed = run_config(args.run)["seed"]
    table = spread(measure(args.run, range(run_seed, run_seed + args.seeds), args.jobs), run_seed)
    markdown = table.to_markdown(index=False, floatfmt=".2f")
    print(f"\nTest mAP % (L2, as Table II) over seeds {run_seed}-{run_seed + args.seeds - 1}:\n\n{markdown}")
    if args.out:
        table.to_csv(args.out.with_suffix(".csv"), index=False)
        args.out.with_suffix(".md").write_text(markdown + "\n")


if __name__ == "__main__":
    main()
