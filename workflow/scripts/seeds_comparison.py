"""Snakemake script of rule seeds_comparison: The comparison table and figure of the sparse similarity learners."""

from ndir.stages.common import run_rule
from ndir.stages.seeds import seeds_comparison

run_rule(snakemake, seeds_comparison)  # noqa: F821 (snakemake is injected by the script directive)
