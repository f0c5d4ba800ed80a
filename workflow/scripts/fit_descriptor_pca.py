"""Snakemake script of rule fit_descriptor_pca: Fit the PCA of local descriptors (paper: 80 dims,
for the Fisher Vectors).
"""

from ndir.stages.codebooks import fit_descriptor_pca
from ndir.stages.common import run_rule

run_rule(snakemake, fit_descriptor_pca)  # noqa: F821 (snakemake is injected by the script directive)
