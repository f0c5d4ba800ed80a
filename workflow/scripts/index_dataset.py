"""Snakemake script of rule index_dataset: Scan, check and split a data set; write the image table and a data report."""

from ndir.stages.common import run_rule
from ndir.stages.data import index_dataset

run_rule(snakemake, index_dataset)  # noqa: F821 (snakemake is injected by the script directive)
