"""Snakemake script of rule readings: which of the paper's findings hold on this run,
with paired tests over the test queries.
"""

from ndir.stages.common import run_rule
from ndir.stages.readings import readings

run_rule(snakemake, readings)  # noqa: F821 (snakemake is injected by the script directive)
