from ndir.stages.sparse import training_settings


# A grid job makes the cells that rule train_sparse_projector would make one by one.
ruleorder: train_sparse_projectors > train_sparse_projector


rule train_sparse_projectors:
    input:
        images=rules.index_dataset.output.images,
        signatures="results/signatures/{signature}.npy",
    output:
        projectors=grid_trainings(".npz"),
        histories=grid_trainings(".csv"),
    log:
        "logs/train_sparse_projectors/{signature}/tau{tau}.log",
    benchmark:
        "benchmarks/rules/train_sparse_projectors/{signature}/tau{tau}.tsv"
    wildcard_constraints:
        tau=grid_sparsity(),
    priority: training_priority
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=grid_training_runtime,
    params:
        # The trainings of a Table II row (and Fig. 2's tau = 0) in one job: every R at
        # the tau of the wildcards, on signatures loaded once.
        encoding=lambda wildcards: signatures()[wildcards.signature][0],
        codebook_size=lambda wildcards: signatures()[wildcards.signature][1],
        dims=config["sparse"]["dims"],
        sparsity=lambda wildcards: float(wildcards.tau),
        settings=training_settings(config["sparse"]),
        seed=config["seed"],
        ns_score=config["dataset"]["kind"] == "ukbench",
    script:
        "../scripts/train_sparse_projectors.py"


rule train_sparse_projector:
    input:
        images=rules.index_dataset.output.images,
        signatures="results/signatures/{signature}.npy",
    output:
        projector=f"results/sparse/{{signature}}/{names.PROJECTOR}.npz",
        history=f"results/sparse/{{signature}}/{names.PROJECTOR}.csv",
    log:
        f"logs/train_sparse_projector/{{signature}}/{names.PROJECTOR}.log",
    benchmark:
        f"benchmarks/rules/train_sparse_projector/{{signature}}/{names.PROJECTOR}.tsv"
    priority: training_priority
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=training_runtime,
    params:
        # The cell of the wildcards, outside the grid (Fig. 3's other tau): its
        # signature's (encoding, K), R and tau.
        encoding=lambda wildcards: signatures()[wildcards.signature][0],
        codebook_size=lambda wildcards: signatures()[wildcards.signature][1],
        n_components=lambda wildcards: int(wildcards.R),
        sparsity=lambda wildcards: float(wildcards.tau),
        # The section's keys that a training reads, under their config names: the
        # estimator's names are ndir.projection.sparse_rank.CONFIG_PARAMETERS's.
        settings=training_settings(config["sparse"]),
        seed=config["seed"],
        ns_score=config["dataset"]["kind"] == "ukbench",
    script:
        "../scripts/train_sparse_projector.py"


rule table2:
    input:
        histories=table2_histories(),
        baselines=baseline_results(),
        data_report=rules.index_dataset.output.report,
    output:
        table=report_table("table2"),
        table_dot=report_table("table2_dot"),
        ablation=report_table("table2_ablation"),
    log:
        "logs/table2.log",
    benchmark:
        "benchmarks/rules/table2.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=500,
        runtime=5,
    script:
        "../scripts/table2.py"


rule cost_table:
    input:
        images=rules.index_dataset.output.images,
        signatures=f"results/signatures/{convergence_signature()}.npy",
        projectors=cost_projectors(),
        histories=histories(cost_projectors()),
    output:
        table=report_table("costs"),
    log:
        "logs/cost_table.log",
    benchmark:
        "benchmarks/rules/cost_table.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=20,
    params:
        signature=convergence_signature(),
    script:
        "../scripts/cost_table.py"


rule convergence_figures:
    input:
        fig2=figure2_histories(),
        fig3=figure3_histories(),
        fig4=figure4_histories(),
    output:
        figures=[
            path
            for name, label in CONVERGENCE_FIGURES.items()
            for path in report_figure(name, label)
        ],
    log:
        "logs/convergence_figures.log",
    benchmark:
        "benchmarks/rules/convergence_figures.tsv"
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        signature=convergence_signature(),
    script:
        "../scripts/convergence_figures.py"
