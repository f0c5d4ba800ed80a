"""Snakemake script of rule evaluate_second_order: score second-order pooling on the test split,
without codebook or with the JCF codebook of one K.
"""

from ndir.stages.common import run_rule
from ndir.stages.jcf import evaluate_second_order

run_rule(snakemake, evaluate_second_order)  # noqa: F821 (snakemake is injected by the script directive)
