from ndir.stages.jcf import training_settings as jcf_training_settings


rule extract_jcf_features:
    input:
        images=rules.index_dataset.output.images,
        pca=rules.fit_descriptor_pca.output.pca,
    output:
        features="results/jcf/features/shards/{shard}.npz",
    log:
        "logs/extract_jcf_features/{shard}.log",
    benchmark:
        "benchmarks/rules/extract_jcf_features/{shard}.tsv"
    priority: PRIORITY["extract_jcf_features"]
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1500,
        runtime=30,
    params:
        shard=shard_index,
        n_shards=config["signatures"]["shards"],
        per_image=config["seeds"]["jcf"]["descriptors_per_image"],
        seed=config["seed"],
        descriptors=descriptor_params(config),
    script:
        "../scripts/extract_jcf_features.py"


rule gather_jcf_features:
    input:
        images=rules.index_dataset.output.images,
        shards=shard_files("results/jcf/features/shards/"),
    output:
        features="results/jcf/features.npz",
    log:
        "logs/gather_jcf_features.log",
    benchmark:
        "benchmarks/rules/gather_jcf_features.tsv"
    priority: PRIORITY["gather_jcf_features"]
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    script:
        "../scripts/gather_jcf_features.py"


# K1: second-order pooling without codebook; K > 1: with the Fisher codebook fv-K.
rule evaluate_second_order:
    input:
        unpack(jcf_pooling_codebook),
        images=rules.index_dataset.output.images,
        features=rules.gather_jcf_features.output.features,
    output:
        record="results/jcf/second_order_pooling-K{K}.json",
        similarities="results/jcf/second_order_pooling-K{K}.npy",
    log:
        "logs/evaluate_second_order/K{K}.log",
    benchmark:
        "benchmarks/rules/evaluate_second_order/K{K}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1500,
        runtime=15,
    params:
        n_clusters=codebook_size,
        ns_score=config["dataset"]["kind"] == "ukbench",
    script:
        "../scripts/evaluate_second_order.py"


rule train_jcf:
    input:
        unpack(jcf_run_codebook),
        images=rules.index_dataset.output.images,
        features=rules.gather_jcf_features.output.features,
    output:
        model="results/jcf/{jcf_run}.npz",
        record="results/jcf/{jcf_run}.json",
        random_record="results/jcf/{jcf_run}-random.json",
        history="results/jcf/{jcf_run}.csv",
    log:
        "logs/train_jcf/{jcf_run}.log",
    benchmark:
        "benchmarks/rules/train_jcf/{jcf_run}.tsv"
    priority: PRIORITY["train_jcf"]
    conda:
        ENV
    # One BLAS thread: the learned model is then the same whatever --cores.
    threads: 1
    resources:
        mem_mb=2000,
        runtime=60,
    params:
        n_clusters=jcf_clusters,
        n_components=jcf_components,
        n_shared=jcf_shared,
        # The section's keys that a training reads, under their config names: the
        # estimator's names are ndir.jcf.CONFIG_PARAMETERS's.
        settings=jcf_training_settings(config["seeds"]["jcf"]),
        seed=config["seed"],
        ns_score=config["dataset"]["kind"] == "ukbench",
    script:
        "../scripts/train_jcf.py"


rule jcf_report:
    input:
        data_report=rules.index_dataset.output.report,
        records=jcf_records(),
    output:
        table=report_table("jcf"),
        figure=report_figure(
            "jcf_recall_vs_parameters", "JCF: Recall@1 against parameters"
        ),
    log:
        "logs/jcf_report.log",
    benchmark:
        "benchmarks/rules/jcf_report.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    script:
        "../scripts/jcf_report.py"
