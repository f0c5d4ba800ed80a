"""benchmarks/seeds_spread.py on the tiny run: the run's seed reproduces its records, and
the spread table of the other seeds' rows."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from .conftest import REPO, benchmark_script

pytestmark = pytest.mark.workflow

SCRIPT = REPO / "benchmarks" / "seeds_spread.py"


def test_the_runs_seed_recomputed_gives_the_runs_records(tiny_run, tmp_path, monkeypatch):
    """What the script reads for the run's seed instead of recomputing it is what it
    would recompute: the vocabulary, the word counts and the three learners are
    deterministic given the seed."""
    script = benchmark_script("seeds_spread")
    config = script.run_config(tiny_run)
    monkeypatch.chdir(tiny_run)
    recomputed = script.recompute(tiny_run, config, config["seed"], 2, tmp_path)
    assert recomputed == script.run_records(tiny_run, config)
    assert {method for method, _, _ in recomputed} >= {"tf-idf", "sparse similarity matrix", "SOML-TG"}
    # The models too, not only their scores.
    results = tiny_run / "results"
    models = {
        "vocabulary.npz": results / "codebooks" / "vocabulary.npz",
        "bovw.npz": results / "signatures" / "bovw.npz",
        "sm.npz": results / "seeds" / "similarity_matrix.npz",
        **{
            f"soml-{variant}-{name}.npz": results / "seeds" / f"soml-{variant}" / f"{name}.npz"
            for variant, name in script.soml_runs(config)
        },
    }
    for written, expected in models.items():
        with np.load(tmp_path / written) as ours, np.load(expected) as theirs:
            assert ours.files == theirs.files, written
            for key in ours.files:
                np.testing.assert_array_equal(ours[key], theirs[key], err_msg=f"{written}: {key}")


def test_spread_of_the_seeds_rows(tiny_run, tmp_path):
    out = tmp_path / "spread"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--run", str(tiny_run), "--seeds", "2", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = pd.read_csv(out.with_suffix(".csv"))
    assert list(table.columns) == ["method", "input", "n_seeds", "mean", "sd", "min", "max", "run_seed"]
    assert (table["n_seeds"] == 2).all()
    assert (table["min"] <= table["run_seed"]).all() and (table["run_seed"] <= table["max"]).all()
    script = benchmark_script("seeds_spread")
    own = pd.DataFrame(script.run_records(tiny_run, script.run_config(tiny_run)), columns=["m", "i", "v"])
    assert table["run_seed"].tolist() == own["v"].tolist()
    # The vocabulary's k-means start moves the bag of words: tf-idf differs between seeds.
    tfidf = table[table["method"] == "tf-idf"].iloc[0]
    assert tfidf["max"] > tfidf["min"]
