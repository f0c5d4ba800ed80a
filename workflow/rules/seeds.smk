rule fit_visual_vocabulary:
    input:
        sample=rules.sample_descriptors.output.sample,
    output:
        vocabulary=VOCABULARY,
    log:
        "logs/fit_visual_vocabulary.log",
    benchmark:
        "benchmarks/rules/fit_visual_vocabulary.tsv"
    priority: PRIORITY["fit_visual_vocabulary"]
    conda:
        ENV
    threads: 2
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        n_words=config["seeds"]["bovw"]["vocabulary_size"],
        n_iter=config["seeds"]["bovw"]["kmeans_iterations"],
        nprobe=config["seeds"]["bovw"]["nprobe"],
        seed=config["seed"],
    script:
        "../scripts/fit_visual_vocabulary.py"


rule gather_bovw:
    input:
        images=rules.index_dataset.output.images,
        shards=shard_files(WORD_COUNT_SHARDS),
    output:
        counts="results/signatures/bovw.npz",
    log:
        "logs/gather_bovw.log",
    benchmark:
        "benchmarks/rules/gather_bovw.tsv"
    priority: PRIORITY["gather_bovw"]
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/gather_bovw.py"


rule evaluate_tfidf:
    input:
        images=rules.index_dataset.output.images,
        counts=rules.gather_bovw.output.counts,
    output:
        record="results/seeds/tfidf.json",
    log:
        "logs/evaluate_tfidf.log",
    benchmark:
        "benchmarks/rules/evaluate_tfidf.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        ns_score=config["dataset"]["kind"] == "ukbench",
    script:
        "../scripts/evaluate_tfidf.py"


rule train_soml:
    input:
        images=rules.index_dataset.output.images,
        signatures=soml_input_file,
    output:
        model="results/seeds/soml-{variant}/{soml_input}.npz",
        record="results/seeds/soml-{variant}/{soml_input}.json",
    log:
        "logs/train_soml/{variant}/{soml_input}.log",
    benchmark:
        "benchmarks/rules/train_soml/{variant}/{soml_input}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=3000,
        runtime=30,
    params:
        signature="{soml_input}",
        variant="{variant}",
        options=soml_job_options,
        negatives_per_pair=config["seeds"]["soml"]["negatives_per_pair"],
        epochs=config["seeds"]["soml"]["epochs"],
        seed=config["seed"],
        ns_score=config["dataset"]["kind"] == "ukbench",
    script:
        "../scripts/train_soml.py"


rule train_similarity_matrix:
    input:
        images=rules.index_dataset.output.images,
        counts=rules.gather_bovw.output.counts,
        vocabulary=rules.fit_visual_vocabulary.output.vocabulary,
    output:
        model="results/seeds/similarity_matrix.npz",
        record="results/seeds/similarity_matrix.json",
    log:
        "logs/train_similarity_matrix.log",
    benchmark:
        "benchmarks/rules/train_similarity_matrix.tsv"
    priority: PRIORITY["train_similarity_matrix"]
    conda:
        ENV
    # One thread: it used 0.7 of a core on two (sparse products), and a two-thread
    # job waits for both cores.
    threads: 1
    resources:
        mem_mb=3000,
        runtime=60,
    params:
        options=config["seeds"]["similarity_matrix"],
        seed=config["seed"],
        ns_score=config["dataset"]["kind"] == "ukbench",
    script:
        "../scripts/train_similarity_matrix.py"


rule seeds_comparison:
    input:
        images=rules.index_dataset.output.images,
        records=seeds_records(),
        signatures=comparison_signature_files(),
        projectors=comparison_projectors(),
        histories=histories(comparison_projectors()),
        baselines=baseline_results(config["seeds"]["comparison_signatures"]),
    output:
        table=report_table("seeds_comparison"),
        figure=report_figure(
            "seeds_comparison", "Seeds comparison", "seeds_comparison_figure"
        ),
        records_csv="results/seeds/comparison.csv",
    log:
        "logs/seeds_comparison.log",
    benchmark:
        "benchmarks/rules/seeds_comparison.tsv"
    priority: PRIORITY["seeds_comparison"]
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    params:
        signature_names=config["seeds"]["comparison_signatures"],
        dims=config["sparse"]["dims"],
        ns_score=config["dataset"]["kind"] == "ukbench",
    script:
        "../scripts/seeds_comparison.py"


rule frontier:
    input:
        records=rules.seeds_comparison.output.records_csv,
    output:
        table=report_table("frontier"),
        figure=report_figure("frontier", "Accuracy-cost frontier", "frontier_figure"),
    log:
        "logs/frontier.log",
    benchmark:
        "benchmarks/rules/frontier.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    script:
        "../scripts/frontier.py"
