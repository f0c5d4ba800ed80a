"""Tables I and II, the ablation and cost tables, paper comparison columns and the
csv/md/tex writers."""

import os

import numpy as np
import pandas as pd
import pytest

from ndir import atomic
from ndir.report import (
    FULL_R,
    cost_table,
    format_dim,
    load_paper_table1,
    load_paper_table2,
    table1,
    table2,
    table2_ablation,
    write_table,
)


def long_results(cells):
    """Results frame from {(encoding, K): {R: map}}, dims as in the paper (80 per
    cluster for VLAD, 2 x 80 for FV)."""
    rows = [
        {
            "encoding": encoding,
            "K": K,
            "dim": K * 80 * (2 if encoding == "fv" else 1),
            "R": R,
            "map": value,
        }
        for (encoding, K), by_r in cells.items()
        for R, value in by_r.items()
    ]
    return pd.DataFrame(rows)


@pytest.fixture
def results():
    # Deliberately out of order: the table must sort VLAD before FV, then K.
    return long_results(
        {
            ("fv", 128): {64: 0.5, FULL_R: 0.9, 32: 0.25},
            ("vlad", 256): {32: 0.125, FULL_R: 0.8},
            ("fv", 64): {FULL_R: 0.7, 32: 0.1234, 64: 0.5678},
            ("vlad", 64): {64: 0.75, 32: 0.6, FULL_R: 0.8623},
        }
    )


def test_table1_layout_ordering_and_percent(results):
    table = table1(results)
    assert list(table.columns) == ["Sign.", "Dim.", "Full", "32", "64"]
    assert table["Sign."].tolist() == ["VLAD-64", "VLAD-256", "FV-64", "FV-128"]
    assert table["Dim."].tolist() == ["5k", "20k", "10k", "20k"]
    vlad64 = table.iloc[0]
    assert (vlad64["Full"], vlad64["32"], vlad64["64"]) == (86.23, 60.0, 75.0)
    fv64 = table.iloc[2]
    assert (fv64["32"], fv64["64"]) == (12.34, 56.78)
    assert np.isnan(table.iloc[1]["64"])  # VLAD-256 was not reduced to 64


@pytest.mark.parametrize(
    ("dim", "printed"),
    [
        (5120, "5k"),
        (10240, "10k"),
        (20480, "20k"),
        (40960, "41k"),
        (81920, "82k"),
        (1500, "2k"),
        (640, "640"),
    ],
)
def test_dims_are_printed_like_the_paper(dim, printed):
    assert format_dim(dim) == printed


def test_table1_with_paper_columns(results):
    paper = load_paper_table1()
    table = table1(results, paper=paper)
    assert list(table.columns[:8]) == [
        "Sign.",
        "Dim.",
        "Full",
        "Full (paper)",
        "Full (Δ)",
        "32",
        "32 (paper)",
        "32 (Δ)",
    ]
    vlad64 = table.set_index("Sign.").loc["VLAD-64"]
    # Paper VLAD-64: full 86.23, R=32 76.90, R=64 80.87.
    assert vlad64["Full (paper)"] == 86.23 and vlad64["Full (Δ)"] == 0.0
    assert vlad64["32 (paper)"] == 76.90 and vlad64["32 (Δ)"] == pytest.approx(-16.90)
    assert vlad64["64 (Δ)"] == pytest.approx(75.0 - 80.87)

    # A signature and an R the paper does not report get NaN in its columns.
    own = long_results({("vlad", 32): {FULL_R: 0.5, 16: 0.4}})
    table = table1(own, paper=paper)
    assert table[["Full (paper)", "Full (Δ)", "16 (paper)", "16 (Δ)"]].isna().to_numpy().all()
    assert table["Full"].tolist() == [50.0]


def test_paper_tables_match_the_text_of_the_paper():
    t1 = load_paper_table1().set_index("signature")
    t2 = load_paper_table2()
    assert len(t1) == 8 and len(t2) == 16
    # §V-B: "the best result being obtain with FV-256 (88.1% of mAP)".
    assert t1["full"].idxmax() == "FV-256" and t1.loc["FV-256", "full"] == 88.10
    # §V-D: FV-256 at R = 256 gives 86.38 with [9], 84.31 at τ = 90 %, 83.21 at
    # τ = 99 %, and 78.39 with 32 full projectors.
    assert t1.loc["FV-256", "R256"] == 86.38 and t1.loc["FV-256", "R32"] == 78.39
    fv256 = t2[t2["signature"] == "FV-256"].set_index("tau")["R256"]
    assert fv256[0.90] == 84.31 and fv256[0.99] == 83.21
    assert t1.loc["FV-512", "dim"] == "82k"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.drop(columns="dim"), "lack the columns"),
        (lambda r: r.assign(encoding="bow"), "unknown encodings"),
        (lambda r: r.assign(map=r["map"] * 100), "fraction"),
        (lambda r: pd.concat([r, r.iloc[:1]]), "several rows"),
        (lambda r: r.assign(dim=np.arange(len(r))), "several 'dim'"),
    ],
)
def test_table1_rejects_malformed_results(results, change, message):
    with pytest.raises(ValueError, match=message):
        table1(change(results))


