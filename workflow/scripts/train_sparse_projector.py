"""Snakemake script of rule train_sparse_projector: Learn a sparse rank projector (Algorithm 1) on
the training split.
"""

from ndir.stages.common import run_rule
from ndir.stages.sparse import train_sparse_projector

run_rule(snakemake, train_sparse_projector)  # noqa: F821 (snakemake is injected by the script directive)
