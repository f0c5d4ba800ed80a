"""Snakemake script of rule browse: the run's retrieval browser, results/browse/index.html."""

from ndir.stages.browse import browse
from ndir.stages.common import run_rule

run_rule(snakemake, browse)  # noqa: F821 (snakemake is injected by the script directive)
