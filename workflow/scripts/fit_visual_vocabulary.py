"""Snakemake script of rule fit_visual_vocabulary: Fit the visual vocabulary (k-means, faiss) of
the bag of visual words.
"""

from ndir.stages.common import run_rule
from ndir.stages.seeds import fit_visual_vocabulary

run_rule(snakemake, fit_visual_vocabulary)  # noqa: F821 (snakemake is injected by the script directive)
