# The retrieval browser (ndir.stages.browse): every test query and its top
# ndir.browse.TOP_K under each method the readings recompute, a static page that opens
# from the file system. Its inputs are the readings' (READINGS_* of readings.smk), with
# the seeds comparison's records for the frontier.
from ndir.browse import TOP_K


rule browse:
    input:
        images=rules.index_dataset.output.images,
        data_report=rules.index_dataset.output.report,
        signatures=expand("results/signatures/{name}.npy", name=signature_names()),
        projectors=[path.removesuffix(".csv") + ".npz" for path in table2_histories()],
        histories=table2_histories(),
        table1="results/tables/table1.csv",
        table2="results/tables/table2.csv",
        counts=rules.gather_bovw.output.counts if seeds_enabled() else [],
        tfidf_record=rules.evaluate_tfidf.output.record if seeds_enabled() else [],
        similarity_matrix=(
            rules.train_similarity_matrix.output.model if seeds_enabled() else []
        ),
        similarity_record=(
            rules.train_similarity_matrix.output.record if seeds_enabled() else []
        ),
        soml_models=expand(
            "results/seeds/soml-{variant}/tfidf.npz", variant=READINGS_SOML
        ),
        soml_records=expand(
            "results/seeds/soml-{variant}/tfidf.json", variant=READINGS_SOML
        ),
        jcf_features=rules.gather_jcf_features.output.features if jcf_enabled() else [],
        jcf_codebooks=[
            f"results/codebooks/{names.signature_name('fv', K)}.npz"
            for K in READINGS_JCF_SIZES
        ],
        pooling_records=pooling_files(".json"),
        pooling_similarities=pooling_files(".npy"),
        jcf_models=[f"results/jcf/{run}.npz" for run in READINGS_JCF_RUNS],
        jcf_records=[f"results/jcf/{run}.json" for run in READINGS_JCF_RUNS],
        comparison=rules.seeds_comparison.output.records_csv if seeds_enabled() else [],
    output:
        page=report(
            "results/browse/index.html",
            caption="../report/browse.rst",
            category="Retrieval browser",
            labels={"file": "index.html"},
        ),
        data="results/browse/data.js",
        thumbs=directory("results/browse/thumbs"),
    log:
        "logs/browse.log",
    benchmark:
        "benchmarks/rules/browse.tsv"
    priority: PRIORITY["browse"]
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        signature_names=signature_names(),
        table1_dims=config["baseline"]["dims"],
        renormalize=config["sparse"]["renormalize"],
        # A constant (ndir.browse.TOP_K), not a config key.
        k=TOP_K,
        soml_variants=READINGS_SOML,
        jcf_codebook_sizes=READINGS_JCF_SIZES,
        jcf_runs=[list(run) for run in READINGS_JCF_RUNS.values()],
    script:
        "../scripts/browse.py"
