"""Snakemake script of rule extract_jcf_features: Local features of one shard of the images for JCF
(subsampled dense HOG, codebook PCA).
"""

from ndir.stages.common import run_rule
from ndir.stages.jcf import extract_jcf_features

run_rule(snakemake, extract_jcf_features)  # noqa: F821 (snakemake is injected by the script directive)
