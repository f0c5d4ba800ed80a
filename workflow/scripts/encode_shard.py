"""Snakemake script of rule encode_shard: Encode one shard of the images with every codebook."""

from ndir.stages.common import run_rule
from ndir.stages.signatures import encode_shard

run_rule(snakemake, encode_shard)  # noqa: F821 (snakemake is injected by the script directive)
