"""Snakemake script of rule write_run_info: Write ``results/run_info.json`` once every table and figure exists."""

from ndir.pipeline import run_rule, write_run_info

run_rule(snakemake, write_run_info)  # noqa: F821 (snakemake is injected by the script directive)
