"""Snakemake script of rule retrievals_figure: test queries and their top results under the full
signature, PCA and the sparse projector.
"""

from ndir.stages.common import run_rule
from ndir.stages.report import retrievals_figure

run_rule(snakemake, retrievals_figure)  # noqa: F821 (snakemake is injected by the script directive)
