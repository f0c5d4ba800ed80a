"""Snakemake script of rule train_soml: Learn a SOML diagonal metric and record its test mAP."""

from ndir.stages.common import run_rule
from ndir.stages.seeds import train_soml

run_rule(snakemake, train_soml)  # noqa: F821 (snakemake is injected by the script directive)
