import sys


rule retrievals_figure:
    input:
        images=rules.index_dataset.output.images,
        signatures=f"results/signatures/{convergence_signature()}.npy",
        projector=retrievals_projector(),
    output:
        figure=report_figure("retrievals", "Retrievals"),
    log:
        "logs/retrievals_figure.log",
    benchmark:
        "benchmarks/rules/retrievals_figure.tsv"
    conda:
        ENV
    # One thread: a two-thread job waits until both cores are free.
    threads: 1
    resources:
        mem_mb=4000,
        runtime=5,
    params:
        signature=convergence_signature(),
        n_queries=5,
        k=5,
        seed=config["seed"],
    script:
        "../scripts/retrievals_figure.py"


rule write_run_info:
    input:
        data_report=rules.index_dataset.output.report,
        outputs=final_outputs(),
    output:
        run_info=report(
            "results/run_info.json",
            caption="../report/run_info.rst",
            category="Provenance",
            labels={"file": "run_info.json"},
        ),
        hardware=report(
            "results/hardware.html",
            caption="../report/hardware.rst",
            category="Provenance",
            labels={"file": "hardware"},
        ),
    log:
        "logs/write_run_info.log",
    # Its own time is not in the run's summary, which it writes from the others'.
    benchmark:
        "benchmarks/rules/write_run_info.tsv"
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


onsuccess:
    # Where the results are, with one headline line; and a line when input files were
    # left out (skipped.csv names them).
    from ndir.stages.data import input_summary
    from ndir.stages.report import finished_run

    lines = finished_run(
        rules.table1.output.table[0],
        rules.table2.output.table[0],
        "results/tables",
        "results/figures",
    )
    left_out = input_summary(
        rules.index_dataset.output.report, rules.index_dataset.output.skipped
    )
    for line in lines + ([left_out] if left_out else []):
        print(line, file=sys.stderr)
