# What the readings recompute the seeds' and JCF's per-query APs from, when the run has
# them: the SOML variants trained on tf-idf, JCF's Fisher codebook sizes and runs.
READINGS_SOML = (
    config["seeds"]["soml"]["variants"]
    if seeds_enabled() and names.TFIDF in config["seeds"]["soml"]["signatures"]
    else []
)
READINGS_JCF_SIZES = config["seeds"]["jcf"]["codebook_sizes"] if jcf_enabled() else []
READINGS_JCF_RUNS = jcf_runs() if jcf_enabled() else {}


rule readings:
    input:
        images=rules.index_dataset.output.images,
        data_report=rules.index_dataset.output.report,
        signatures=expand("results/signatures/{name}.npy", name=signature_names()),
        projectors=[path.removesuffix(".csv") + ".npz" for path in table2_histories()],
        histories=table2_histories(),
        fig2=figure2_histories(),
        fig3=figure3_histories(),
        table1="results/tables/table1.csv",
        table2="results/tables/table2.csv",
        costs="results/tables/costs.csv",
        # The seeds' and JCF's files: empty lists when the run has none.
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
    output:
        table=report_table("readings"),
    log:
        "logs/readings.log",
    benchmark:
        "benchmarks/rules/readings.tsv"
    priority: PRIORITY["readings"]
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
        seed=config["seed"],
        soml_variants=READINGS_SOML,
        jcf_codebook_sizes=READINGS_JCF_SIZES,
        jcf_runs=[list(run) for run in READINGS_JCF_RUNS.values()],
    script:
        "../scripts/readings.py"
