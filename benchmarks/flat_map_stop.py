"""What a stop on a flat training mAP would save, counted from a finished run's histories.

Usage (after a run, e.g. the Holidays-scale grid)::

    python benchmarks/flat_map_stop.py --run /tmp/ndir-holidays-scale [--evaluations 1 2 4] [--perfect]

Algorithm 1 runs until its objective is below ``sparse.tol``, its line search stalls, or
``sparse.max_iter`` steps; its training mAP is often flat long before. For each k, this
finds in every training history of a run without ``sparse.flat_map_evaluations``
(``results/sparse/*/*.csv``, evaluated every ``sparse.eval_every`` steps) the
evaluation at which ``flat_map_evaluations = k`` would have stopped it (training mAP
(dot) moved by at most ``--tolerance`` over the last k evaluations; with ``--perfect``,
also at the first evaluation where it is 1, ``sparse.stop_at_perfect_map``; ``none``:
that stop alone), as ``ndir.stages.sparse.map_stop`` stops a training, and prints:

- the time the trainings would take, from the fit time each projector records (its
  meta's ``fit_seconds``, the history's evaluations left out), counting every step of
  a training at the same cost (early steps are often dearer, so the saving is an upper
  bound);
- how the test mAP (L2) of the Table II trainings (tau 0.9 and 0.99) at that
  evaluation differs from their last one, in points.

The training is deterministic, so a run stopped at that step would end with the state
the history recorded there. Nothing is rerun.
"""

import argparse
from pathlib import Path

import pandas as pd

from ndir.projection import load_projector
from ndir.stages.sparse import FLAT_MAP_TOLERANCE, map_stop

TABLE2_TAUS = ("0.9", "0.99")


def trainings(run):
    """One row per training: its tau, its history and its fit's seconds."""
    rows = []
    for history in sorted((run / "results" / "sparse").glob("*/R*-tau*.csv")):
        tau = history.stem.split("-tau")[1]
        seconds = load_projector(history.with_suffix(".npz"))[1]["fit_seconds"]
        rows.append((tau, pd.read_csv(history), seconds))
    if not rows:
        raise SystemExit(f"no training histories under {run / 'results' / 'sparse'}; run the workflow first")
    return rows


def stop_row(history, n_evaluations, perfect, tolerance):
    """The evaluated row at which a training with ``sparse.flat_map_evaluations`` =
    ``n_evaluations`` and ``sparse.stop_at_perfect_map`` = ``perfect`` would have stopped
    (the last row if it never would)."""
    evaluated = history.dropna(subset=["train_map_dot"]).reset_index(drop=True)
    maps = evaluated["train_map_dot"].tolist()
    for end in range(1, len(maps) + 1):
        if map_stop(maps[:end], n_evaluations, perfect, tolerance):
            return evaluated.iloc[end - 1]
    return evaluated.iloc[-1]


def evaluations(value):
    """A k of ``--evaluations``: an integer, or ``none`` (no flat stop)."""
    return None if value.lower() == "none" else int(value)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="the run's working directory")
    parser.add_argument("--evaluations", type=evaluations, nargs="+", default=[1, 2, 4])
    parser.add_argument("--perfect", action="store_true", help="also stop at the first training mAP of 1")
    parser.add_argument(
        "--tolerance", type=float, default=FLAT_MAP_TOLERANCE, help="mAP, as a fraction (1e-3 = 0.1 point)"
    )
    args = parser.parse_args()

    runs = trainings(args.run)
    total = sum(seconds for *_, seconds in runs)
    print(f"{len(runs)} trainings, {total:.0f} s of fit time as run")
    for k in args.evaluations:
        kept, changes = 0.0, []
        for tau, history, seconds in runs:
            stop, last = stop_row(history, k, args.perfect, args.tolerance), history.iloc[-1]
            kept += seconds * stop["iteration"] / max(last["iteration"], 1)
            if tau in TABLE2_TAUS:
                final = history.dropna(subset=["test_map_l2"]).iloc[-1]
                changes.append(100 * (stop["test_map_l2"] - final["test_map_l2"]))
        changes = pd.Series(changes)
        label = f"k = {k}, or perfect" if args.perfect else f"k = {k}"
        print(
            f"{label}: trainings {kept:.0f} s ({total - kept:.0f} s saved); Table II test mAP (L2) "
            f"at the stop minus at the end: mean {changes.mean():+.2f}, {changes.min():+.2f} to "
            f"{changes.max():+.2f} points, {(changes.abs() > 1).sum()} of {changes.size} cells beyond 1 point"
        )


if __name__ == "__main__":
    main()
