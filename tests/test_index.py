"""Tests of ndir.index: encoding, the faiss index, its files and the checks on inputs."""

import json
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from ndir import index as ndi
from ndir.errors import NdirInputError
from ndir.projection import save_projector

from .conftest import CELLS, PCA_DIMS, STEP, TAU, K, R


def encoder_of(models):
    return ndi.load_encoder(models["codebook"], models["projector"], step=STEP, cell_sizes=CELLS)


def test_encoder_matches_dense_pipeline(tiny_models):
    """y = U^T x through the CSC matrix equals the dense product on the same signature."""
    encoder = encoder_of(tiny_models)
    path = tiny_models["table"]["path"].iloc[0]
    y = encoder(path)
    x = tiny_models["X"][0]
    assert y.shape == (R,) and y.dtype == np.float32
    np.testing.assert_allclose(y, x @ tiny_models["U"].toarray(), rtol=1e-5, atol=1e-6)
    assert encoder.signature == "fv-4" and encoder.n_features == 2 * K * PCA_DIMS


def test_index_scores_are_raw_inner_products(tiny_models, tmp_path):
    table = tiny_models["table"]
    encoder = encoder_of(tiny_models)
    index, skipped = ndi.build_index(ndi.image_files(tiny_models["images"]), encoder)
    assert skipped == [] and len(index) == len(table)
    Y = tiny_models["X"] @ tiny_models["U"].toarray()
    found = index.search(Y[:1], k=len(table))[0]
    by_path = dict(found)
    # image_files sorts the names, as the table's Holidays numbering does
    for path, y in zip(table["path"], Y):
        assert by_path[path] == pytest.approx(float(Y[0] @ y), rel=1e-4, abs=1e-5)
    scores = [score for _, score in found]
    assert scores == sorted(scores, reverse=True)
    # the query excludes itself
    own = index.search(Y[:1], k=3, exclude=[table["path"].iloc[0]])[0]
    assert table["path"].iloc[0] not in [p for p, _ in own] and len(own) == 3

    index.save(tmp_path / "idx")
    loaded = ndi.NearDuplicateIndex.load(tmp_path / "idx")
    assert loaded.paths == index.paths and loaded.n_components == R
    np.testing.assert_allclose(loaded.norms, np.linalg.norm(Y, axis=1), rtol=1e-4)
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    assert meta["codebook"]["signature"] == "fv-4" and meta["descriptors"]["step"] == STEP
    assert meta["projector"]["meta"]["sparsity"] == TAU and meta["n_images"] == len(table)


def test_images_encoded_on_threads_give_the_same_index_order_and_skips(tiny_models, tmp_path):
    """build_index on 3 threads (more images than the 4 x 3 in flight, an unreadable
    file among them) keeps the paths' order, skips the same file and gives the same
    projections, to the bit, as on one thread."""
    paths = list(tiny_models["table"]["path"]) * 2
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    paths.insert(7, broken)
    encoder = encoder_of(tiny_models)
    told = []
    results = {}
    for n_jobs in (1, 3):
        index, skipped = ndi.build_index(paths, encoder, on_skip=lambda path, message: told.append(path), n_jobs=n_jobs)
        results[n_jobs] = index
        assert [path for path, _ in skipped] == [str(broken)]
    assert told == [broken, broken] and len(paths) > 4 * 3
    one, three = results[1], results[3]
    assert one.paths == three.paths == [str(Path(p).resolve()) for p in paths if p != broken]
    stored = [index.index.reconstruct_n(0, len(index)) for index in (one, three)]
    np.testing.assert_array_equal(stored[0], stored[1])
    np.testing.assert_array_equal(stored[0][: len(tiny_models["X"])], stored[0][len(tiny_models["X"]) :])


def test_progress_counts_images_encoded_not_handed_to_threads(tiny_models):
    """On 2 threads (8 images in flight) the progress bar is told of an image only
    once it is encoded, and of how many images there are."""
    paths = list(tiny_models["table"]["path"]) * 2
    encode = encoder_of(tiny_models)
    encoded = []

    def slow_encoder(path):
        time.sleep(0.01)  # so the 8 submissions run well ahead of the results
        y = encode(path)
        encoded.append(path)
        return y

    slow_encoder.n_components = encode.n_components
    slow_encoder.meta = encode.meta
    seen = []

    def progress(items, total):
        for count, item in enumerate(items, start=1):
            seen.append((count, len(encoded), total))
            yield item

    index, _ = ndi.build_index(paths, slow_encoder, progress=progress, n_jobs=2)
    assert len(index) == len(paths) == len(seen)
    assert all(done >= count and total == len(paths) for count, done, total in seen)


