"""Snakemake script of rule table2: Table II (test mAP of the sparse projectors, L2 and dot
scorings) and the thresholded-PCA ablation.
"""

from ndir.stages.common import run_rule
from ndir.stages.sparse import table2

run_rule(snakemake, table2)  # noqa: F821 (snakemake is injected by the script directive)
