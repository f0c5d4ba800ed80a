"""Snakemake script of rule evaluate_pca_baseline: Test-split mAP of full signatures and of PCA-R
reductions fitted on train.
"""

from ndir.stages.baseline import evaluate_pca_baseline
from ndir.stages.common import run_rule

run_rule(snakemake, evaluate_pca_baseline)  # noqa: F821 (snakemake is injected by the script directive)