def test_stopping_early_gives_blas_its_threads_back(tiny_models):
    """A consumer that stops after the first image and closes the generator (as
    build_index and query_index do, also on an error) leaves NumPy's BLAS with the
    threads it had; n_jobs below 1 (other than -1) is refused."""
    encoder = encoder_of(tiny_models)
    paths = list(tiny_models["table"]["path"]) * 4

    def blas_threads():
        return {
            i["num_threads"]
            for i in threadpool_info()
            if i["user_api"] == "blas" and i.get("threading_layer") == "pthreads"
        }

    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        with closing(ndi.encoded_images(paths, encoder, n_jobs=2)) as outcomes:
            path, y = next(outcomes)
        assert path == paths[0] and y.shape == (R,)
        assert blas_threads() == before
    with pytest.raises(ValueError, match="n_jobs=0"):
        next(ndi.encoded_images(paths, encoder, n_jobs=0))


def test_wrong_projector_is_refused(tiny_models, tmp_path):
    U = tiny_models["U"]
    wrong_dim = tmp_path / "wrong-dim.npz"
    save_projector(wrong_dim, U[:-1], signature="fv-4", n_features=U.shape[0] - 1)
    with pytest.raises(NdirInputError, match="wrong-dim.npz.*D=127.*D=128"):
        ndi.load_encoder(tiny_models["codebook"], wrong_dim)
    wrong_name = tmp_path / "wrong-name.npz"
    save_projector(wrong_name, U, signature="vlad-2", n_features=U.shape[0])
    with pytest.raises(NdirInputError, match="wrong-name.npz.*vlad-2.*fv-4"):
        ndi.load_encoder(tiny_models["codebook"], wrong_name)
    with pytest.raises(NdirInputError, match=r"not a VLAD or FV codebook \(it is a sparse rank projector\)"):
        ndi.load_encoder(tiny_models["projector"], tiny_models["projector"])


def test_changed_projector_is_detected(tiny_models, tmp_path):
    projector = tmp_path / "p.npz"
    projector.write_bytes(tiny_models["projector"].read_bytes())
    encoder = ndi.load_encoder(tiny_models["codebook"], projector, step=STEP, cell_sizes=CELLS)
    paths = ndi.image_files(tiny_models["images"])[:3]
    index, _ = ndi.build_index(paths, encoder)
    assert index.encoder().n_components == R
    save_projector(projector, tiny_models["U"] * 2, signature="fv-4", n_features=encoder.n_features)
    with pytest.raises(NdirInputError, match="p.npz: the projector changed"):
        index.encoder()


def test_image_files(tmp_path):
    with pytest.raises(NdirInputError, match="no such folder"):
        ndi.image_files(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(NdirInputError, match="no image files"):
        ndi.image_files(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.JPG").write_bytes(b"x")
    (tmp_path / "a.png").write_bytes(b"x")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "c.jpg").write_bytes(b"x")
    assert [p.relative_to(tmp_path).as_posix() for p in ndi.image_files(tmp_path)] == [
        "a.png",
        "sub/b.JPG",
    ]


def test_describe_projector_storage(tiny_models):
    facts = ndi.describe(tiny_models["projector"])
    D, M = 2 * K * PCA_DIMS, round((1 - TAU) * 2 * K * PCA_DIMS)
    assert (facts["R"], facts["tau"], facts["D"], facts["signature"]) == (
        R,
        TAU,
        D,
        "fv-4",
    )
    assert facts["non-zeros"] == R * M and facts["non-zeros per column"] == M
    assert facts["density"] == pytest.approx(M / D, abs=1e-6)
    assert facts["bytes dense"] == D * R * 4
    assert facts["bytes CSC"] == R * M * 8 + (R + 1) * 4
    codebook = ndi.describe(tiny_models["codebook"])
    assert (codebook["kind"], codebook["K"], codebook["D"]) == ("fv", K, D)


def test_available_cpus_falls_back_to_cpu_count_without_an_affinity_mask(monkeypatch):
    """macOS and Windows have no os.sched_getaffinity: the default thread counts of
    ndir index and the sparse projector then come from os.cpu_count()."""
    import os

    import ndir

    assert ndir.available_cpus() >= 1
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 7)
    assert ndir.available_cpus() == 7
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert ndir.available_cpus() == 1