def test_write_table_formats(tmp_path):
    df = pd.DataFrame(
        {
            "Sign.": ["VLAD-64", "FV_64"],
            "n": [3, 12],
            "mAP": [86.234, -0.001],
            "Δ": [np.nan, 1.5],
        }
    )
    paths = write_table(df, tmp_path / "sub" / "t", caption="mAP (%) & more")
    assert [p.name for p in paths] == ["t.csv", "t.md", "t.tex"]

    assert paths[0].read_bytes() == ("Sign.,n,mAP,Δ\nVLAD-64,3,86.23,\nFV_64,12,0.00,1.50\n".encode())
    assert pd.read_csv(paths[0])["mAP"].tolist() == [86.23, 0.0]

    markdown = paths[1].read_text(encoding="utf-8")
    assert markdown.startswith("mAP (%) & more\n\n| Sign.")
    assert "|:--------|----:|------:|-----:|" in markdown  # text left, numbers right
    assert "| VLAD-64 |   3 | 86.23 |      |" in markdown

    latex = paths[2].read_text(encoding="utf-8")
    assert r"\caption{mAP (\%) \& more}" in latex
    assert r"\begin{tabular}{lrrr}" in latex
    assert r"Sign. & n & mAP & $\Delta$ \\" in latex
    assert r"VLAD-64 & 3 & 86.23 & -- \\" in latex
    assert r"FV\_64 & 12 & 0.00 & 1.50 \\" in latex
    for rule in (r"\toprule", r"\midrule", r"\bottomrule", r"\end{table}"):
        assert rule in latex
    assert sorted(os.listdir(tmp_path / "sub")) == ["t.csv", "t.md", "t.tex"]


def test_write_table_prints_intervals_in_markdown_only(tmp_path):
    df = pd.DataFrame({"Sign.": ["VLAD-64", "FV-64"], "32": [63.97, 65.91], "64": [68.73, np.nan]})
    low = pd.DataFrame({"Sign.": ["VLAD-64", "FV-64"], "32": [55.04, 58.0], "64": [60.0, np.nan]})
    high = low.assign(**{"32": [71.96, 73.0], "64": [76.0, np.nan]})
    csv, markdown, latex = write_table(df, tmp_path / "t", intervals=(low, high))
    lines = markdown.read_text(encoding="utf-8").splitlines()
    assert lines[2].split("|")[1:4] == [" VLAD-64 ", " 63.97 [55.0, 72.0] ", " 68.73 [60.0, 76.0] "]
    assert "65.91 [58.0, 73.0]" in lines[3] and "[" not in lines[3].split("|")[3]
    assert csv.read_text() == "Sign.,32,64\nVLAD-64,63.97,68.73\nFV-64,65.91,\n"
    assert "[" not in latex.read_text()


def test_write_table_is_byte_identical_for_the_same_input(results, tmp_path):
    table = table1(results, paper=load_paper_table1())
    first = [p.read_bytes() for p in write_table(table, tmp_path / "a")]
    second = [p.read_bytes() for p in write_table(table.copy(), tmp_path / "b")]
    assert first == second
    assert b"Full (paper)" in first[0] and "Full (Δ)".encode() in first[0]


def test_failed_write_keeps_the_old_table_and_no_temporary(tmp_path, monkeypatch):
    old = pd.DataFrame({"a": [1.0]})
    write_table(old, tmp_path / "t")
    before = (tmp_path / "t.csv").read_bytes()

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        write_table(pd.DataFrame({"a": [2.0]}), tmp_path / "t")
    assert (tmp_path / "t.csv").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["t.csv", "t.md", "t.tex"]


# --------------------------------------------------------------------------- Table II


def training_runs(rows, **extra):
    """Run frame from (encoding, K, R, tau, final) tuples, plus constant ``extra`` columns."""
    keys = ["encoding", "K", "R", "tau", "final"]
    return pd.DataFrame([dict(zip(keys, row)) | extra for row in rows])


