rule evaluate_pca_baseline:
    input:
        images=rules.index_dataset.output.images,
        signatures=rules.gather_signatures.output.signatures,
    output:
        results=f"results/evaluation/pca/{names.SIGNATURE}.csv",
    log:
        f"logs/evaluate_pca_baseline/{names.SIGNATURE}.log",
    benchmark:
        f"benchmarks/rules/evaluate_pca_baseline/{names.SIGNATURE}.tsv"
    conda:
        ENV
    # One thread: the same table as on two (its products are summed in float64), and
    # a two-thread job waits until both cores are free.
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        encoding="{encoding}",
        codebook_size=codebook_size,
        dims=config["baseline"]["dims"],
        ns_score=config["dataset"]["kind"] == "ukbench",
    script:
        "../scripts/evaluate_pca_baseline.py"


rule evaluate_reduction_baselines:
    input:
        images=rules.index_dataset.output.images,
        signatures=rules.gather_signatures.output.signatures,
    output:
        results=f"results/evaluation/baselines/{names.SIGNATURE}.csv",
    log:
        f"logs/evaluate_reduction_baselines/{names.SIGNATURE}.log",
    benchmark:
        f"benchmarks/rules/evaluate_reduction_baselines/{names.SIGNATURE}.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        signature=names.SIGNATURE,
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
        data_report=rules.index_dataset.output.report,
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
