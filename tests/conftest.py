import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ndir.codebooks import fit_descriptor_pca, fit_fisher_codebook
from ndir.data import build_embedded_dataset
from ndir.descriptors import image_descriptors
from ndir.encoding import power_l2_normalise
from ndir.projection import SparseRankProjector, save_projector

REPO = Path(__file__).resolve().parents[1]


def benchmark_script(name):
    """The module of ``benchmarks/<name>.py``, loaded with ``benchmarks/`` on ``sys.path``
    while it loads, for its imports of the scripts beside it (``timing``,
    ``table2_spread``, ``workflow_run``)."""
    folder = REPO / "benchmarks"
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    return module


def size_limits_for(max_dim):
    """:func:`ndir.sizes.size_limits` of a small config whose largest PCA output is
    ``max_dim``: 2-bit PQ, 4 codewords, 50 descriptors per image (index_dataset's ``limits``)."""
    return {
        "dims": {"baseline.dims": [max_dim], "sparse.dims": [max_dim], "sparse.convergence_dim": max_dim},
        "pq_nbits": 2,
        "pq_bytes": [1],
        "codebook_sizes": [4],
        "descriptors_per_image": 50,
    }


def import_or_skip(name, reason):
    """``pytest.importorskip`` on a developer's machine; in CI (``NDIR_CI=1``, set by
    ``.ci/run``, which installs every extra) a missing module fails the test instead
    of skipping it silently."""
    if os.environ.get("NDIR_CI"):
        return importlib.import_module(name)
    return pytest.importorskip(name, reason=reason)


def run_snakemake(workdir, *args, check=True, snakefile=REPO / "Snakefile"):
    """Run this repository's workflow (or the one of ``snakefile``) in ``workdir`` with
    the test interpreter's tools.

    The interpreter's ``bin`` goes first on PATH because Snakemake's script jobs
    start ``python`` from PATH.
    """
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(snakefile), "-d", str(workdir), *args]
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, check=check)


@pytest.fixture
def results_path(tmp_path):
    """A ``results`` folder in ``tmp_path``, where the workflow writes the files whose
    damage its messages name with the snakemake command that rebuilds them."""
    folder = tmp_path / "results"
    folder.mkdir()
    return folder


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """The workflow run once on the tiny config; yields its working directory."""
    workdir = tmp_path_factory.mktemp("tiny")
    result = run_snakemake(workdir, "--cores", "2", "--configfile", str(REPO / "tests/configs/tiny.yaml"), check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return workdir


@pytest.fixture
def paper_grid(tmp_path):
    """A Holidays config (an empty folder) planning K = 64 ... 512 for VLAD and FV."""
    holidays = tmp_path / "holidays"
    holidays.mkdir()
    config = tmp_path / "holidays.yaml"
    config.write_text(
        f"dataset: {{kind: holidays, path: {holidays}}}\nsignatures: {{codebook_sizes: [64, 128, 256, 512]}}\n"
    )
    return config


def small_training(max_iter, flat_map_evaluations=None, stop_at_perfect_map=False):
    """Arguments of a small Algorithm 1 training for the stage tests (R = 4, tau = 0.5, an
    evaluation every 5 steps): ``train_sparse_projector``'s cell, seed and ``settings``
    (the config's ``sparse`` keys it reads), ``max_iter`` steps."""
    settings = dict(
        max_iter=max_iter,
        queries_per_step=4,
        margin=1e-2,
        tol=1e-12,
        n_iter_no_change=None,
        renormalize=True,
        line_search="projected",
        eval_every=5,
        flat_map_evaluations=flat_map_evaluations,
        stop_at_perfect_map=stop_at_perfect_map,
    )
    return dict(n_components=4, sparsity=0.5, settings=settings, seed=0)


# Tiny retrieval models shared by the index and CLI tests.
STEP, CELLS, K, PCA_DIMS, R, TAU = 4, (4, 8), 4, 16, 8, 0.9


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """An FV-4 codebook on PCA-16 and a projector R=8, tau=0.9 learned on 6 groups of
    an embedded set, and 6 other groups (other photos) held apart for retrieval.

    Returns a dict with ``images`` (folder of the held-apart images), ``table`` (their
    image table), ``codebook``, ``projector`` (paths) and ``X`` (the held-apart
    images' normalised signatures, table order).
    """
    root = tmp_path_factory.mktemp("tiny_models")
    everything = build_embedded_dataset(root / "all", n_groups=12, seed=0, view_size=192)
    training = everything["group"].isin(np.unique(everything["group"])[:6]).to_numpy()
    images = root / "images"
    images.mkdir()
    for path in everything.loc[~training, "path"]:
        shutil.copy(path, images)
    table = everything[~training].reset_index(drop=True)
    table["path"] = [str(images / Path(path).name) for path in table["path"]]
    rng = np.random.default_rng(0)
    local = [image_descriptors(path, step=STEP, cell_sizes=CELLS) for path in everything["path"]]
    sample = np.concatenate(
        [d[rng.choice(len(d), size=min(200, len(d)), replace=False)] for d, train in zip(local, training) if train]
    )
    pca = fit_descriptor_pca(sample, n_components=PCA_DIMS)
    codebook = fit_fisher_codebook(sample, n_clusters=K, pca=pca, seed=0, n_iter=10)
    codebook.save(root / "fv-4.npz")
    signatures = power_l2_normalise(np.stack([codebook.encode(d) for d in local]))
    model = SparseRankProjector(n_components=R, sparsity=TAU, max_iter=20, random_state=0, n_jobs=1)
    model.fit(
        signatures[training],
        everything.loc[training, "group"].to_numpy(),
        queries=everything.loc[training, "is_query"].to_numpy(),
    )
    X = signatures[~training]
    save_projector(
        root / "fv-4-R8.npz",
        model.components_,
        signature="fv-4",
        n_features=codebook.dim,
        n_components=R,
        sparsity=TAU,
    )
    return {
        "root": root,
        "images": images,
        "table": table,
        "codebook": root / "fv-4.npz",
        "projector": root / "fv-4-R8.npz",
        "X": X,
        "U": model.components_,
    }