def test_table2_with_paper_columns_hand_worked():
    """One column per (tau, R), tau then R increasing, labelled like the paper's groups;
    rows VLAD then FV; mAP in %; "(paper)" the transcribed Table II cell and "(Δ)"
    ours − paper rounded to 2 decimals; NaN where the paper (or we) have no value.
    Paper cells (src/ndir/reference/paper_table2.csv): FV-256 τ = 90 % R = 256: 84.31;
    FV-256 τ = 99 % R = 32: 72.73; VLAD-64 τ = 99 % R = 32: 70.36; VLAD-64 τ = 90 %
    R = 256: 82.97."""
    maps = training_runs(
        [
            ("fv", 256, 256, 0.9, 0.85),
            ("fv", 256, 32, 0.99, 0.7),
            ("vlad", 64, 32, 0.99, 0.70123),
            ("vlad", 32, 16, 0.9, 0.5),  # neither the signature nor R = 16 is in the paper
        ]
    )
    table = table2(maps, paper=load_paper_table2())
    assert table["Sign."].tolist() == ["VLAD-32", "VLAD-64", "FV-256"]
    assert list(table.columns) == [
        "Sign.",
        *[f"{c}{s}" for c in ("90% R16", "90% R256", "99% R32") for s in ("", " (paper)", " (Δ)")],
    ]
    rows = table.set_index("Sign.")
    fv256, vlad64, vlad32 = rows.loc["FV-256"], rows.loc["VLAD-64"], rows.loc["VLAD-32"]
    assert fv256["90% R256"] == 85.0 and fv256["90% R256 (paper)"] == 84.31
    assert fv256["90% R256 (Δ)"] == pytest.approx(0.69, abs=1e-12)
    assert fv256["99% R32"] == 70.0 and fv256["99% R32 (paper)"] == 72.73
    assert fv256["99% R32 (Δ)"] == pytest.approx(-2.73, abs=1e-12)
    # 70.123 % is printed 70.12, and Δ is taken on the printed value: 70.12 − 70.36.
    assert vlad64["99% R32"] == 70.12 and vlad64["99% R32 (Δ)"] == pytest.approx(-0.24, abs=1e-12)
    # Not measured: our cell and Δ are NaN, the paper's value is still shown.
    assert np.isnan(vlad64["90% R256"]) and np.isnan(vlad64["90% R256 (Δ)"])
    assert vlad64["90% R256 (paper)"] == 82.97
    # R = 16 and VLAD-32 are not in the paper.
    assert vlad32["90% R16"] == 50.0
    assert rows[["90% R16 (paper)", "90% R16 (Δ)"]].isna().to_numpy().all()
    assert np.isnan(vlad32["99% R32 (paper)"]) and np.isnan(vlad32["90% R256 (paper)"])
    # Without the paper, only the measured columns.
    assert list(table2(maps).columns) == ["Sign.", "90% R16", "90% R256", "99% R32"]


