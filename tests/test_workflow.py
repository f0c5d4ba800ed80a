"""End-to-end: the real workflow on a tiny embedded set, checked through its tables."""

import json
import re
import shlex
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml

from ndir.codebooks import FisherCodebook
from ndir.evaluation import holidays_map
from ndir.jcf import JCF
from ndir.projection import load_projector
from ndir.stages.common import read_image_table

from .conftest import REPO, run_snakemake

pytestmark = pytest.mark.workflow


def test_table1_values_are_maps_in_percent(tiny_run):
    table = pd.read_csv(tiny_run / "results/tables/table1.csv")
    assert list(table["Sign."]) == ["VLAD-4", "VLAD-8", "FV-4", "FV-8"]
    values = table[["Full", "8", "16"]].to_numpy(dtype=float)
    assert np.isfinite(values).all()
    assert ((values >= 0) & (values <= 100)).all()
    for ext in ("md", "tex"):
        assert (tiny_run / f"results/tables/table1.{ext}").stat().st_size > 0
    # Reducing loses information: at the largest R the full signature scores at least
    # as well (the table's own Full column, as the paper's Table I shows).
    assert (table["Full"] >= table["16"]).all()


def test_table1_pca_columns_are_recomputable(tiny_run):
    """Each PCA-R cell: a PCA fitted on the training split's signatures, the test
    split's mAP through it, recomputed from the run's files."""
    from ndir.projection import PCAProjection
    from ndir.stages.common import split_signatures

    table1 = pd.read_csv(tiny_run / "results/tables/table1.csv").set_index("Sign.")
    for name in table1.index:
        splits = split_signatures(
            tiny_run / "results/data/images.csv",
            tiny_run / f"results/signatures/{name.lower()}.npy",
        )
        X_test, groups, is_query = splits["test"]
        for R in (8, 16):
            Y = PCAProjection(n_components=R).fit(splits["train"][0]).transform(X_test)
            expected = 100 * holidays_map(Y, groups, is_query)
            assert table1.loc[name, str(R)] == pytest.approx(expected, abs=0.006), (name, R)


def test_full_fisher_vector_beats_random_projection(tiny_run):
    table = read_image_table(tiny_run / "results/data/images.csv")
    X = np.load(tiny_run / "results/signatures/fv-8.npy")
    test = (table["split"] == "test").to_numpy()
    groups, is_query = table.loc[test, "group"].to_numpy(), table.loc[test, "is_query"].to_numpy()
    full = holidays_map(X[test], groups, is_query)
    rng = np.random.default_rng(0)
    random_projection = rng.standard_normal((X.shape[1], 8)).astype(np.float32)
    reduced = X[test] @ random_projection
    reduced /= np.linalg.norm(reduced, axis=1, keepdims=True)
    assert full > holidays_map(reduced, groups, is_query) + 0.05
    table1 = pd.read_csv(tiny_run / "results/tables/table1.csv").set_index("Sign.")
    assert table1.loc["FV-8", "Full"] == pytest.approx(100 * full, abs=0.006)


def test_data_report_counts_every_image(tiny_run):
    summary = json.loads((tiny_run / "results/data/report.json").read_text())
    assert summary["n_images"] + summary["n_images_skipped"] == summary["n_images_found"]
    assert summary["splits"]["train"]["n_groups"] == summary["splits"]["test"]["n_groups"] == 20


def test_same_seed_and_one_core_give_identical_tables(tiny_run, tmp_path):
    """The tiny run again, on one core instead of two: the same tables."""
    targets = ["results/tables/table1.csv", "results/tables/seeds_comparison.csv"]
    result = run_snakemake(
        tmp_path, *targets, "--cores", "1", "--configfile", str(REPO / "tests/configs/tiny.yaml"), check=False
    )
    assert result.returncode == 0, result.stderr[-6000:]
    first = (tiny_run / "results/tables/table1.csv").read_bytes()
    assert (tmp_path / "results/tables/table1.csv").read_bytes() == first
    # Training times differ between runs; everything else must not.
    columns = ["Method", "Input", "Query dims", "Model KiB", "Bytes per db image", "Madds per query", "Test mAP"]
    again = pd.read_csv(tmp_path / "results/tables/seeds_comparison.csv")[columns]
    pd.testing.assert_frame_equal(again, pd.read_csv(tiny_run / "results/tables/seeds_comparison.csv")[columns])


