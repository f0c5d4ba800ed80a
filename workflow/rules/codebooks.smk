rule sample_descriptors:
    input:
        images=rules.index_dataset.output.images,
    output:
        sample="results/codebooks/descriptor_sample.npy",
    log:
        "logs/sample_descriptors.log",
    benchmark:
        "benchmarks/rules/sample_descriptors.tsv"
    conda:
        ENV
    # The first job, alone: its images described on both cores.
    threads: 2
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        per_image=config["codebooks"]["descriptors_per_image"],
        seed=config["seed"],
        descriptors=descriptor_params(config),
    script:
        "../scripts/sample_descriptors.py"


rule fit_descriptor_pca:
    input:
        sample=rules.sample_descriptors.output.sample,
    output:
        pca="results/codebooks/pca.npz",
    log:
        "logs/fit_descriptor_pca.log",
    benchmark:
        "benchmarks/rules/fit_descriptor_pca.tsv"
    priority: PRIORITY["fit_descriptor_pca"]
    conda:
        ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=5,
    params:
        n_components=config["codebooks"]["pca_dims"],
    script:
        "../scripts/fit_descriptor_pca.py"


rule fit_vlad_codebook:
    input:
        sample=rules.sample_descriptors.output.sample,
    output:
        codebook=f"results/codebooks/{names.signature_name('vlad', '{K}')}.npz",
    log:
        "logs/fit_vlad_codebook/{K}.log",
    benchmark:
        "benchmarks/rules/fit_vlad_codebook/{K}.tsv"
    priority: PRIORITY["fit_vlad_codebook"]
    conda:
        ENV
    threads: 2
    resources:
        mem_mb=3000,
        runtime=30,
    params:
        n_clusters=codebook_size,
        n_components=config["codebooks"]["pca_dims"],
        n_iter=config["codebooks"]["kmeans_iterations"],
        seed=config["seed"],
    script:
        "../scripts/fit_vlad_codebook.py"


rule fit_fisher_codebook:
    input:
        sample=rules.sample_descriptors.output.sample,
        pca=rules.fit_descriptor_pca.output.pca,
    output:
        codebook=f"results/codebooks/{names.signature_name('fv', '{K}')}.npz",
    log:
        "logs/fit_fisher_codebook/{K}.log",
    benchmark:
        "benchmarks/rules/fit_fisher_codebook/{K}.tsv"
    priority: PRIORITY["fit_fisher_codebook"]
    conda:
        ENV
    # One thread (a few seconds at K <= 256; the codebook does not depend on it): a
    # two-thread job waits for both cores, which left one idle for 2 min beside a
    # single-thread JCF training in the default run.
    threads: 1
    resources:
        mem_mb=3000,
        runtime=30,
    params:
        n_clusters=codebook_size,
        n_iter=config["codebooks"]["gmm_iterations"],
        seed=config["seed"],
    script:
        "../scripts/fit_fisher_codebook.py"
