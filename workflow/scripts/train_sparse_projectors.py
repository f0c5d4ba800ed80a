"""Snakemake script of rule train_sparse_projectors: Learn the sparse rank projectors
(Algorithm 1) of one signature at every R of ``sparse.dims`` and one tau.
"""

from ndir.stages.common import run_rule
from ndir.stages.sparse import train_sparse_projectors

run_rule(snakemake, train_sparse_projectors)  # noqa: F821 (snakemake is injected by the script directive)
