"""Snakemake script of rule frontier: test mAP against multiply-adds and bytes, the Pareto front drawn."""

from ndir.stages.common import run_rule
from ndir.stages.seeds import frontier

run_rule(snakemake, frontier)  # noqa: F821 (snakemake is injected by the script directive)
