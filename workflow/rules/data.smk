rule build_embedded_dataset:
    output:
        folder=directory("results/data/embedded"),
    log:
        "logs/build_embedded_dataset.log",
    benchmark:
        "benchmarks/rules/build_embedded_dataset.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        n_groups=config["embedded"]["n_groups"],
        view_size=config["embedded"]["view_size"],
        allow_overlap=config["embedded"]["allow_overlap"],
        sibling_overlap=config["embedded"]["sibling_overlap"],
        seed=config["seed"],
    script:
        "../scripts/build_embedded_dataset.py"


rule fetch_dataset:
    output:
        images=directory(fetch_paths()["images"]),
        record=fetch_paths()["record"],
    log:
        "logs/fetch_dataset.log",
    benchmark:
        "benchmarks/rules/fetch_dataset.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=500,
        runtime=600,
    params:
        archives=fetch_paths()["archives"],
        kind=config["dataset"]["kind"],
        source=lambda wildcards: config["download"][config["dataset"]["kind"]],
    script:
        "../scripts/fetch_dataset.py"


rule index_dataset:
    input:
        dataset_images,
    output:
        images="results/data/images.csv",
        skipped="results/data/skipped.csv",
        report="results/data/report.json",
    log:
        "logs/index_dataset.log",
    benchmark:
        "benchmarks/rules/index_dataset.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=20,
    params:
        kind=config["dataset"]["kind"],
        root=dataset_root(),
        train_fraction=config["dataset"]["train_fraction"],
        keep_together=keep_together(),
        seed=config["seed"],
        descriptors=descriptor_params(config),
        download_record=download_record(),
        limits=size_limits(config),
    script:
        "../scripts/index_dataset.py"
