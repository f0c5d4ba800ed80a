rule encode_shard:
    input:
        images=rules.index_dataset.output.images,
        codebooks=codebook_files(),
        vocabulary=VOCABULARY if seeds_enabled() else [],
    output:
        signatures="results/signatures/shards/{shard}.npz",
        counts=f"{WORD_COUNT_SHARDS}{{shard}}.npz" if seeds_enabled() else [],
    log:
        "logs/encode_shard/{shard}.log",
    benchmark:
        "benchmarks/rules/encode_shard/{shard}.tsv"
    priority: PRIORITY["encode_shard"]
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=3000,
        runtime=60,
    params:
        shard=shard_index,
        n_shards=config["signatures"]["shards"],
        alpha=config["signatures"]["power_alpha"],
        descriptors=descriptor_params(config),
    script:
        "../scripts/encode_shard.py"


rule gather_signatures:
    input:
        images=rules.index_dataset.output.images,
        shards=shard_files(),
    output:
        signatures=f"results/signatures/{names.SIGNATURE}.npy",
    log:
        f"logs/gather_signatures/{names.SIGNATURE}.log",
    benchmark:
        f"benchmarks/rules/gather_signatures/{names.SIGNATURE}.tsv"
    priority: PRIORITY["gather_signatures"]
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        name=names.SIGNATURE,
    script:
        "../scripts/gather_signatures.py"
