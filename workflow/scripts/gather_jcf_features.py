"""Snakemake script of rule gather_jcf_features: Concatenate the JCF local-feature shards in the image table's order."""

from ndir.stages.common import run_rule
from ndir.stages.jcf import gather_jcf_features

run_rule(snakemake, gather_jcf_features)  # noqa: F821 (snakemake is injected by the script directive)
