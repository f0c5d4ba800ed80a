"""Snakemake script of rule convergence_figures: Figures 2-4 of the paper from training histories, as PNG and PDF."""

from ndir.stages.common import run_rule
from ndir.stages.sparse import convergence_figures

run_rule(snakemake, convergence_figures)  # noqa: F821 (snakemake is injected by the script directive)
