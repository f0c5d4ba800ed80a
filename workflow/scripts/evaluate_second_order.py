"""Snakemake script of rule evaluate_second_order: Score second-order pooling without and with the JCF codebook on the test split."""

from ndir.stages.jcf import evaluate_second_order
from ndir.stages.common import run_rule

run_rule(snakemake, evaluate_second_order)  # noqa: F821 (snakemake is injected by the script directive)
