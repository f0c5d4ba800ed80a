import re
from pathlib import Path

import yaml

from ndir import names
from ndir.config import (
    check_config,
    coerce_config_strings,
    raise_schema_errors,
    require_every_key,
    signature_dim,
)
from ndir.descriptors import descriptor_params
from ndir.sizes import precheck_dataset, size_limits
from ndir.stages.seeds import soml_options

with open(Path(workflow.current_basedir) / "../schemas/config.schema.yaml") as schema:
    CONFIG_SCHEMA = require_every_key(yaml.safe_load(schema))
# --config key={...} delivers nested numbers as strings: read them as the schema's types.
coerce_config_strings(config, CONFIG_SCHEMA)
# One line per wrong or missing key; config.yaml holds every value, nothing is filled in.
raise_schema_errors(config, CONFIG_SCHEMA)
check_config(config)
# A data set on disk is split now, so that a setting it is too small for stops the run
# before the first job (ndir.sizes); index_dataset checks the images it keeps again.
precheck_dataset(config)


onstart:
    # After a run, Snakemake removes the empty folders of missing outputs with
    # os.removedirs, which fails (NotADirectoryError) on results/ when it is a symlink
    # to an empty folder, as after a first job that found the disk full: a file there
    # keeps the link out of that cleanup.
    if Path("results").is_symlink() and Path("results").is_dir():
        Path("results/.keep").touch()


wildcard_constraints:
    **names.WILDCARD_CONSTRAINTS,
    shard=r"\d+",
    variant="tg|da|da-algorithm2",


ENV = "../envs/ndir.yaml"
# Which ready job runs first on a laptop's few cores (Snakemake starts the highest
# priority first; 0 for the rules not named). A two-thread job waits until both
# cores are free, so the three k-means go first, while little else could run; then
# the chain to the signatures, every shard before JCF (at equal priority the last
# shard ran alone for 50 s of a 590 s run on a 2-core AMD EPYC: the grid waits for
# all of them); then JCF's trainings and the grid's beside the bag of words, so that
# the shorter SOML and baseline jobs fill the cores at the end; the readings, the
# seeds comparison and the browser (the report's chain, 14 + 6 + 14 s) before the
# figures (docs/results.md, "Time and memory").
PRIORITY = {
    "fit_vlad_codebook": 10,
    "fit_visual_vocabulary": 9,
    "fit_descriptor_pca": 8,
    "fit_fisher_codebook": 6,
    "encode_shard": 6,
    "gather_signatures": 6,
    "extract_jcf_features": 5,
    "gather_jcf_features": 5,
    "train_jcf": 4,
    "train_similarity_matrix": 2,
    "gather_bovw": 2,
    "train_sparse_projectors": 1,
    "readings": 1,
    "seeds_comparison": 1,
    "browse": 1,
}
TABLE_FORMATS = ["csv", "md", "tex"]
FIGURE_FORMATS = ["png", "pdf"]


def signatures():
    """``{name: (encoding, K)}`` of every signature of the config: ``"vlad-64": ("vlad", 64)``."""
    return {
        names.signature_name(encoding, K): (encoding, K)
        for encoding in config["signatures"]["encodings"]
        for K in config["signatures"]["codebook_sizes"]
    }


def signature_names():
    """Signature names such as ``vlad-64`` for every (encoding, K) of the config."""
    return list(signatures())


def baseline_results(selected=None):
    """Records of the reduction baselines (whitened and thresholded PCA, random
    projections, PQ) of each signature named in ``selected`` (default: every signature).
    """
    return [
        f"results/evaluation/baselines/{name}.csv"
        for name in (signature_names() if selected is None else selected)
    ]


# The seeds' visual vocabulary, and the stem of the word-count shards that encode_shard
# writes (each image's words counted from the descriptors of its signatures) and
# gather_bovw stacks.
VOCABULARY = "results/codebooks/vocabulary.npz"
WORD_COUNT_SHARDS = "results/signatures/shards/bovw-"


def codebook_files():
    return [f"results/codebooks/{name}.npz" for name in signature_names()]


def shard_files(stem="results/signatures/shards/"):
    """The ``signatures.shards`` files ``<stem><s>.npz`` of a per-shard rule."""
    n_shards = config["signatures"]["shards"]
    return [f"{stem}{s}.npz" for s in range(n_shards)]


def fetched():
    """Whether the data set is downloaded (by fetch_dataset: Holidays or UKBench
    without dataset.path)."""
    return (
        config["dataset"]["kind"] in ("holidays", "ukbench")
        and not config["dataset"]["path"]
    )


