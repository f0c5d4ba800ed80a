from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/codebooks.smk"
include: "workflow/rules/signatures.smk"
include: "workflow/rules/baseline.smk"
include: "workflow/rules/sparse.smk"


rule all:
    default_target: True
    input:
        table1_outputs(),
        sparse_outputs(),
