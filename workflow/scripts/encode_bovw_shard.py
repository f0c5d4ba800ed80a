"""Snakemake script of rule encode_bovw_shard: Word counts of one shard of the images."""

from ndir.stages.common import run_rule
from ndir.stages.seeds import encode_bovw_shard

run_rule(snakemake, encode_bovw_shard)  # noqa: F821 (snakemake is injected by the script directive)