def fetch_paths():
    """Where fetch_dataset writes, under <download.folder>/<kind>/: the archives,
    the unpacked images and the record of the archives (URL, bytes, SHA-256)."""
    folder = f"{config['download']['folder']}/{config['dataset']['kind']}"
    return {
        "archives": f"{folder}/archives",
        "images": f"{folder}/images",
        "record": f"{folder}/download.json",
    }


def dataset_images(wildcards):
    """The embedded set is built by a rule, Holidays and UKBench without a path are
    fetched by one; a folder of the user's is read in place."""
    if config["dataset"]["kind"] == "embedded":
        return ["results/data/embedded"]
    if fetched():
        return [fetch_paths()["images"], fetch_paths()["record"]]
    return []


def download_record():
    """The fetched data set's record of its archives; None when it is not fetched."""
    return fetch_paths()["record"] if fetched() else None


def dataset_root():
    if config["dataset"]["kind"] == "embedded":
        return "results/data/embedded"
    if fetched():
        return fetch_paths()["images"]
    return config["dataset"]["path"]


def keep_together():
    """What the split keeps on one side: the embedded set's source photos, or the config's table."""
    if config["dataset"]["kind"] == "embedded":
        return {"table": "results/data/embedded/views.csv", "column": "photo"}
    return config["dataset"]["keep_together"]


def codebook_size(wildcards):
    """The codebook size K of a rule's wildcards, as an int."""
    return int(wildcards.K)


def shard_index(wildcards):
    """The shard number of a rule's wildcards, as an int."""
    return int(wildcards.shard)


def training_minutes(signature, R, tau):
    """Minutes a sparse training may take on a cluster: ``sparse.max_iter`` steps at the
    cost measured at Holidays scale on one core, three times over; at least 2 h.

    A step costs about 1 s per 20,480 x 256 entries of U at tau = 0.9 (3.7 s at FV-512,
    R = 256 in the first grid; 1.4-2.2 s since) and at tau = 0 (dense); at lower tau
    the l0 projection's search grows with the M = (1 - tau) D entries kept per column:
    2.3-3.5 s per 20,480 x 256 at tau = 0.5 (FV-512, R = 64). So max(1, 5 (1 - tau)) s
    (1 s from tau = 0.8 up), plus 0.05 s a step (docs/performance.md)."""
    encoding, K = signatures()[signature]
    n_features = signature_dim(encoding, K, config["codebooks"]["pca_dims"])
    tau = float(tau)
    seconds_per_unit = max(1.0, 5.0 * (1.0 - tau)) if tau > 0 else 1.0
    seconds_per_step = 0.05 + seconds_per_unit * n_features * int(R) / (20480 * 256)
    return max(120, round(3 * config["sparse"]["max_iter"] * seconds_per_step / 60))


def training_runtime(wildcards):
    """:func:`training_minutes` of the training of a rule's wildcards."""
    return training_minutes(wildcards.signature, wildcards.R, wildcards.tau)


def grid_training_runtime(wildcards):
    """:func:`training_minutes` summed over the trainings of a grid job (every R of
    ``sparse.dims`` at the tau of its wildcards), which run one after the other."""
    return sum(
        training_minutes(wildcards.signature, R, wildcards.tau)
        for R in config["sparse"]["dims"]
    )


def training_priority(wildcards):
    """Priority of a training job: its rule's, lowered by up to half a point for
    signatures shorter than the config's longest, then by a hundredth of a point per
    unit of 1 - tau: the longest trainings start first and the short ones fill the
    cores at the end. A step's cost grows with D; at one D, the tau = 0.99 jobs took
    longest on the Holidays-scale grid, their small R never flat within 2,000 steps
    (there, one FV-512 job started last and ran alone for 9 minutes)."""
    pca_dims = config["codebooks"]["pca_dims"]
    n_features = signature_dim(*signatures()[wildcards.signature], pca_dims)
    longest = max(
        signature_dim(*encoding_K, pca_dims) for encoding_K in signatures().values()
    )
    return (
        PRIORITY["train_sparse_projectors"]
        - 0.5 * (1.0 - n_features / longest)
        - 0.01 * (1.0 - float(wildcards.tau))
    )


def grid_sparsity():
    """The tau of the trainings run at every R of ``sparse.dims`` (rule
    train_sparse_projectors): Table II's ``sparse.sparsity``, and 0 (Fig. 2); as a
    wildcard pattern."""
    taus = sorted(set(config["sparse"]["sparsity"]) | {0.0})
    return "|".join(re.escape(f"{tau:g}") for tau in taus)


