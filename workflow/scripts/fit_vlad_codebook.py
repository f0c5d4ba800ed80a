"""Snakemake script of rule fit_vlad_codebook: Fit k-means and the cluster-wise PCA of a VLAD-K codebook."""

from ndir.stages.codebooks import fit_vlad_codebook
from ndir.stages.common import run_rule

run_rule(snakemake, fit_vlad_codebook)  # noqa: F821 (snakemake is injected by the script directive)
