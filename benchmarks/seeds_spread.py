"""Spread of the other seeds' rows over their own random states: tf-idf, the sparse
similarity matrix and SOML.

Usage (after a run, from the repository root)::

    python benchmarks/seeds_spread.py --run . --seeds 3 --out seeds-spread

What issue 48's accuracy guard calls "the seeds' rows within their seed spread", measured
as ``table2_spread.py`` measures Table II's: on the run's own descriptor sample, images
and signatures, each seed of ``--seeds`` (the run's, then the next ones) draws again what
the run's seed drew for these rows, through the workflow's own stages
(``ndir.stages.seeds``, and ``ndir.stages.signatures.encode_shard`` without codebooks):
the vocabulary's k-means start (``fit_visual_vocabulary``), hence every image's word
counts (``encode_shard``, ``gather_bovw``) and the tf-idf
row; the similarity matrix's triplets and hold-out; SOML's triplets, on tf-idf and on
the signatures of ``seeds.soml.signatures``. The run's seed is read from the run's own
records (the same values: the stages are deterministic), the others recomputed.

Prints and writes (``<out>.csv``) per row (method, input) the number of seeds, mean,
s.d. (n - 1), minimum and maximum test mAP (%) and ``run_seed``, the run's value. A seed
costs about what the run spent on these rules (the default run: the 20,000-word k-means
on both cores, about 130 s of bag of words spread over ``--jobs`` processes, 65 s of
learning), about 2.5 min on 2 cores.
"""

import argparse
import json
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
from table2_spread import limit_blas, run_config, spread

from ndir import names
from ndir.descriptors import descriptor_params
from ndir.stages import seeds as stages
from ndir.stages.signatures import encode_shard


def soml_runs(config):
    """(variant, input) of every SOML training of the run."""
    soml = config["seeds"]["soml"]
    return [(variant, name) for variant in soml["variants"] for name in soml["signatures"]]


def record_map(path):
    """(method, input, test mAP %) of a comparison record."""
    record = json.loads(Path(path).read_text())
    return record["method"], record["signature"], 100 * record["test_map"]


def run_records(run, config):
    """The run's own records of the rows: its seed's values."""
    seeds = run / "results" / "seeds"
    paths = [seeds / "tfidf.json", seeds / "similarity_matrix.json"]
    paths += [seeds / f"soml-{variant}" / f"{name}.json" for variant, name in soml_runs(config)]
    return [record_map(path) for path in paths]


def recompute(run, config, seed, jobs, work):
    """The rows' records at ``seed``, every stage writing under ``work``."""
    results = run / "results"
    images = results / "data" / "images.csv"
    bovw = config["seeds"]["bovw"]
    vocabulary = work / "vocabulary.npz"
    stages.fit_visual_vocabulary(
        results / "codebooks" / "descriptor_sample.npy",
        vocabulary,
        bovw["vocabulary_size"],
        bovw["kmeans_iterations"],
        bovw["nprobe"],
        seed,
    )
    n_shards = config["signatures"]["shards"]
    shards = [work / f"bovw-{shard}.npz" for shard in range(n_shards)]
    with ProcessPoolExecutor(jobs, initializer=limit_blas) as pool:
        encoded = [
            pool.submit(
                encode_shard, images, [], None, shard, n_shards, 1.0, descriptor_params(config), vocabulary, path
            )
            for shard, path in enumerate(shards)
        ]
        for future in encoded:
            future.result()
    counts = work / "bovw.npz"
    stages.gather_bovw(images, shards, counts)
    records = [work / "tfidf.json", work / "similarity_matrix.json"]
    ns_score = config["dataset"]["kind"] == "ukbench"
    stages.evaluate_tfidf(images, counts, records[0], ns_score)
    options = config["seeds"]["similarity_matrix"]
    stages.train_similarity_matrix(images, counts, vocabulary, work / "sm.npz", records[1], options, seed, ns_score)
    soml = config["seeds"]["soml"]
    with ProcessPoolExecutor(jobs, initializer=limit_blas) as pool:
        trainings = []
        for variant, name in soml_runs(config):
            inputs = counts if name == names.TFIDF else results / "signatures" / f"{name}.npy"
            record = work / f"soml-{variant}-{name}.json"
            records.append(record)
            trainings.append(
                pool.submit(
                    stages.train_soml,
                    images,
                    inputs,
                    work / f"soml-{variant}-{name}.npz",
                    record,
                    name,
                    variant,
                    stages.soml_options(soml, variant),
                    soml["negatives_per_pair"],
                    soml["epochs"],
                    seed,
                    ns_score,
                )
            )
        for future in trainings:
            future.result()
    return [record_map(path) for path in records]


def measure(run, seeds, jobs):
    """Long table ``method, input, seed, test_map`` (%) of every row and seed."""
    config = run_config(run)
    rows = []
    for seed in seeds:
        if seed == config["seed"]:
            maps = run_records(run, config)
        else:
            with tempfile.TemporaryDirectory() as work:
                maps = recompute(run, config, seed, jobs, Path(work))
        rows += [(method, signature, seed, value) for method, signature, value in maps]
        print(f"seed {seed}: " + ", ".join(f"{m} ({s}) {v:.2f}" for m, s, v in maps), flush=True)
    return pd.DataFrame(rows, columns=["method", "input", "seed", "test_map"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="the working directory of a finished run")
    parser.add_argument("--seeds", type=int, default=3, help="random states: the run's seed and the next ones")
    parser.add_argument("--jobs", type=int, default=2, help="bag-of-words shards and SOML trainings at once")
    parser.add_argument("--out", type=Path, help="write <out>.csv")
    args = parser.parse_args()
    run = args.run.resolve()
    run_seed = run_config(run)["seed"]
    # The image table's paths are relative to the run's working directory.
    os.chdir(run)
    table = spread(measure(run, range(run_seed, run_seed + args.seeds), args.jobs), run_seed, ("method", "input"))
    print(f"\nTest mAP % over seeds {run_seed}-{run_seed + args.seeds - 1}:\n")
    print(table.to_markdown(index=False, floatfmt=".2f"))
    if args.out:
        table.to_csv(args.out.with_suffix(".csv"), index=False)


if __name__ == "__main__":
    main()
