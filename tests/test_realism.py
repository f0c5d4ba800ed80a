"""The realism report (ndir.realism, benchmarks/data_realism.py) against independent computations."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from sklearn.decomposition import PCA
from sklearn.random_projection import GaussianRandomProjection, SparseRandomProjection

from ndir.evaluation import holidays_map
from ndir.realism import TARGETS, check_targets, reduction_maps
from ndir.stages.common import split_signatures

from .conftest import REPO


def holidays(Y, groups, is_query):
    """mAP (%) of the rows L2-normalised: ndir's Holidays mAP (tested on hand-worked
    cases in test_evaluation.py) on reductions computed here independently."""
    Y = np.asarray(Y, dtype=np.float64)
    Y = Y / np.maximum(np.linalg.norm(Y, axis=1, keepdims=True), 1e-30)
    return 100 * holidays_map(Y, groups, is_query)


def thresholded(components, tau):
    """Keep the round((1 - tau) D) largest |entries| of each column, rescaled to unit norm."""
    D = components.shape[0]
    keep = max(1, int(round((1 - tau) * D)))
    out = np.zeros_like(components)
    for r in range(components.shape[1]):
        top = np.argsort(-np.abs(components[:, r]), kind="stable")[:keep]
        out[top, r] = components[top, r] / np.linalg.norm(components[top, r])
    return out


@pytest.fixture(scope="module")
def synthetic_splits():
    """Clustered signatures: 12 training and 12 test groups of 3, D = 300."""
    rng = np.random.default_rng(0)

    def split(n_groups):
        centres = rng.standard_normal((n_groups, 300))
        X = np.repeat(centres, 3, axis=0) + 0.8 * rng.standard_normal((3 * n_groups, 300))
        X = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)
        groups = np.repeat(np.arange(n_groups), 3)
        return X, groups, np.tile([True, False, False], n_groups)

    return {"train": split(12), "test": split(12)}


def test_reduction_maps_against_scikit_learn_and_numpy(synthetic_splits):
    table = reduction_maps(synthetic_splits, dims=(4, 8, 40), sparsities=(0.9,), seeds=(0, 1))
    assert table["R"].tolist() == [4, 8]  # 40 is beyond the 36 training images' rank
    X_train, _, _ = synthetic_splits["train"]
    X_test, groups, is_query = synthetic_splits["test"]
    for row in table.itertuples():
        R = row.R
        pca = PCA(R, svd_solver="full").fit(X_train)
        expected = {
            "full": holidays(X_test, groups, is_query),
            "pca": holidays(pca.transform(X_test), groups, is_query),
            "pca_whitened": holidays(PCA(R, whiten=True).fit(X_train).transform(X_test), groups, is_query),
            "pca_oracle": holidays(PCA(R).fit(X_test).transform(X_test), groups, is_query),
            # No centring: the sparse projector's start projects the signatures as they are.
            "pca_thresholded_0.9": holidays(X_test @ thresholded(pca.components_.T, 0.9), groups, is_query),
            "gaussian": np.mean(
                [
                    holidays(
                        X_test @ GaussianRandomProjection(R, random_state=s).fit(X_train).components_.T,
                        groups,
                        is_query,
                    )
                    for s in (0, 1)
                ]
            ),
            "sparse_random_0.9": np.mean(
                [
                    holidays(
                        X_test
                        @ SparseRandomProjection(R, density=0.1, random_state=s).fit(X_train).components_.T.toarray(),
                        groups,
                        is_query,
                    )
                    for s in (0, 1)
                ]
            ),
        }
        for column, value in expected.items():
            # float32 against float64 reductions: equal up to near-tied scores.
            assert table.loc[table["R"] == R, column].item() == pytest.approx(value, abs=0.05), (R, column)
    np.testing.assert_allclose(table["pca_minus_full"], table["pca"] - table["full"])
    np.testing.assert_allclose(table["pca_minus_gaussian"], table["pca"] - table["gaussian"])
    np.testing.assert_allclose(table["pca_minus_thresholded_0.9"], table["pca"] - table["pca_thresholded_0.9"])


@pytest.mark.workflow
def test_data_realism_report_on_the_tiny_run(tiny_run, tmp_path):
    """benchmarks/data_realism.py on the tiny run: one row per signature and R, the
    PCA and whitened-PCA columns as scikit-learn's PCA gives them on the run's own
    signatures and split, and the targets listed for no signature of the tiny grid
    (its K are 4 and 8, not 64)."""
    out = tmp_path / "realism"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks/data_realism.py"),
            "--run",
            str(tiny_run),
            "--dims",
            "4",
            "8",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "pca_minus_full" in result.stdout and "Targets" not in result.stdout
    table = pd.read_csv(out.with_suffix(".csv"))
    assert sorted(set(table["signature"])) == ["fv-4", "fv-8", "vlad-4", "vlad-8"]
    assert table.groupby("signature")["R"].apply(list).map(lambda r: r == [4, 8]).all()
    assert out.with_suffix(".md").read_text().startswith("Test mAP %")
    for row in table.itertuples():
        splits = split_signatures(
            tiny_run / "results/data/images.csv", tiny_run / f"results/signatures/{row.signature}.npy"
        )
        X_train = splits["train"][0]
        X_test, groups, is_query = splits["test"]
        assert row.full == pytest.approx(holidays(X_test, groups, is_query), abs=0.05)
        assert row.pca == pytest.approx(holidays(PCA(row.R).fit(X_train).transform(X_test), groups, is_query), abs=0.05)
        whitened = PCA(row.R, whiten=True).fit(X_train).transform(X_test)
        assert row.pca_whitened == pytest.approx(holidays(whitened, groups, is_query), abs=0.05)


def test_check_targets_reads_each_target_at_its_R():
    """Hand-made figures: every target met, then each broken alone."""
    table = pd.DataFrame(
        {
            "R": [32, 256],
            "full": [90.0, 90.0],
            "pca_minus_full": [-5.0, -1.0],
            "pca_minus_thresholded_0.99": [2.0, 0.0],
            "pca_minus_gaussian": [20.0, 0.0],
        }
    )
    assert check_targets(table)["met"].all()
    assert list(check_targets(table)["target"]) == list(TARGETS)
    for column, R, bad in [
        ("full", 32, 97.0),
        ("pca_minus_full", 32, -13.0),
        ("pca_minus_full", 32, -1.0),
        ("pca_minus_full", 256, -7.0),
        ("pca_minus_thresholded_0.99", 32, -0.5),
        ("pca_minus_gaussian", 32, 9.0),
    ]:
        broken = table.copy()
        broken.loc[broken["R"] == R, column] = bad
        assert check_targets(broken)["met"].sum() == len(TARGETS) - 1, (column, R, bad)
    assert not check_targets(table[table["R"] == 32])["met"].all()  # R = 256 missing: NaN, not met


def test_the_oracle_keeps_the_workflows_pca_margin_on_the_test_split(synthetic_splits):
    """R <= N_test - 2 gets a test-fitted PCA, R = N_test - 1 (the centred rank) a NaN:
    the boundary of the docstring, as the workflow's R <= N - 2 for training."""
    X_test, groups, is_query = synthetic_splits["test"]
    splits = {"train": synthetic_splits["train"], "test": (X_test[:12], groups[:12], is_query[:12])}
    table = reduction_maps(splits, dims=(10, 11), sparsities=(0.9,), seeds=(0,)).set_index("R")
    assert np.isfinite(table.loc[10, "pca_oracle"]) and np.isnan(table.loc[11, "pca_oracle"])
    assert list(reduction_maps(splits, dims=(34, 35), sparsities=(0.9,), seeds=(0,))["R"]) == [34]