def test_paper_grid_is_planned_for_holidays(tmp_path, paper_grid):
    """A Holidays config plans the paper's full grid, K = 64 ... 512 for VLAD and FV."""
    config = paper_grid
    result = run_snakemake(tmp_path, "-n", "--configfile", str(config), "--quiet", "rules")
    assert "fit_vlad_codebook" in result.stdout
    planned = run_snakemake(tmp_path, "-n", "--configfile", str(config), "--summary", check=False)
    for name in ("vlad-512", "fv-512", "vlad-64", "fv-256"):
        assert f"results/signatures/{name}.npy" in planned.stdout + planned.stderr


def test_the_longest_trainings_start_first(tmp_path, paper_grid):
    """Of the paper grid's training jobs, those of the longest signatures (D = 2 K d for
    FV, K d for VLAD) have the highest priority, and at one D the sparsest: Snakemake
    starts them first, and the shortest fill the cores at the end; all stay within
    their rule's point below the codebooks and signatures."""
    plan = run_snakemake(tmp_path, "-n", "--configfile", str(paper_grid))
    pca_dims = yaml.safe_load((REPO / "config.yaml").read_text())["codebooks"]["pca_dims"]
    priorities = {}
    for block in re.split(r"\n\s*\n", plan.stdout + plan.stderr):
        if re.search(r"rule train_sparse_projectors?:", block):
            wildcards = dict(re.findall(r"(\w+)=([\w.-]+)", re.search(r"wildcards: (.*)", block).group(1)))
            job = (wildcards["signature"], wildcards.get("R"), float(wildcards["tau"]))
            priorities[job] = float(re.search(r"priority: ([\d.]+)", block).group(1))

    def length(job):
        encoding, K = job[0].split("-")
        return int(K) * pca_dims * (2 if encoding == "fv" else 1), job[2]

    # Every signature at tau = 0.9 and 0.99; the largest FV at tau = 0 (Fig. 2) and 0.5 (Fig. 3).
    assert len(priorities) == 8 * 2 + 2
    by_priority = sorted(priorities, key=priorities.get, reverse=True)
    assert [length(job) for job in by_priority] == sorted(map(length, priorities), reverse=True)
    assert 0.5 <= min(priorities.values()) < max(priorities.values()) <= 1.0


def test_every_shard_starts_before_jcf(tmp_path):
    """The grid's trainings wait for all the signature shards, JCF for none of them: every
    encode_shard job outranks JCF's jobs, so no shard is left to run alone after them."""
    plan = run_snakemake(tmp_path, "-n")
    priorities = {}
    for block in re.split(r"\n\s*\n", plan.stdout + plan.stderr):
        rule = re.search(r"rule (encode_shard|extract_jcf_features|train_jcf):", block)
        if rule:
            priority = float(re.search(r"priority: ([\d.]+)", block).group(1))
            priorities.setdefault(rule.group(1), []).append(priority)
    assert len(priorities["encode_shard"]) == yaml.safe_load((REPO / "config.yaml").read_text())["signatures"]["shards"]
    jcf = priorities["extract_jcf_features"] + priorities["train_jcf"]
    assert min(priorities["encode_shard"]) > max(jcf)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("signatures: {codebook_sizes: [1]}", "codebook_sizes"),
        ("baseline: {dims: [100000]}", "baseline.dims"),
        ("dataset: {kind: flickr}", "kind"),
        ("dataset: {kind: holidays, path: /nonexistent/holidays}", "dataset.path"),
        ("sparse: {sparsity: [1.0]}", "sparsity"),
        ("sparse: {dims: [100000]}", "sparse.dims"),
        ("seeds: {soml: {signatures: [fv-1024]}}", "seeds.soml.signatures"),
        ("seeds: {comparison_signatures: [vlad-999]}", "seeds.comparison_signatures"),
        ("seeds: {soml: {variants: [ogd]}}", "variants"),
        ("seeds: {jcf: {shared_ranks: [9]}}", "seeds.jcf.shared_ranks"),
        ("seeds: {jcf: {codebook_sizes: [8, 64]}}", "seeds.jcf.codebook_sizes"),
    ],
)
def test_invalid_config_names_the_key(tmp_path, override, key):
    """Each bad value, over the tiny config, fails the dry run naming its key."""
    config = tmp_path / "bad.yaml"
    config.write_text(override + "\n")
    tiny = str(REPO / "tests/configs/tiny.yaml")
    result = run_snakemake(tmp_path, "-n", "--configfile", tiny, str(config), check=False)
    assert result.returncode != 0
    assert key in result.stdout + result.stderr


