"""Snakemake script of rule evaluate_reduction_baselines: the reductions a user would pick instead, per signature."""

from ndir.stages.baseline import evaluate_reduction_baselines
from ndir.stages.common import run_rule

run_rule(snakemake, evaluate_reduction_baselines)  # noqa: F821 (snakemake is injected by the script directive)
