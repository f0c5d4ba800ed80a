"""benchmarks/table2_spread.py on the tiny run: its CSV, and the run's seed giving Table II."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from .conftest import REPO, benchmark_script

pytestmark = pytest.mark.workflow

SCRIPT = REPO / "benchmarks" / "table2_spread.py"


def test_spread_of_every_table2_cell_and_the_runs_seed_gives_table2(tiny_run, tmp_path):
    out = tmp_path / "spread"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--run", str(tiny_run), "--seeds", "2", "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    spread = pd.read_csv(out.with_suffix(".csv"))
    assert list(spread.columns) == ["signature", "R", "tau", "n_seeds", "mean", "sd", "min", "max", "run_seed"]
    assert (spread["n_seeds"] == 2).all()
    assert (spread["min"] <= spread["mean"]).all() and (spread["mean"] <= spread["max"]).all()
    assert out.with_suffix(".md").read_text().startswith("| signature")
    # Table II's cell "90% R8" of row "VLAD-4" is signature vlad-4, tau 0.9, R 8.
    table2 = pd.read_csv(tiny_run / "results/tables/table2.csv").set_index("Sign.")
    assert len(spread) == table2.size
    for row in spread.itertuples():
        cell = table2.loc[row.signature.upper(), f"{round(100 * row.tau)}% R{row.R}"]
        assert round(row.run_seed, 2) == cell

    differences = tmp_path / "differences"
    compared = subprocess.run(
        [sys.executable, str(SCRIPT), "--compare", str(out.with_suffix(".csv")), str(out.with_suffix(".csv"))]
        + ["--out", str(differences)],
        check=True,
        capture_output=True,
        text=True,
    )
    assert f"0 of {len(spread)} cells differ" in compared.stdout
    assert (pd.read_csv(differences.with_suffix(".csv"))["run_seed_diff"] == 0).all()


def test_compare_counts_the_accuracy_guard_cell_by_cell(tmp_path):
    """Issue 48's guard, counted by hand on three cells: the second run's seed inside
    the first's range at two decimals (0.004 above it), outside it by 0.5 point, and
    far above it with the seeds' means apart."""
    script = benchmark_script("table2_spread")
    cells = {"signature": ["vlad-64"] * 3, "R": [32, 64, 128], "tau": [0.9] * 3, "n_seeds": [5] * 3}
    first = pd.DataFrame(
        {**cells, "mean": [90.0, 91.0, 92.0], "sd": [1.0, 0.5, 0.1], "min": [89.0, 90.5, 91.9]}
        | {"max": [91.0, 91.5, 92.1], "run_seed": [90.0, 91.0, 92.0]}
    )
    second = pd.DataFrame(
        {**cells, "mean": [90.5, 91.2, 95.0], "sd": [1.0, 0.5, 0.1], "min": [89.5, 91.0, 94.9]}
        | {"max": [91.5, 92.0, 95.1], "run_seed": [91.004, 92.0, 95.0]}
    )
    paths = tmp_path / "a.csv", tmp_path / "b.csv"
    first.to_csv(paths[0], index=False)
    second.to_csv(paths[1], index=False)
    differences = script.compare(*paths)
    assert differences["outside_a_by"].round(6).tolist() == [0.0, 0.5, 2.9]
    assert differences["ranges_overlap"].tolist() == [True, True, False]
    # (90.5 - 90) / sqrt(1/5 + 1/5), (91.2 - 91) / sqrt(0.25/5 + 0.25/5), (95 - 92) / sqrt(0.01/5 + 0.01/5)
    expected_t = [0.5 / np.sqrt(0.4), 0.2 / np.sqrt(0.1), 3.0 / np.sqrt(0.004)]
    assert differences["welch_t"].tolist() == pytest.approx(expected_t)
    lines = script.summary(differences).splitlines()
    # All three moved: each inside 5 draws' range with probability 4/6.
    assert "inside A's seed range in 1 of 3 cells (2.0 expected if the cells that moved only drew again;" in lines[1]
    assert "outside by at most 2.90 points" in lines[1]
    assert "seed ranges overlap in 2;" in lines[1]
    assert "means apart at 5 % (Welch's t) in 1 (0.2 expected by chance)" in lines[1]
    assert "mean difference of the means +1.23 points" in lines[1]


def test_compare_gives_a_t_of_zero_to_cells_without_spread(tmp_path):
    script = benchmark_script("table2_spread")
    same = pd.DataFrame(
        {"signature": ["fv-64"], "R": [32], "tau": [0.99], "n_seeds": [5], "mean": [93.0], "sd": [0.0]}
        | {"min": [93.0], "max": [93.0], "run_seed": [93.0]}
    )
    path = tmp_path / "same.csv"
    same.to_csv(path, index=False)
    differences = script.compare(path, path)
    assert differences["welch_t"].tolist() == [0.0]
    assert "in 1 of 1 cells (1.0 expected" in script.summary(differences)
