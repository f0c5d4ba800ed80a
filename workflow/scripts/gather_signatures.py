"""Snakemake script of rule gather_signatures: Concatenate one signature's shards into an
(n_images, D) float32 ``.npy``.
"""

from ndir.stages.common import run_rule
from ndir.stages.signatures import gather_signatures

run_rule(snakemake, gather_signatures)  # noqa: F821 (snakemake is injected by the script directive)
