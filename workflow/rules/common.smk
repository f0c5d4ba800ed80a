from snakemake.utils import validate

from ndir.config import check_config

validate(config, schema="../schemas/config.schema.yaml")
check_config(config)


wildcard_constraints:
    encoding="vlad|fv",
    K=r"\d+",
    shard=r"\d+",


ENV = "../envs/ndir.yaml"
TABLE_FORMATS = ["csv", "md", "tex"]


def signature_names():
    """Signature names such as ``vlad-64`` for every (encoding, K) of the config."""
    return [
        f"{encoding}-{K}"
        for encoding in config["signatures"]["encodings"]
        for K in config["signatures"]["codebook_sizes"]
    ]


def codebook_files():
    return [f"results/codebooks/{name}.npz" for name in signature_names()]


def shard_files():
    n_shards = config["signatures"]["shards"]
    return [f"results/signatures/shards/{s}.npz" for s in range(n_shards)]


def dataset_images(wildcards):
    """The embedded set is built by a rule; a real data set is read in place."""
    if config["dataset"]["kind"] == "embedded":
        return "results/data/embedded"
    return []


def dataset_root():
    if config["dataset"]["kind"] == "embedded":
        return "results/data/embedded"
    return config["dataset"]["path"]


def descriptor_params():
    return {
        "max_width": config["preprocess"]["max_width"],
        "step": config["descriptors"]["step"],
        "cell_sizes": config["descriptors"]["cell_sizes"],
    }


def table1_outputs():
    return expand("results/tables/table1.{ext}", ext=TABLE_FORMATS)


def codebook_size(wildcards):
    """The codebook size K of a rule's wildcards, as an int."""
    return int(wildcards.K)


def shard_index(wildcards):
    """The shard number of a rule's wildcards, as an int."""
    return int(wildcards.shard)