def test_sparse_outputs_and_run_info(tiny_run):
    for name in ("table2", "table2_dot"):
        table2 = pd.read_csv(tiny_run / f"results/tables/{name}.csv")
        assert list(table2.columns) == ["Sign.", "90% R8", "90% R16", "99% R8", "99% R16"]
        values = table2.drop(columns="Sign.").to_numpy(dtype=float)
        assert np.isfinite(values).all() and ((values >= 0) & (values <= 100)).all()
    costs = pd.read_csv(tiny_run / "results/tables/costs.csv")
    assert (costs["Storage ratio"] > 1).all()
    for n in (2, 3, 4):
        assert (tiny_run / f"results/figures/fig{n}.png").stat().st_size > 10_000
    info = json.loads((tiny_run / "results/run_info.json").read_text())
    assert info["seed"] == 7 and info["config"]["signatures"]["codebook_sizes"] == [4, 8]
    assert info["packages"]["numpy"] and info["data"]["n_groups"] == 40
    hardware = info["hardware"]
    assert hardware["cpu"]["machine"] and hardware["faiss"]["compile_options"]
    assert any(library["library"].startswith("numpy") for library in hardware["blas"])
    assert hardware["cpu"]["model"] in (tiny_run / "results/hardware.html").read_text()
    assert {"encode_shard", "train_sparse_projectors", "table1"} <= {r["rule"] for r in info["rules"]}


