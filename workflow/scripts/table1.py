"""Snakemake script of rule table1: Assemble Table I (mAP in % on the test split) in CSV, Markdown and LaTeX."""

from ndir.stages.baseline import table1
from ndir.stages.common import run_rule

run_rule(snakemake, table1)  # noqa: F821 (snakemake is injected by the script directive)