def grid_trainings(suffix):
    """The files of a grid job, one per R of ``sparse.dims``: the projectors
    (``suffix`` ``.npz``) or their histories (``.csv``), the signature and tau left as
    wildcards."""
    return [
        f"results/sparse/{{signature}}/{names.PROJECTOR.format(R=R, tau='{tau}')}{suffix}"
        for R in config["sparse"]["dims"]
    ]


def convergence_signature():
    """The largest Fisher Vector (the paper's Fig. 2-4 use FV-512), else the largest VLAD."""
    encoding = "fv" if "fv" in config["signatures"]["encodings"] else "vlad"
    return names.signature_name(encoding, max(config["signatures"]["codebook_sizes"]))


def retrievals_projector():
    """The sparse projector the retrievals figure shows beside PCA and the full
    signature: the convergence signature's at R = 32 (else the smallest R) and the
    highest tau, where the paper's Fig. 4 shows the largest gain."""
    dims = config["sparse"]["dims"]
    R = 32 if 32 in dims else min(dims)
    return (
        names.sparse_run(convergence_signature(), R, max(config["sparse"]["sparsity"]))
        + ".npz"
    )


def table2_histories():
    return [
        names.sparse_run(name, R, tau) + ".csv"
        for name in signature_names()
        for tau in config["sparse"]["sparsity"]
        for R in config["sparse"]["dims"]
    ]


def cost_projectors():
    return [
        names.sparse_run(convergence_signature(), R, tau) + ".npz"
        for tau in config["sparse"]["sparsity"]
        for R in config["sparse"]["dims"]
    ]


def histories(projectors):
    """The training history ``.csv`` beside each projector ``.npz``."""
    return [path.removesuffix(".npz") + ".csv" for path in projectors]


def figure2_histories():
    return [
        names.sparse_run(convergence_signature(), R, 0.0) + ".csv"
        for R in config["sparse"]["dims"]
    ]


def figure3_histories():
    R = config["sparse"]["convergence_dim"]
    return [
        names.sparse_run(convergence_signature(), R, tau) + ".csv"
        for tau in config["sparse"]["convergence_sparsity"]
    ]


def figure4_histories():
    tau = max(config["sparse"]["sparsity"])
    return [
        names.sparse_run(convergence_signature(), R, tau) + ".csv"
        for R in config["sparse"]["dims"]
    ]


#: The paper's Figures 2-4 (name: label in the report), drawn by convergence_figures.
CONVERGENCE_FIGURES = {"fig2": "Figure 2", "fig3": "Figure 3", "fig4": "Figure 4"}


def final_outputs():
    """The tables and figures the run ends with, as their files, and the retrieval
    browser's page: the one list of them.
    Rule all asks for them, write_run_info waits for them; the rule that writes each
    declares it with :func:`report_table` or :func:`report_figure`."""
    tables = ["table1", "table2", "table2_dot", "table2_ablation", "costs", "readings"]
    figures = [*CONVERGENCE_FIGURES, "retrievals"]
    if seeds_enabled():
        tables += ["seeds_comparison", "frontier"]
        figures += ["seeds_comparison", "frontier"]
    if jcf_enabled():
        tables.append("jcf")
        figures.append("jcf_recall_vs_parameters")
    # The retrieval browser of browse.smk, its page and data (thumbs/ beside them).
    browser = ["results/browse/index.html", "results/browse/data.js"]
    return (
        [path for name in tables for path in table_files(name)]
        + [path for name in figures for path in figure_files(name)]
        + browser
    )


def table_files(name):
    """The files of table ``name``: CSV, Markdown and LaTeX."""
    return [f"results/tables/{name}.{ext}" for ext in TABLE_FORMATS]


def figure_files(name):
    """The files of figure ``name``: PNG and PDF."""
    return [f"results/figures/{name}.{ext}" for ext in FIGURE_FORMATS]


def report_table(name):
    """The files of table ``name``; the CSV goes into the HTML report."""
    csv, *others = table_files(name)
    # Assigned first: a line starting with `report(` would parse as the directive.
    csv = report(
        csv,
        caption=f"../report/{name}.rst",
        category="Tables",
        labels={"table": name},
    )
    return [csv, *others]


def report_figure(name, label, caption=None):
    """The files of figure ``name``; the PNG goes into the HTML report as ``label``,
    with the caption ``workflow/report/<caption>.rst`` (default: ``name``)."""
    png, *others = figure_files(name)
    png = report(
        png,
        caption=f"../report/{caption or name}.rst",
        category="Figures",
        labels={"figure": label},
    )
    return [png, *others]