def test_html_report_holds_tables_and_figures(tiny_run):
    report = tiny_run / "report.html"
    result = run_snakemake(
        tiny_run, "--configfile", str(REPO / "tests/configs/tiny.yaml"), "--report", str(report), check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    html = report.read_text(errors="replace")
    for item in (
        "table1.csv",
        "table2.csv",
        "table2_ablation.csv",
        "costs.csv",
        "seeds_comparison.csv",
        "fig2.png",
        "fig4.png",
        "seeds_comparison.png",
        "frontier.png",
        "frontier.csv",
        "run_info.json",
        "hardware.html",
    ):
        assert item in html


def test_seeds_comparison_covers_every_method(tiny_run):
    table = pd.read_csv(tiny_run / "results/tables/seeds_comparison.csv")
    methods = set(table["Method"])
    assert {"tf-idf", "SOML-TG", "SOML-DA", "SOML-DA (Alg. 2)", "sparse similarity matrix"} <= methods
    assert {"PCA R=8", "sparse rank R=8 τ=0.9", "sparse rank R=16 τ=0.99"} <= methods
    soml = table[table["Method"].str.startswith("SOML")]
    assert set(soml["Input"]) == {"tf-idf", "FV-8"}
    # 2 comparison signatures x 2 dims for PCA, x 2 sparsities for the projectors.
    assert (table["Method"].str.startswith("PCA")).sum() == 4
    assert (table["Method"].str.startswith("sparse rank")).sum() == 8
    # JCF (seed 004): the learned models and the second-order baselines, on local features
    # (through the FV-8 codebook, or the PCA-16 dense HOG alone without codebook).
    jcf = table[table["Input"].str.startswith("local")]
    assert set(jcf["Input"]) == {"local (FV-8)", "local (PCA-16)"}
    assert set(jcf["Method"]) == {
        "second-order pooling",
        "codebook second-order pooling K=8",
        "factorised R=4 (K=1)",
        "JCF-4 (K=8)",
        "JCF-4-2 (K=8)",
    }
    learned = ~table["Method"].str.contains("second-order pooling")
    assert table["Test mAP"].between(0, 100).all() and (table.loc[learned, "Model KiB"] > 0).all()
    assert (jcf.loc[~learned, "Model KiB"] == 0).all()
    # Recall@1 for every method, in %; the PCA rows' agree with the test signatures.
    assert table["Recall@1"].notna().all() and table["Recall@1"].between(0, 100).all()
    assert (table["Madds per query"] > 0).all() and (table["Train s"] >= 0).all()
    assert (table["Bytes per db image"] > 0).all()
    # A projector at tau = 0.99 stores less than PCA at the same R on the same input.
    pca = table.set_index(["Method", "Input"])["Model KiB"]
    assert pca[("sparse rank R=16 τ=0.99", "FV-8")] < pca[("PCA R=16", "FV-8")]
    records = json.loads((tiny_run / "results/seeds/soml-da/tfidf.json").read_text())
    assert 0 <= records["sparsity"] <= 1
    for ext in ("png", "pdf"):
        assert (tiny_run / f"results/figures/seeds_comparison.{ext}").stat().st_size > 10_000


def test_table2_is_the_last_iterate_scored_like_table1_and_learning_shows(tiny_run):
    """Relations that a scoring mix-up or an optimiser that stalls would break."""
    table2 = pd.read_csv(tiny_run / "results/tables/table2.csv").set_index("Sign.")
    table2_dot = pd.read_csv(tiny_run / "results/tables/table2_dot.csv").set_index("Sign.")
    n_checked = 0
    for path in sorted((tiny_run / "results/sparse").glob("*/R*-tau*.csv")):
        history = pd.read_csv(path)
        run = history.iloc[0]  # the history records its run
        column = f"{100 * run['tau']:g}% R{run['R']}"
        label = f"{run['encoding'].upper()}-{run['K']}"
        if column not in table2.columns:
            continue  # a run of Figures 2-3 only
        last = history.dropna(subset=["test_map_l2"]).iloc[-1]
        assert last["iteration"] == history["iteration"].max()
        assert table2.loc[label, column] == pytest.approx(100 * last["test_map_l2"], abs=0.006)
        assert table2_dot.loc[label, column] == pytest.approx(100 * last["test_map_dot"], abs=0.006)
        # Each history records the objective before every step's projection.
        assert history["objective_before_projection"].iloc[1:].notna().all()
        n_checked += 1
    # The loop skips the runs of Figures 2-3 only: it must not skip them all (a
    # renamed column or file would otherwise pass unchecked).
    assert n_checked > 0
    ablation = pd.read_csv(tiny_run / "results/tables/table2_ablation.csv")
    sparsest = ablation[ablation["τ"] == "99%"]
    # Algorithm 1 learns at tau = 0.99: training mAP rises over the thresholded start.
    # (On the tiny set, M = 3 entries per column at tau = 0.99: few runs can move.)
    gain = sparsest["Train end (dot)"] - sparsest["Train start (dot)"]
    assert (gain >= 0).all() and gain.max() > 5


def advised_command(stderr, message, name):
    """The command an ``ndir: error:`` line of ``stderr`` advises after ``message`` (a
    regex): ``snakemake <the file's path under results/> ...``, split as a shell would."""
    advice = re.search(
        rf"ndir: error: {message}[:;] delete it and run `(snakemake [^`]+)` in the workflow's folder, "
        r"with the --configfile/--config options of your run,",
        stderr,
    )
    assert advice, stderr[-6000:]
    command = shlex.split(advice[1])
    assert command[0] == "snakemake" and command[1].startswith("results/") and command[1].endswith(name)
    return command


def test_a_damaged_codebook_is_rebuilt_by_following_the_message(tiny_run, tmp_path):
    """A codebook cut short: the run fails naming it and the command that rebuilds it.
    Followed to the letter (the file deleted, that command run with the run's config),
    the codebook is written anew and the usual command then brings the run up to date;
    a plain rerun would not do, as the codebook is no input of the default target."""
    workdir = tmp_path / "run"
    shutil.copytree(tiny_run, workdir, symlinks=True)
    codebook = workdir / "results/codebooks/fv-4.npz"
    codebook.write_bytes(codebook.read_bytes()[:1000])
    config = ["--configfile", str(REPO / "tests/configs/tiny.yaml")]
    # With the repository's default profile, as a user in its folder runs it.
    failed = run_snakemake(workdir, "--cores", "2", "--profile", str(REPO / "profiles/default"), *config, check=False)
    assert failed.returncode != 0
    assert "Traceback" not in failed.stderr  # it is in the log the error line names
    command = advised_command(failed.stderr, r"results/codebooks/fv-4.npz: .* cut short or damaged", "fv-4.npz")
    codebook.unlink()
    plain = run_snakemake(workdir, "-n", *config)
    assert "Nothing to be done" in plain.stdout + plain.stderr  # why the message names the file
    rebuilt = run_snakemake(workdir, *command[1:], *config, check=False)
    assert rebuilt.returncode == 0, rebuilt.stderr[-6000:]
    assert FisherCodebook.load(codebook).n_clusters == 4
    usual = run_snakemake(workdir, "--cores", "2", *config, check=False)
    assert usual.returncode == 0, usual.stderr[-6000:]
    assert "rule encode_shard" in usual.stdout + usual.stderr  # the fv-4 signatures were encoded anew
    dry = run_snakemake(workdir, "-n", *config)
    assert "Nothing to be done" in dry.stdout + dry.stderr


def test_an_outdated_history_is_retrained_by_following_the_message(tiny_run, tmp_path):
    """A training history without the column Table II reads (an older run's): the run
    fails naming it and the command that writes it anew. Followed to the letter, the
    grid job that wrote it (one signature and tau, every R) trains again, and the usual
    command then brings the tables up to date."""
    workdir = tmp_path / "run"
    shutil.copytree(tiny_run, workdir, symlinks=True)
    history = workdir / "results/sparse/vlad-4/R8-tau0.9.csv"
    pd.read_csv(history).drop(columns="test_map_l2").to_csv(history, index=False)
    config = ["--configfile", str(REPO / "tests/configs/tiny.yaml")]
    failed = run_snakemake(workdir, "--cores", "2", *config, check=False)
    assert failed.returncode != 0
    message = r"\S*results/sparse/vlad-4/R8-tau0.9.csv: no test_map_l2 measured \(an older or interrupted history\)"
    command = advised_command(failed.stderr, message, "R8-tau0.9.csv")
    history.unlink()
    retrained = run_snakemake(workdir, *command[1:], *config, check=False)
    assert retrained.returncode == 0, retrained.stderr[-6000:]
    assert "rule train_sparse_projectors" in retrained.stdout + retrained.stderr
    assert "test_map_l2" in pd.read_csv(history)
    usual = run_snakemake(workdir, "--cores", "2", *config, check=False)
    assert usual.returncode == 0, usual.stderr[-6000:]
    table2 = pd.read_csv(workdir / "results/tables/table2.csv")
    pd.testing.assert_frame_equal(table2, pd.read_csv(tiny_run / "results/tables/table2.csv"))


def test_paper_literal_config_runs_on_the_tiny_config(tiny_run, tmp_path):
    """configs/paper_literal.yaml on top of the tiny config: the projectors are learned
    with the literal step, margin and no renormalisation, and Table II is written.
    The tiny run's data, codebooks and signatures are reused (same settings)."""
    for part in ("data", "codebooks", "signatures"):
        shutil.copytree(tiny_run / "results" / part, tmp_path / "results" / part)
    configs = [str(REPO / "tests/configs/tiny.yaml"), str(REPO / "configs/paper_literal.yaml")]
    result = run_snakemake(tmp_path, "results/tables/table2.csv", "--cores", "2", "--configfile", *configs, check=False)
    assert result.returncode == 0, result.stderr[-6000:]
    assert "rule encode_shard" not in result.stdout + result.stderr  # the signatures were reused
    projectors = sorted((tmp_path / "results/sparse").glob("*/R*-tau0.99.npz"))
    assert projectors
    for path in projectors:
        _, meta = load_projector(path)
        assert (meta["line_search"], meta["margin"], meta["renormalize"]) == ("dense", 1e-6, False)
    table = pd.read_csv(tmp_path / "results/tables/table2.csv")
    values = table.drop(columns="Sign.").to_numpy(dtype=float)
    assert np.isfinite(values).all() and ((values >= 0) & (values <= 100)).all()


def test_few_test_queries_get_bootstrap_intervals_in_markdown(tiny_run):
    """20 test queries (< 100): each mAP of Tables I and II carries its 95 % bootstrap
    interval in the Markdown file, and the caption says how many queries; the CSV
    keeps the values alone."""
    for name in ("table1", "table2"):
        markdown = (tiny_run / f"results/tables/{name}.md").read_text(encoding="utf-8")
        assert "Only 20 test queries" in markdown
        first_row = markdown.splitlines()[4].split("|")
        value, interval = first_row[3].split(" [")
        low, high = map(float, interval.rstrip("] ").split(", "))
        assert low <= float(value) <= high
        assert "[" not in (tiny_run / f"results/tables/{name}.csv").read_text()


def test_retrievals_figure_is_drawn(tiny_run):
    for ext in ("png", "pdf"):
        assert (tiny_run / f"results/figures/retrievals.{ext}").stat().st_size > 10_000
    log = (tiny_run / "logs/retrievals_figure.log").read_text()
    assert log.count("INFO ndir.stages.report: query ") == 5 and "(misses near duplicates" in log


def test_jcf_table_and_figure(tiny_run):
    """The JCF table: the two second-order baselines, then each factorised model of the
    tiny config (K = 1, JCF-4 and JCF-4-2 at K = 8) after its random initialisation."""
    table = pd.read_csv(tiny_run / "results/tables/jcf.csv")
    assert list(table.columns) == [
        "Method", "K", "R", "k", "Parameters", "Dims", "Bytes per db image", "Test mAP", "Recall@1", "Best epoch",
        "Train s",
    ]  # fmt: skip
    assert list(table["Method"]) == [
        "second-order pooling",
        "codebook second-order pooling K=8",
        "factorised R=4 (K=1), random init",
        "factorised R=4 (K=1)",
        "JCF-4 (K=8), random init",
        "JCF-4 (K=8)",
        "JCF-4-2 (K=8), random init",
        "JCF-4-2 (K=8)",
    ]
    d = 16  # codebooks.pca_dims of the tiny config
    T = d * (d + 1) // 2
    assert list(table["Dims"]) == [T, 8 * T] + [4] * 6
    assert list(table["Parameters"]) == [0, 0] + [2 * 4 * d] * 2 + [2 * 4 * d * 8] * 2 + [2 * (8 * 2 + 4 * d * 2)] * 2
    assert (table["Bytes per db image"] == 4 * table["Dims"]).all()
    assert table[["Test mAP", "Recall@1"]].stack().between(0, 100).all()
    assert table["Best epoch"].notna().tolist() == [False, False] + [False, True] * 3
    assert table["Best epoch"].dropna().between(0, 2).all()  # seeds.jcf.epochs: 2
    # The comparison shows the learned models with the same values.
    comparison = pd.read_csv(tiny_run / "results/tables/seeds_comparison.csv").set_index("Method")
    for _, row in table[~table["Method"].str.endswith("random init")].iterrows():
        for column in ("Test mAP", "Recall@1"):
            assert comparison.loc[row["Method"], column] == row[column]
    for ext in ("png", "pdf"):
        assert (tiny_run / f"results/figures/jcf_recall_vs_parameters.{ext}").stat().st_size > 10_000
    history = pd.read_csv(tiny_run / "results/jcf/K8-R4-k2.csv")
    assert list(history["epoch"]) == [0, 1, 2] and history["holdout_map"].between(0, 1).all()
    # The hold-out that picked the epoch shares no source photo with the training groups.
    images = read_image_table(tiny_run / "results/data/images.csv")
    train = images[images["split"] == "train"]
    held = train["group"].isin(JCF.load(tiny_run / "results/jcf/K8-R4-k2.npz").holdout_groups_)
    assert held.any() and not set(train.loc[held, "together"]) & set(train.loc[~held, "together"])
    info = json.loads((tiny_run / "results/run_info.json").read_text())
    assert {"extract_jcf_features", "train_jcf", "jcf_report"} <= {r["rule"] for r in info["rules"]}


def test_recall_at_1_of_the_seeds_comparison_is_recomputable(tiny_run):
    """Recall@1 of a PCA row and of the tf-idf row, recomputed from the run's files."""
    import scipy.sparse as sp

    from ndir.bovw import inverse_document_frequency, tfidf
    from ndir.evaluation import recall_at_k
    from ndir.projection import PCAProjection
    from ndir.stages.common import split_rows, split_signatures

    comparison = pd.read_csv(tiny_run / "results/tables/seeds_comparison.csv").set_index(["Method", "Input"])
    images = tiny_run / "results/data/images.csv"
    splits = split_signatures(images, tiny_run / "results/signatures/fv-8.npy")
    X_test, groups, _ = splits["test"]
    Y = PCAProjection(n_components=8).fit(splits["train"][0]).transform(X_test)
    expected = 100 * recall_at_k(Y, groups, (1,))[1]
    assert comparison.loc[("PCA R=8", "FV-8"), "Recall@1"] == pytest.approx(expected, abs=0.006)
    bovw = tiny_run / "results/signatures/bovw.npz"
    counts = split_rows(images, sp.load_npz(bovw).tocsr(), bovw)
    weighted = tfidf(counts["test"][0], inverse_document_frequency(counts["train"][0]))
    expected = 100 * recall_at_k((weighted @ weighted.T).toarray(), groups, (1,), "precomputed")[1]
    assert comparison.loc[("tf-idf", "tf-idf"), "Recall@1"] == pytest.approx(expected, abs=0.006)


def test_baselines_beside_the_learned_projectors(tiny_run):
    """Random sparse, Gaussian RP, whitened and thresholded PCA and PQ on every signature,
    in the ablation, the seeds comparison and the frontier, recomputable from their records."""
    ablation = pd.read_csv(tiny_run / "results/tables/table2_ablation.csv")
    columns = ["Random sparse", "Random sparse s.d.", "Learned − random sparse", "Whitened PCA", "Gaussian RP"]
    assert ablation[columns].notna().all().all() and ablation["Random sparse"].between(0, 100).all()
    records = pd.read_csv(tiny_run / "results/evaluation/baselines/fv-8.csv")
    # One record per seed of baseline.random_seeds (tiny: 2) for each random projection.
    random = records[records["family"] == "random sparse τ=0.99"]
    assert sorted(random.loc[random["R"] == 8, "seed"]) == [0, 1]
    cell = ablation[(ablation["Sign."] == "FV-8") & (ablation["τ"] == "99%") & (ablation["R"] == 8)].iloc[0]
    maps = 100 * random.loc[random["R"] == 8, "test_map"]
    assert cell["Random sparse"] == pytest.approx(maps.mean(), abs=0.006)
    assert cell["Random sparse s.d."] == pytest.approx(maps.std(ddof=1), abs=0.006)
    # Thresholded PCA fitted by the baselines is the training's iteration 0.
    thresholded = records[records["family"].str.startswith("thresholded PCA")]
    assert len(thresholded) == 4
    for row in thresholded.itertuples():
        history = pd.read_csv(tiny_run / f"results/sparse/fv-8/R{row.R}-tau{row.tau:g}.csv")
        assert row.test_map == pytest.approx(history["test_map_l2"].dropna().iloc[0], abs=1e-6)
    table = pd.read_csv(tiny_run / "results/tables/seeds_comparison.csv").set_index(["Method", "Input"])
    for method in ("whitened PCA R=8", "Gaussian RP R=16", "random sparse R=8 τ=0.99", "thresholded PCA R=16 τ=0.9"):
        assert (method, "FV-8") in table.index and (method, "VLAD-8") in table.index
    # PQ codes of baseline.pq.bytes (tiny: 2 and 4 at 4 bits); 4 R = 32, 64 bytes
    # would need more sub-quantisers than the tiny training split has dimensions.
    pq = table[table.index.get_level_values("Method").str.startswith("PQ")]
    assert sorted(set(pq.index.get_level_values("Method"))) == ["PQ 2 B (PCA-8)", "PQ 4 B (PCA-16)"]
    assert pq.loc[("PQ 2 B (PCA-8)", "FV-8"), "Bytes per db image"] == 2
    frontier = pd.read_csv(tiny_run / "results/tables/frontier.csv")
    assert set(frontier["Front by"]) == {"multiply-adds per query", "bytes per database image"}
    by_bytes = frontier[frontier["Front by"] == "bytes per database image"]
    # The cheapest point of a front is the cheapest of all; mAP rises along it.
    assert by_bytes["Bytes per db image"].iloc[0] == table["Bytes per db image"].min()
    assert by_bytes["Test mAP"].is_monotonic_increasing
    assert "On the front by multiply-adds per query: " in (tiny_run / "results/tables/frontier.md").read_text()
    for ext in ("png", "pdf"):
        assert (tiny_run / f"results/figures/frontier.{ext}").stat().st_size > 10_000


def test_a_finished_run_copied_into_another_clone_is_not_planned_again(tiny_run, tmp_path):
    """Another clone has new modification times on every script, which Snakemake reads as
    changed code; the README's flag plans only the provenance that names the clone."""
    import re
    import shutil

    flag = re.search(r"--rerun-triggers [a-z -]+[a-z]", (REPO / "README.md").read_text()).group(0).split()
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, symlinks=True)  # copy2: the results keep their times
    clone = tmp_path / "clone"
    clone.mkdir()
    for part in ("Snakefile", "config.yaml"):
        shutil.copy(REPO / part, clone / part)
    for folder in ("workflow", "profiles"):
        shutil.copytree(REPO / folder, clone / folder, copy_function=shutil.copy)  # new times
    tiny = ["--configfile", str(REPO / "tests/configs/tiny.yaml")]
    plain = run_snakemake(run, "-n", "--cores", "2", *tiny, snakefile=clone / "Snakefile")
    assert "Code has changed since last execution" in plain.stdout + plain.stderr
    copied = run_snakemake(run, "-n", "--cores", "2", *flag, *tiny, snakefile=clone / "Snakefile")
    planned = re.findall(r"^rule (\w+):", copied.stdout + copied.stderr, flags=re.M)
    assert sorted(set(planned)) == ["all", "write_run_info"], planned
