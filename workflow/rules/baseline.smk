rule evaluate_pca_baseline:
    input:
        images="results/data/images.csv",
        signatures="results/signatures/{encoding}-{K}.npy",
    output:
        results="results/evaluation/pca/{encoding}-{K}.csv",
    log:
        "logs/evaluate_pca_baseline/{encoding}-{K}.log",
    benchmark:
        "benchmarks/rules/evaluate_pca_baseline/{encoding}-{K}.tsv"
    conda:
        ENV
    threads: 2
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        dims=config["baseline"]["dims"],
        ns_score=config["dataset"]["kind"] == "ukbench",
    script:
        "../scripts/evaluate_pca_baseline.py"


rule evaluate_reduction_baselines:
    input:
        images="results/data/images.csv",
        signatures="results/signatures/{encoding}-{K}.npy",
    output:
        results="results/evaluation/baselines/{encoding}-{K}.csv",
    log:
        "logs/evaluate_reduction_baselines/{encoding}-{K}.log",
    benchmark:
        "benchmarks/rules/evaluate_reduction_baselines/{encoding}-{K}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        signature="{encoding}-{K}",
        dims=config["sparse"]["dims"],
        sparsity=config["sparse"]["sparsity"],
        random_seeds=config["baseline"]["random_seeds"],
        pq_bytes=config["baseline"]["pq"]["bytes"],
        pq_nbits=config["baseline"]["pq"]["nbits"],
        pq_subvector_dims=config["baseline"]["pq"]["subvector_dims"],
        seed=config["seed"],
        ns_score=config["dataset"]["kind"] == "ukbench",
    script:
        "../scripts/evaluate_reduction_baselines.py"


rule table1:
    input:
        results=expand(
            "results/evaluation/pca/{name}.csv",
            name=signature_names(),
        ),
        data_report="results/data/report.json",
    output:
        table=report_table("table1"),
    log:
        "logs/table1.log",
    benchmark:
        "benchmarks/rules/table1.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=500,
        runtime=5,
    script:
        "../scripts/table1.py"
