"""Snakemake script of rule train_similarity_matrix: Learn the sparse similarity matrix of Yan and
Yu and record its test mAP.
"""

from ndir.stages.common import run_rule
from ndir.stages.seeds import train_similarity_matrix

run_rule(snakemake, train_similarity_matrix)  # noqa: F821 (snakemake is injected by the script directive)
