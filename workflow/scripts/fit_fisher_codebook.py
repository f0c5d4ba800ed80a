"""Snakemake script of rule fit_fisher_codebook: Fit the diagonal GMM of an FV-K codebook on PCA-reduced descriptors."""

from ndir.stages.codebooks import fit_fisher_codebook
from ndir.stages.common import run_rule

run_rule(snakemake, fit_fisher_codebook)  # noqa: F821 (snakemake is injected by the script directive)
