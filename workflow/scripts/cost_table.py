"""Snakemake script of rule cost_table: Storage and projection cost of each (R, tau) projector, with its test mAP."""

from ndir.stages.common import run_rule
from ndir.stages.sparse import cost_table

run_rule(snakemake, cost_table)  # noqa: F821 (snakemake is injected by the script directive)
