"""Snakemake script of rule build_embedded_dataset: Write the embedded near-duplicate set into
``folder`` (Holidays naming).
"""

from ndir.stages.common import run_rule
from ndir.stages.data import build_embedded_dataset

run_rule(snakemake, build_embedded_dataset)  # noqa: F821 (snakemake is injected by the script directive)
