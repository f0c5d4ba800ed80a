"""Snakemake script of rule fetch_dataset: Download, check and unpack INRIA Holidays or UKBench."""

from ndir.stages.common import run_rule
from ndir.stages.data import fetch_dataset

run_rule(snakemake, fetch_dataset)  # noqa: F821 (snakemake is injected by the script directive)
