"""Snakemake script of rule evaluate_tfidf: Record of the tf-idf baseline."""

from ndir.stages.common import run_rule
from ndir.stages.seeds import evaluate_tfidf

run_rule(snakemake, evaluate_tfidf)  # noqa: F821 (snakemake is injected by the script directive)
