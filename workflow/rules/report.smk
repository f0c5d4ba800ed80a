rule write_run_info:
    input:
        data_report="results/data/report.json",
        outputs=table1_outputs() + sparse_outputs() + seeds_outputs(),
    output:
        run_info="results/run_info.json",
    log:
        "logs/write_run_info.log",
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=500,
        runtime=5,
    params:
        config=config,
        benchmarks="benchmarks/rules",
        repo=workflow.basedir,
    script:
        "../scripts/write_run_info.py"
