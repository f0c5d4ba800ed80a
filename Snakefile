from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")


# config.yaml of this repository, wherever the run's folder (-d) is: the one home of every
# value, which --configfile and --config override key by key.
configfile: Path(workflow.basedir) / "config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/codebooks.smk"
include: "workflow/rules/signatures.smk"
include: "workflow/rules/baseline.smk"
include: "workflow/rules/sparse.smk"
include: "workflow/rules/seeds.smk"
include: "workflow/rules/jcf.smk"
include: "workflow/rules/readings.smk"
include: "workflow/rules/browse.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        final_outputs(),
        rules.write_run_info.output.run_info,
