"""Snakemake script of rule jcf_report: The JCF table and the Recall@1-against-parameters figure."""

from ndir.stages.common import run_rule
from ndir.stages.jcf import jcf_report

run_rule(snakemake, jcf_report)  # noqa: F821 (snakemake is injected by the script directive)
