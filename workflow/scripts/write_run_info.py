"""Snakemake script of rule write_run_info: Write ``results/run_info.json`` once every table and figure exists."""

from ndir.stages.common import run_rule
from ndir.stages.report import write_run_info

run_rule(snakemake, write_run_info)  # noqa: F821 (snakemake is injected by the script directive)