def test_table2_ablation_gain_is_learned_minus_thresholded_pca():
    """One row per (signature, tau, R), VLAD then FV, then tau and R increasing: the
    thresholded PCA (``initial``) and learned (``final``) test mAP in %, Gain = Learned
    − Thresholded PCA, the same scored by dot product, then the training mAP at the
    start and end. The three inputs are given in different row orders: they are
    matched on (signature, R, tau), not by position."""

    def runs(rows):
        keys = ["signature", "encoding", "K", "R", "tau", "initial", "final"]
        return pd.DataFrame([dict(zip(keys, row)) for row in rows])

    l2 = runs(
        [
            ("fv-64", "fv", 64, 32, 0.99, 0.5, 0.6),
            ("vlad-64", "vlad", 64, 64, 0.9, 0.7, 0.65),
            ("fv-64", "fv", 64, 32, 0.9, 0.55, 0.5834),
        ]
    )
    dot = runs(
        [
            ("vlad-64", "vlad", 64, 64, 0.9, 0.6, 0.7),
            ("fv-64", "fv", 64, 32, 0.9, 0.5, 0.5),
            ("fv-64", "fv", 64, 32, 0.99, 0.4, 0.45),
        ]
    )
    train = runs(
        [
            ("fv-64", "fv", 64, 32, 0.9, 0.1, 0.95),
            ("fv-64", "fv", 64, 32, 0.99, 0.3, 0.9),
            ("vlad-64", "vlad", 64, 64, 0.9, 0.2, 0.8),
        ]
    )
    table = table2_ablation(l2, dot, train)
    assert list(table.columns) == [
        "Sign.",
        "τ",
        "R",
        "Thresholded PCA",
        "Learned",
        "Gain",
        "Thresholded PCA (dot)",
        "Learned (dot)",
        "Gain (dot)",
        "Train start (dot)",
        "Train end (dot)",
    ]
    assert table[["Sign.", "τ", "R"]].values.tolist() == [
        ["VLAD-64", "90%", 64],
        ["FV-64", "90%", 32],
        ["FV-64", "99%", 32],
    ]
    expected = [
        # PCA, learned, gain, PCA dot, learned dot, gain dot, train start, train end
        [70.0, 65.0, -5.0, 60.0, 70.0, 10.0, 20.0, 80.0],
        [55.0, 58.34, 3.34, 50.0, 50.0, 0.0, 10.0, 95.0],
        [50.0, 60.0, 10.0, 40.0, 45.0, 5.0, 30.0, 90.0],
    ]
    np.testing.assert_allclose(table.iloc[:, 3:].to_numpy(float), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(table["Gain"], table["Learned"] - table["Thresholded PCA"], atol=1e-12)


def test_cost_table_units_hand_worked():
    """Bytes to KiB (/ 1024), seconds to µs (x 1e6), tau as "90%", mAP in %, rows
    sorted by tau then R whatever the input order. Costs of D = 1000: R = 32 at
    tau = 0.99 keeps 10 entries a column, nnz = 320: dense 4 D R = 128,000 B = 125 KiB,
    CSC 8 nnz + 4 (R + 1) = 2692 B; R = 64 at tau = 0.9: nnz = 6400, 256,000 B = 250
    KiB dense, 51,460 B CSC; R = 32 at tau = 0.9: nnz = 3200, 25,732 B."""

    def row(R, tau, nnz, single_dense, single_sparse, test_map):
        dense, sparse = 4 * 1000 * R, 8 * nnz + 4 * (R + 1)
        return {
            "R": R,
            "tau": tau,
            "nnz": nnz,
            "bytes_dense": dense,
            "bytes_sparse": sparse,
            "storage_ratio": dense / sparse,
            "madds_dense": 1000 * R,
            "madds_sparse": nnz,
            "equivalent_full_projectors": nnz / 1000,
            "single_dense_s": single_dense,
            "single_sparse_s": single_sparse,
            "single_speedup": single_dense / single_sparse,
            "batch_dense_s": 100 * single_dense,
            "batch_sparse_s": 50 * single_sparse,
            "batch_speedup": 2 * single_dense / single_sparse,
            "test_map": test_map,
        }

    costs = pd.DataFrame(
        [
            row(64, 0.9, 6400, 4e-6, 2e-6, 0.81234),
            row(32, 0.99, 320, 2e-6, 0.5e-6, 0.72),
            row(32, 0.9, 3200, 2e-6, 1e-6, 0.7777),
        ],
        index=[7, 3, 5],  # the output is re-indexed from 0
    )
    table = cost_table(costs, "fv-256")
    assert table.index.tolist() == [0, 1, 2]
    assert table["Signature"].tolist() == ["fv-256"] * 3
    assert table["R"].tolist() == [32, 64, 32] and table["τ"].tolist() == ["90%", "90%", "99%"]
    assert table["Non-zeros"].tolist() == [3200, 6400, 320]
    np.testing.assert_allclose(table["Dense KiB"], [125.0, 250.0, 125.0])
    np.testing.assert_allclose(table["CSC KiB"], [25732 / 1024, 51460 / 1024, 2692 / 1024])
    np.testing.assert_allclose(table["Storage ratio"], [128000 / 25732, 256000 / 51460, 128000 / 2692])
    assert table["Madds dense"].tolist() == [32000, 64000, 32000]
    assert table["Madds sparse"].tolist() == [3200, 6400, 320]
    np.testing.assert_allclose(table["Full projectors eq."], [3.2, 6.4, 0.32])
    np.testing.assert_allclose(table["One image dense µs"], [2.0, 4.0, 2.0])
    np.testing.assert_allclose(table["One image sparse µs"], [1.0, 2.0, 0.5])
    np.testing.assert_allclose(table["One image speed-up"], [2.0, 2.0, 4.0])
    np.testing.assert_allclose(table["Batch dense µs"], [200.0, 400.0, 200.0])
    np.testing.assert_allclose(table["Batch sparse µs"], [50.0, 100.0, 25.0])
    np.testing.assert_allclose(table["Batch speed-up"], [4.0, 4.0, 8.0])
    assert table["Test mAP"].tolist() == [77.77, 81.23, 72.0]
