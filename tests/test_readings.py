"""The readings of the paper's findings (ndir.readings, ndir.stages.readings): the paired
bootstrap against a NumPy computation and hand-worked cases, Holm's correction by hand,
each verdict on hand-made runs, and on the tiny run the table with every finding, its
recomputed means equal to Tables I and II."""

import numpy as np
import pandas as pd
import pytest

from ndir import readings
from ndir.readings import (
    AGAINST,
    DOES_NOT_HOLD,
    FINDINGS,
    FOR,
    HOLDS,
    NOT_SETTLED,
    PAPER_FINDINGS,
    WITHIN,
    Run,
    holm,
    outcome,
    paired_bootstrap,
    read,
    readings_table,
    verdict,
)

FINDING = {finding.key: finding for finding in FINDINGS + PAPER_FINDINGS}


def brute_force(a, b, n_resamples, seed, level=0.95):
    """The paired bootstrap written out: one draw of query indices per resample, the
    same for A and B, and the mean of the differences over it."""
    rng = np.random.default_rng(seed)
    d = np.asarray(a, float) - np.asarray(b, float)
    means = np.array([d[rng.integers(0, d.size, size=d.size)].mean() for _ in range(n_resamples)])
    low, high = np.percentile(means, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    below = (np.sum(means <= 0) + 1) / (n_resamples + 1)
    above = (np.sum(means >= 0) + 1) / (n_resamples + 1)
    return d.mean(), low, high, min(1.0, 2 * min(below, above))


# --------------------------------------------------------------------------- the bootstrap


def test_paired_bootstrap_equals_the_computation_written_out():
    rng = np.random.default_rng(3)
    a = rng.uniform(size=23)
    b = np.clip(a + rng.normal(0.02, 0.1, size=23), 0, 1)
    test = paired_bootstrap(a, b, n_resamples=500, seed=11)
    assert (test.difference, test.low, test.high, test.p_value) == pytest.approx(brute_force(a, b, 500, 11))


def test_paired_bootstrap_draws_the_same_resamples_in_blocks(monkeypatch):
    rng = np.random.default_rng(4)
    a, b = rng.uniform(size=30), rng.uniform(size=30)
    whole = paired_bootstrap(a, b, n_resamples=1000, seed=2)
    monkeypatch.setattr(readings, "_RESAMPLE_BLOCK", 7 * 30 + 5)  # blocks of 7 resamples
    assert paired_bootstrap(a, b, n_resamples=1000, seed=2) == whole


def test_the_interval_of_a_shift_shared_by_every_query_is_that_shift():
    """Paired: B = A + 0.01 on queries of very different difficulty gives exactly 0.01
    (an unpaired bootstrap would give an interval tens of points wide), p at its floor."""
    base = np.linspace(0.05, 0.95, 40)
    test = paired_bootstrap(base + 0.01, base, n_resamples=999, seed=0)
    assert test.difference == pytest.approx(0.01)
    assert test.low == pytest.approx(0.01) and test.high == pytest.approx(0.01)
    assert test.p_value == pytest.approx(2 / 1000)
    assert paired_bootstrap(base, base + 0.01, n_resamples=999, seed=0).difference == pytest.approx(-0.01)


def test_two_queries_by_hand():
    """Differences (1, 0): a resample's mean is 0, 1/2 or 1 with chances 1/4, 1/2, 1/4;
    so the 95 % interval is [0, 1] and the two-sided p about 2 x 1/4."""
    test = paired_bootstrap([1.0, 0.5], [0.0, 0.5], n_resamples=100_000, seed=1)
    assert test.difference == 0.5
    assert (test.low, test.high) == (0.0, 1.0)
    assert test.p_value == pytest.approx(0.5, abs=0.01)


def test_equal_values_are_not_different():
    test = paired_bootstrap([0.3, 0.7, 1.0], [0.3, 0.7, 1.0], n_resamples=200, seed=0)
    assert (test.difference, test.low, test.high, test.p_value) == (0.0, 0.0, 0.0, 1.0)


def test_paired_bootstrap_refuses_unpaired_values():
    with pytest.raises(ValueError, match="same queries"):
        paired_bootstrap([0.1, 0.2], [0.1, 0.2, 0.3])


# --------------------------------------------------------------------------- multiplicity, verdicts


def test_holm_by_hand():
    # Sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> 0.06 (monotone).
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert holm([0.02]) == pytest.approx([0.02])
    assert holm([]).size == 0


def test_outcome_of_a_cell():
    assert outcome(0.1, 0.049) == FOR
    assert outcome(-0.1, 0.049) == AGAINST
    assert outcome(0.1, 0.05) == WITHIN
    assert outcome(0.0, 0.0) == WITHIN


def test_verdict_rule():
    assert verdict([FOR, FOR, WITHIN]) == HOLDS
    assert verdict([FOR, WITHIN]) == NOT_SETTLED  # half is not more than half
    assert verdict([FOR, WITHIN, WITHIN]) == NOT_SETTLED
    assert verdict([FOR, FOR, FOR, AGAINST]) == DOES_NOT_HOLD
    assert verdict([]) == NOT_SETTLED


# --------------------------------------------------------------------------- findings on hand-made runs


def table2_run(learned_minus_pca, noise=0.0, n_queries=40, seed=0):
    """Two signatures at R = 8, 16 and tau = 0.9, 0.99: PCA's per-query APs spread over
    [0.2, 0.9]; every learned projector = PCA + ``learned_minus_pca`` (+ noise per query)."""
    rng = np.random.default_rng(seed)
    base = np.linspace(0.2, 0.9, n_queries)
    run = Run(table1_dims=(8, 16))
    for signature in ("vlad-4", "fv-4"):
        run.full[signature] = np.minimum(base + 0.05, 1)
        for R in (8, 16):
            run.pca[signature, R] = base
            for tau in (0.9, 0.99):
                run.learned[signature, tau, R] = base + learned_minus_pca + noise * rng.standard_normal(n_queries)
                run.start[signature, tau, R] = base - 0.1
    return run


def test_pca_above_learned_holds_does_not_hold_or_is_not_settled():
    finding = FINDING["table2_pca_above_learned"]
    below = read(finding, table2_run(-0.05), n_resamples=2000)
    assert below.verdict == HOLDS
    assert (
        below.counts
        == "PCA above learned beyond the interval in 8 of 8 cells, below in 0, 0 within (Holm over the 8 cells)"
    )
    above = read(finding, table2_run(+0.05), n_resamples=2000)
    assert above.verdict == DOES_NOT_HOLD
    assert above.counts.startswith("PCA above learned beyond the interval in 0 of 8 cells, below in 8, 0 within")
    noise = read(finding, table2_run(0.0, noise=0.01), n_resamples=2000)
    assert noise.verdict == NOT_SETTLED
    assert {row["outcome"] for row in noise.rows} == {WITHIN}
    cell = noise.rows[0]
    assert cell["low"] < cell["difference"] < cell["high"] and cell["low"] < 0 < cell["high"]


def test_one_cell_against_among_many_for_does_not_hold():
    run = table2_run(+0.05)
    run.learned["fv-4", 0.99, 16] = run.pca["fv-4", 16] - 0.05
    reading = read(FINDING["fig4_learning_raises_test_map"], run, n_resamples=2000)
    assert reading.verdict == HOLDS  # learned = PCA - 0.05 is still above its start (PCA - 0.1)
    reading = read(FINDING["table2_pca_above_learned"], run, n_resamples=2000)
    assert reading.verdict == DOES_NOT_HOLD
    assert [row["outcome"] for row in reading.rows].count(FOR) == 1


def test_holm_keeps_a_weak_cell_within_among_many():
    """A difference whose own p passes 0.05 alone, not once Holm multiplies it by the 8
    cells of its finding (the 7 others equal: p = 1)."""
    rng = np.random.default_rng(5)
    run = table2_run(0.0)
    noise = rng.normal(0.0, 0.02, size=40)
    run.learned["fv-4", 0.99, 16] = run.pca["fv-4", 16] - 0.007 + noise - noise.mean()
    alone = paired_bootstrap(run.pca["fv-4", 16], run.learned["fv-4", 0.99, 16], 2000, 0)
    assert 0.05 / 8 < alone.p_value < 0.05 and alone.low > 0
    reading = read(FINDING["table2_pca_above_learned"], run, n_resamples=2000)
    row = next(row for row in reading.rows if row["cell"] == "FV-4 τ=99% R=16")
    assert row["p_value"] == pytest.approx(alone.p_value)
    assert row["holm_p"] == pytest.approx(8 * alone.p_value)
    assert row["outcome"] == WITHIN and reading.verdict == NOT_SETTLED


def test_cells_of_the_table_ii_findings():
    run = table2_run(-0.05)
    cells = {key: [cell.name for cell in FINDING[key].cells(run)] for key in FINDING if not key.startswith("paper")}
    assert cells["table2_lower_tau_above"] == ["VLAD-4 R=8: τ=90% vs τ=99%", "VLAD-4 R=16: τ=90% vs τ=99%",
                                               "FV-4 R=8: τ=90% vs τ=99%", "FV-4 R=16: τ=90% vs τ=99%"]  # fmt: skip
    assert cells["table2_rises_with_R"][0] == "VLAD-4 τ=90%: R=16 vs R=8"
    assert cells["table1_best_at_largest_R"] == ["VLAD-4 R=16 vs R=8", "FV-4 R=16 vs R=8"]
    assert cells["table1_fv_above_vlad"] == ["K=4"]
    assert cells["fig4_gain_largest_at_smallest_R"][0] == "VLAD-4 τ=90%: R=8 vs R=16"
    # Nothing measured: not settled, and says why.
    assert cells["seed002_similarity_matrix_above_tfidf"] == []
    reading = read(FINDING["seed002_similarity_matrix_above_tfidf"], run)
    assert reading.verdict == NOT_SETTLED and "seeds disabled" in reading.counts


def test_a_run_as_the_paper_describes_it_reads_holds():
    """Each paired finding's A and B the right way round: a run built to agree with the
    paper holds, the same run with the two sides swapped does not."""
    base = np.linspace(0.2, 0.8, 40)
    run = Run(table1_dims=(8, 16))
    for signature, shift in (("vlad-4", 0.0), ("fv-4", 0.02)):
        run.full[signature] = base + shift + 0.05
        for R, gain in ((8, 0.0), (16, 0.03)):
            run.pca[signature, R] = base + shift + gain
            for tau, loss in ((0.9, 0.01), (0.99, 0.02)):
                run.learned[signature, tau, R] = base + shift + gain - loss - (0.04 if R == 8 else 0.0)
                run.start[signature, tau, R] = run.learned[signature, tau, R] - (0.1 if R == 8 else 0.05)
    keys = ["table1_pca_keeps_most", "table1_fv_above_vlad", "table1_best_at_largest_R", "table2_pca_above_learned",
            "table2_lower_tau_above", "table2_rises_with_R", "fig4_learning_raises_test_map",
            "fig4_gain_largest_at_smallest_R"]  # fmt: skip
    assert {key: read(FINDING[key], run, n_resamples=2000).verdict for key in keys} == dict.fromkeys(keys, HOLDS)
    swapped = Run(
        full={s: 1 - ap for s, ap in run.full.items()},
        pca={k: 1 - ap for k, ap in run.pca.items()},
        learned={k: 1 - ap for k, ap in run.learned.items()},
        start={k: 1 - ap for k, ap in run.start.items()},
        table1_dims=(8, 16),
    )
    verdicts = {key: read(FINDING[key], swapped, n_resamples=2000).verdict for key in keys[1:]}
    assert verdicts == dict.fromkeys(keys[1:], DOES_NOT_HOLD)
    # PCA-R keeping only half the full signature's mAP.
    swapped.pca = {key: 0.5 * run.full[key[0]] for key in run.pca}
    assert read(FINDING["table1_pca_keeps_most"], swapped, n_resamples=2000).verdict == DOES_NOT_HOLD


def test_gain_largest_at_the_smallest_r_compares_the_gains_query_by_query():
    run = table2_run(0.0)
    for signature in ("vlad-4", "fv-4"):
        for tau in (0.9, 0.99):
            run.learned[signature, tau, 8] = run.start[signature, tau, 8] + 0.2
            run.learned[signature, tau, 16] = run.start[signature, tau, 16] + 0.05
    reading = read(FINDING["fig4_gain_largest_at_smallest_R"], run, n_resamples=2000)
    assert reading.verdict == HOLDS
    assert reading.rows[0]["value_a"] == pytest.approx(20) and reading.rows[0]["value_b"] == pytest.approx(5)


def test_pca_keeps_most_is_measured_against_the_papers_worst_share():
    assert readings.KEEP_SHARE == pytest.approx(72.96 / 87.75)
    run = table2_run(0.0)
    reading = read(FINDING["table1_pca_keeps_most"], run, n_resamples=2000)
    cell = reading.rows[0]
    assert cell["value_b"] == pytest.approx(100 * readings.KEEP_SHARE * np.mean(run.full["vlad-4"]))


def curve(R, tau, objective, train_map):
    """A training history as train_sparse_projector writes it (train mAP every 2 steps)."""
    n = len(objective)
    maps = [train_map[i // 2] if i % 2 == 0 else np.nan for i in range(n)]
    return pd.DataFrame({"R": R, "tau": tau, "iteration": range(n), "objective": objective, "train_map_dot": maps})


def test_training_curve_findings():
    run = Run(
        fig2=[curve(8, 0.0, [1.0, 0.5, 0.2], [0.8, 1.0]), curve(16, 0.0, [1.0, 0.0], [0.9])],
        fig3=[
            curve(8, 0.0, [1.0, 0.5, 0.2], [0.8, 1.0]),
            curve(8, 0.9, [2.0, 1.9, 1.0, 0.8, 0.6], [0.7, 0.9, 0.95]),
        ],
    )
    assert read(FINDING["fig2_train_map_100"], run).verdict == DOES_NOT_HOLD  # R = 16 ends at 90 %
    assert read(FINDING["fig3_train_map_100"], run).counts == (
        "training mAP reaches 100 % in 1 of 2 cells, stays below in 1, 0 tied"
    )
    assert read(FINDING["fig23_objective_decreases"], run).verdict == HOLDS
    # R = 8 leaves 20 % of its objective, R = 16 none: the smaller R is slower.
    assert read(FINDING["fig2_small_R_slower"], run).verdict == HOLDS
    # tau = 0.9 leaves 30 %, tau = 0 20 %: the sparser is slower.
    assert read(FINDING["fig3_sparser_slower"], run).verdict == HOLDS
    run.fig3[1] = curve(8, 0.9, [2.0, 0.2, 0.1], [0.9, 1.0])
    assert read(FINDING["fig3_sparser_slower"], run).verdict == DOES_NOT_HOLD
    run.fig3[1] = curve(8, 0.9, [2.0, 0.4, 0.4], [0.9, 1.0])  # as much left, after as many steps
    assert read(FINDING["fig3_sparser_slower"], run).verdict == NOT_SETTLED
    # Both converge to 0: the one that took more steps is the slower.
    run.fig3 = [curve(8, 0.0, [1.0, 0.0], [1.0]), curve(8, 0.9, [1.0, 0.5, 0.0], [0.9, 1.0])]
    assert read(FINDING["fig3_sparser_slower"], run).verdict == HOLDS


def test_cost_findings_read_the_cost_table():
    costs = pd.DataFrame(
        {
            "Signature": "fv-8",
            "R": [8, 16, 8, 16],
            "τ": ["90%", "90%", "99%", "99%"],
            "Dense KiB": [10.0, 20.0, 10.0, 20.0],
            "CSC KiB": [2.0, 4.0, 0.2, 0.4],
            "Madds dense": [1000, 2000, 1000, 2000],
            "Madds sparse": [100, 200, 10, 20],
            "Full projectors eq.": [0.8, 1.6, 0.08, 0.16],
        }
    )
    run = table2_run(0.0)
    run.pca["fv-8", 8] = np.linspace(0.2, 0.9, 40)
    run.learned["fv-8", 0.99, 16] = run.pca["fv-8", 8] + 0.1
    run.costs = costs
    reading = read(FINDING["costs_below_pca"], run)
    assert reading.verdict == HOLDS
    assert [row["cell"] for row in reading.rows] == [
        "FV-8 R=8 τ=99%: storage (KiB)",
        "FV-8 R=8 τ=99%: multiply-adds per image",
        "FV-8 R=16 τ=99%: storage (KiB)",
        "FV-8 R=16 τ=99%: multiply-adds per image",
    ]
    assert reading.rows[1]["note"].startswith("100.0x")
    reading = read(FINDING["costs_sparse_beat_small_pca"], run, n_resamples=2000)
    assert reading.verdict == HOLDS
    assert reading.rows[0]["cell"] == "FV-8 τ=99% R=16 vs PCA-8"
    assert reading.rows[0]["note"] == "PCA-8 costs 50.0x the multiply-adds"  # 8 x 1000/8 / 20


def test_seed_findings():
    base = np.linspace(0.3, 0.9, 30)
    run = Run(
        seeds={"tf-idf": base, "sparse similarity matrix": base + 0.05, "SOML-TG": base + 0.02, "SOML-DA": base - 0.1},
        jcf={
            (1, None, None): base,
            (8, None, None): base + 0.1,
            (1, 4, None): base - 0.05,
            (8, 4, None): base - 0.02,
            (8, 4, 2): base - 0.03,
        },
        jcf_info={
            (8, None, None): {"dims": 8 * 136, "parameters": 0},
            (8, 4, None): {"dims": 4, "parameters": 100},
            (8, 4, 2): {"dims": 4, "parameters": 40},
        },  # fmt: skip
    )
    assert read(FINDING["seed002_similarity_matrix_above_tfidf"], run, 2000).verdict == HOLDS
    soml = read(FINDING["seed003_soml_above_tfidf"], run, 2000)
    assert soml.verdict == DOES_NOT_HOLD and [row["outcome"] for row in soml.rows] == [FOR, AGAINST]
    assert read(FINDING["seed004_codebook_improves_pooling"], run, 2000).verdict == HOLDS
    small_loss = read(FINDING["seed004_jcf_small_loss"], run, 2000)
    assert small_loss.verdict == HOLDS
    assert small_loss.rows[0]["cell"] == "JCF-4 (K=8) vs factorised R=4 (K=1)"
    assert small_loss.rows[0]["note"] == "272x fewer dimensions than codebook second-order pooling"
    sharing = read(FINDING["seed004_sharing_costs_performance"], run, 2000)
    assert sharing.verdict == HOLDS and sharing.rows[0]["note"] == "2.5x the parameters of the shared form"


def test_paper_values_inside_or_outside_our_intervals():
    """On Holidays: a paper value inside our interval is for the claim; one far outside,
    against it; one just outside (p = 0.035) within Holm's correction over the 3 cells."""
    paper1 = pd.DataFrame({"signature": ["FV-4"], "dim": ["1k"], "full": [60.0], "R8": [48.0], "R16": [95.0]})
    base = np.linspace(0.2, 0.9, 40)  # mean 55 %
    run = Run(full={"fv-4": base + 0.05}, pca={("fv-4", 8): base, ("fv-4", 16): base}, table1_dims=(8, 16))
    run.paper_table1 = paper1
    reading = read(FINDING["paper_table1_values"], run, n_resamples=2000)
    assert [row["cell"] for row in reading.rows] == ["FV-4 full", "FV-4 R8", "FV-4 R16"]
    assert 0.025 < reading.rows[1]["p_value"] < 0.05 and reading.rows[1]["low"] > 0
    assert [row["outcome"] for row in reading.rows] == [FOR, FOR, AGAINST]
    assert reading.verdict == DOES_NOT_HOLD
    assert reading.counts == (
        "the paper's value inside our 95 % interval in 1 of 3 cells, above it in 1, below it in 1; "
        "beyond it after Holm's correction in 1"
    )
    run.paper_table1 = paper1.assign(R16=5.0)
    assert read(FINDING["paper_table1_values"], run, n_resamples=2000).counts.startswith(
        "the paper's value inside our 95 % interval in 1 of 3 cells, above it in 0, below it in 2;"
    )
    assert readings.read_all(run, n_resamples=200)[-1].finding.key == "paper_table2_values"
    assert all(r.finding.key != "paper_table1_values" for r in readings.read_all(Run(), n_resamples=200))


def test_readings_table_has_a_row_per_finding_then_its_cells():
    run = table2_run(-0.05)
    table = readings_table(readings.read_all(run, n_resamples=500))
    heads = table[table["Cell"].isna()]
    assert heads["Finding"].tolist() == [finding.key for finding in FINDINGS]
    assert set(heads["Verdict"]) <= {HOLDS, DOES_NOT_HOLD, NOT_SETTLED}
    cells = table[table["Finding"] == "table2_pca_above_learned"].iloc[1:]
    assert len(cells) == 8 and (cells["Outcome"] == FOR).all()
    assert np.allclose(cells["A − B"], 5.0) and np.allclose(cells["Value A"] - cells["Value B"], 5.0)


# --------------------------------------------------------------------------- the tiny run


@pytest.mark.workflow
def test_readings_of_the_tiny_run_cover_every_finding_and_recompute_tables_i_and_ii(tiny_run):
    tables = tiny_run / "results/tables"
    for ext in ("csv", "md", "tex"):
        assert (tables / f"readings.{ext}").stat().st_size > 0
    frame = pd.read_csv(tables / "readings.csv")
    heads = frame[frame["Cell"].isna()]
    assert heads["Finding"].tolist() == [finding.key for finding in FINDINGS]  # not Holidays: no paper rows
    assert set(heads["Verdict"]) <= {HOLDS, DOES_NOT_HOLD, NOT_SETTLED}
    measured = heads.set_index("Finding")["Counts"]
    assert "not measured" not in " ".join(measured), measured  # the tiny config has every part
    markdown = (tables / "readings.md").read_text()
    assert "10,000 resamples of the queries, seed 7" in markdown
    checked = int(markdown.split("Recomputed means equal the run's tables and records to 2 decimals in ")[1].split()[0])
    assert f"in {checked} of {checked} cells." in markdown and checked > 30

    # Independently of that count: the readings' means are the cells of Tables I and II.
    table1 = pd.read_csv(tables / "table1.csv").set_index("Sign.")
    table2 = pd.read_csv(tables / "table2.csv").set_index("Sign.")
    cells = frame[frame["Cell"].notna()]
    pca_vs_learned = cells[cells["Finding"] == "table2_pca_above_learned"]
    assert len(pca_vs_learned) == 4 * 2 * 2  # signatures x tau x R
    for name, a, b in zip(pca_vs_learned["Cell"], pca_vs_learned["Value A"], pca_vs_learned["Value B"]):
        signature, tau, R = name.split()
        R = R.removeprefix("R=")
        assert a == table1.loc[signature, R]
        assert b == table2.loc[signature, f"{tau.removeprefix('τ=')} R{R}"]
    full = cells[cells["Finding"] == "table1_fv_above_vlad"]
    for name, a, b in zip(full["Cell"], full["Value A"], full["Value B"]):
        K = name.removeprefix("K=")
        assert (a, b) == (table1.loc[f"FV-{K}", "Full"], table1.loc[f"VLAD-{K}", "Full"])


@pytest.mark.workflow
def test_the_readings_are_in_the_html_report_with_their_caption(tiny_run):
    from .conftest import REPO, run_snakemake

    report = tiny_run / "readings_report.html"
    tiny = str(REPO / "tests/configs/tiny.yaml")
    result = run_snakemake(tiny_run, "--configfile", tiny, "--report", str(report), check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    html = report.read_text(errors="replace")
    assert "readings.csv" in html and "paired percentile bootstrap" in html
