"""Snakemake script of rule gather_bovw: Stack the word-count shards into one CSR matrix."""

from ndir.stages.common import run_rule
from ndir.stages.seeds import gather_bovw

run_rule(snakemake, gather_bovw)  # noqa: F821 (snakemake is injected by the script directive)
