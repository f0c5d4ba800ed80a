import os
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


def run_snakemake(workdir, *args, check=True):
    """Run this repository's workflow in ``workdir`` with the test interpreter's tools.

    The interpreter's ``bin`` goes first on PATH because Snakemake's script jobs
    start ``python`` from PATH.
    """
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, check=check)


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
        f"dataset: {{kind: holidays, path: {holidays}}}\n"
        "signatures: {codebook_sizes: [64, 128, 256, 512]}\n"
    )
    return config


# Tiny retrieval models shared by the index and CLI tests.
STEP, CELLS, K, PCA_DIMS, R, TAU = 4, (4, 8), 4, 16, 8, 0.9


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """A 6-group embedded set, an FV-4 codebook on PCA-16 and a projector R=8, tau=0.9.

    Returns a dict with ``images`` (folder), ``table`` (image table), ``codebook``,
    ``projector`` (paths) and ``X`` (the images' normalised signatures, table order).
    """
    root = tmp_path_factory.mktemp("tiny_models")
    images = root / "images"
    table = build_embedded_dataset(images, n_groups=6, seed=0, view_size=128)
    rng = np.random.default_rng(0)
    local = [
        image_descriptors(path, step=STEP, cell_sizes=CELLS) for path in table["path"]
    ]
    sample = np.concatenate(
        [d[rng.choice(len(d), size=min(200, len(d)), replace=False)] for d in local]
    )
    pca = fit_descriptor_pca(sample, n_components=PCA_DIMS)
    codebook = fit_fisher_codebook(sample, n_clusters=K, pca=pca, seed=0, n_iter=10)
    codebook.save(root / "fv-4.npz")
    X = power_l2_normalise(np.stack([codebook.encode(d) for d in local]))
    model = SparseRankProjector(
        n_components=R, sparsity=TAU, max_iter=20, random_state=0, n_jobs=1
    )
    model.fit(X, table["group"].to_numpy(), queries=table["is_query"].to_numpy())
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
