"""Snakemake script of rule train_jcf: Learn one JCF model and record it and its random initialisation."""

from ndir.stages.common import run_rule
from ndir.stages.jcf import train_jcf

run_rule(snakemake, train_jcf)  # noqa: F821 (snakemake is injected by the script directive)
