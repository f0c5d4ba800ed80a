"""Snakemake script of rule sample_descriptors: Sample ``per_image`` local descriptors from each training image."""

from ndir.stages.codebooks import sample_descriptors
from ndir.stages.common import run_rule

run_rule(snakemake, sample_descriptors)  # noqa: F821 (snakemake is injected by the script directive)
