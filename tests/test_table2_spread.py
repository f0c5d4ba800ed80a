"""benchmarks/table2_spread.py on the tiny run: its CSV, and the run's seed giving Table II."""

import subprocess
import sys

import pandas as pd
import pytest

from .conftest import REPO

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
