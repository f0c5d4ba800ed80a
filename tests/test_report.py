"""Table I layout, paper comparison columns and the csv/md/tex writers."""

import os

import numpy as np
import pandas as pd
import pytest

from ndir import report
from ndir.report import (
    FULL_R,
    format_dim,
    load_paper_table1,
    load_paper_table2,
    table1,
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
    assert (
        table[["Full (paper)", "Full (Δ)", "16 (paper)", "16 (Δ)"]]
        .isna()
        .to_numpy()
        .all()
    )
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

    assert paths[0].read_bytes() == (
        "Sign.,n,mAP,Δ\nVLAD-64,3,86.23,\nFV_64,12,0.00,1.50\n".encode()
    )
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

    monkeypatch.setattr(report.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        write_table(pd.DataFrame({"a": [2.0]}), tmp_path / "t")
    assert (tmp_path / "t.csv").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["t.csv", "t.md", "t.tex"]