def seeds_enabled():
    return config["seeds"]["enabled"]


def soml_input_file(wildcards):
    """The SOML learner's input: the word counts for tf-idf, else a VLAD/FV signature."""
    if wildcards.soml_input == names.TFIDF:
        return "results/signatures/bovw.npz"
    return f"results/signatures/{wildcards.soml_input}.npy"


def soml_job_options(wildcards):
    """Hyper-parameters of the SOML variant of this job, from config."""
    return soml_options(config["seeds"]["soml"], wildcards.variant)


def seeds_records():
    """Records of the seeds comparison: tf-idf, the seeds' learners, the learned JCF
    models and the second-order baselines."""
    soml = config["seeds"]["soml"]
    return (
        [
            "results/seeds/tfidf.json",
            "results/seeds/similarity_matrix.json",
        ]
        + [
            f"results/seeds/soml-{variant}/{name}.json"
            for variant in soml["variants"]
            for name in soml["signatures"]
        ]
        + jcf_records(random=False)
    )


def jcf_enabled():
    return seeds_enabled() and config["seeds"]["jcf"]["enabled"]


def _fisher_codebook_input(K):
    """``{"codebook": fv-K}`` for a JCF job at K > 1; nothing for K = 1 (no codebook)."""
    return (
        {"codebook": f"results/codebooks/{names.signature_name('fv', K)}.npz"}
        if K > 1
        else {}
    )


def jcf_pooling_codebook(wildcards):
    """The Fisher codebook of a second-order pooling job ``K{K}`` (none for K1)."""
    return _fisher_codebook_input(int(wildcards.K))


def jcf_run_codebook(wildcards):
    """The Fisher codebook of a JCF run (none for K1, the factorised form)."""
    return _fisher_codebook_input(jcf_clusters(wildcards))


def jcf_runs():
    """``{name: (K, R, k)}`` of the JCF runs: JCF-R (``K64-R64``, k None), JCF-R-k
    (``K64-R64-k8``) and, without codebook, K = 1 (``K1-R64``), for each K of
    ``seeds.jcf.codebook_sizes`` and R of ``seeds.jcf.dims``; names by
    :func:`ndir.names.jcf_run_name`."""
    jcf = config["seeds"]["jcf"]
    runs = []
    for R in jcf["dims"]:
        if jcf["without_codebook"]:
            runs.append((1, R, None))
        for K in jcf["codebook_sizes"]:
            if jcf["full_codebook"]:
                runs.append((K, R, None))
            runs += [(K, R, k) for k in jcf["shared_ranks"]]
    return {names.jcf_run_name(*run): run for run in runs}


def jcf_records(random=True):
    """The JCF records: second-order pooling without codebook and with each codebook,
    each run learned (and its random initialisation)."""
    if not jcf_enabled():
        return []
    baselines = [
        f"results/jcf/second_order_pooling-K{K}.json"
        for K in [1] + config["seeds"]["jcf"]["codebook_sizes"]
    ]
    learned = [f"results/jcf/{run}.json" for run in jcf_runs()]
    randoms = [f"results/jcf/{run}-random.json" for run in jcf_runs()] if random else []
    return baselines + learned + randoms


def jcf_clusters(wildcards):
    """The codebook size K of a JCF run (1: no codebook), as an int."""
    return jcf_runs()[wildcards.jcf_run][0]


def jcf_components(wildcards):
    """The output dimension R of a JCF run, as an int."""
    return jcf_runs()[wildcards.jcf_run][1]


def jcf_shared(wildcards):
    """The shared rank k of a JCF-R-k run, None for JCF-R and K = 1."""
    return jcf_runs()[wildcards.jcf_run][2]


def pooling_files(suffix):
    """Second-order pooling's files that readings and browse score (without codebook, then
    with each codebook of ``READINGS_JCF_SIZES``): its records (``suffix`` ``.json``) or
    its test images' similarities (``.npy``); none without JCF."""
    if not jcf_enabled():
        return []
    return [
        f"results/jcf/second_order_pooling-K{K}{suffix}"
        for K in [1, *READINGS_JCF_SIZES]
    ]


def comparison_signature_files():
    return [
        f"results/signatures/{name}.npy"
        for name in config["seeds"]["comparison_signatures"]
    ]


def comparison_projectors():
    return [
        names.sparse_run(name, R, tau) + ".npz"
        for name in config["seeds"]["comparison_signatures"]
        for tau in config["sparse"]["sparsity"]
        for R in config["sparse"]["dims"]
    ]