def test_a_batch_of_queries_gets_each_querys_own_results(tiny_models):
    """Several projections searched at once: each query's results are those it gets
    alone, with its own image left out."""
    table = tiny_models["table"]
    index, _ = ndi.build_index(ndi.image_files(tiny_models["images"]), encoder_of(tiny_models))
    Y = tiny_models["X"] @ tiny_models["U"].toarray()
    paths = list(table["path"].iloc[:3])
    batch = index.search(Y[:3], k=4, exclude=paths)
    assert len(batch) == 3
    for q in range(3):
        assert batch[q] == index.search(Y[q : q + 1], k=4, exclude=[paths[q]])[0]
        assert paths[q] not in [path for path, _ in batch[q]] and len(batch[q]) == 4


@pytest.mark.parametrize("name", ["table.csv", "figure.png", "notes.txt"])
def test_describe_names_a_file_that_is_no_model(tmp_path, name):
    """A table, figure or note of a run (any suffix but .npz, not a zip): not a model
    file, and nothing to rebuild."""
    path = tmp_path / name
    path.write_text("a,b\n1,2\n")
    with pytest.raises(NdirInputError, match=f"{name}: not an ndir model file"):
        ndi.describe(path)


@pytest.mark.parametrize("n_jobs", [2, 3])
def test_threads_work_ahead_on_at_most_4_images_each(n_jobs):
    """encoded_images on n_jobs threads takes the paths as the results go: when it
    hands back an image, at most 4 n_jobs images have been taken and not yet handed
    back (that one included), and the threads do work ahead that far."""
    taken = []

    def paths():
        for i in range(40):
            taken.append(i)
            yield i

    ahead = []
    with closing(ndi.encoded_images(paths(), lambda i: np.full(3, i, dtype=np.float32), n_jobs=n_jobs)) as results:
        for k, (path, y) in enumerate(results):
            assert path == k and np.array_equal(y, np.full(3, k, dtype=np.float32))
            ahead.append(len(taken) - k)
    assert len(ahead) == 40 and max(ahead) == 4 * n_jobs


def test_a_saved_index_keeps_working_when_its_models_and_itself_move(tiny_models, tmp_path):
    # The run's results/ rerun, moved or deleted: the index folder holds its own models.
    run = tmp_path / "results"
    run.mkdir()
    codebook, projector = run / "cb.npz", run / "p.npz"
    codebook.write_bytes(Path(tiny_models["codebook"]).read_bytes())
    projector.write_bytes(Path(tiny_models["projector"]).read_bytes())
    encoder = ndi.load_encoder(codebook, projector, step=STEP, cell_sizes=CELLS)
    paths = ndi.image_files(tiny_models["images"])[:4]
    index, _ = ndi.build_index(paths, encoder)
    index.save(tmp_path / "idx")
    expected = ndi.query_index(index, paths[:1], k=3)
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == sorted(
        [ndi.INDEX_FILE, ndi.IMAGES_FILE, ndi.META_FILE, *ndi.MODEL_FILES.values()]
    )
    save_projector(projector, tiny_models["U"] * 2, signature="fv-4", n_features=encoder.n_features)
    codebook.unlink()
    (tmp_path / "idx").rename(tmp_path / "moved")
    moved = ndi.NearDuplicateIndex.load(tmp_path / "moved")
    assert ndi.query_index(moved, paths[:1], k=3) == expected
    assert ndi.describe(tmp_path / "moved")["projector"] == str(tmp_path / "moved" / "projector.npz")
    # A damaged copy is named, with the index's own fix.
    (tmp_path / "moved" / "projector.npz").write_bytes(b"damaged")
    with pytest.raises(NdirInputError, match="moved/projector.npz: the projector changed.*`ndir index`"):
        moved.encoder()
