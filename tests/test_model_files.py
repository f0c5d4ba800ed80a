"""ndir's model files: every kind written with its kind and format version and read
back by the one reader; an old, foreign, damaged or newer file refused with one error
naming the file and what to do."""

import numpy as np
import pytest

from ndir.bovw import VisualVocabulary
from ndir.codebooks import DescriptorPCA, FisherCodebook, VladCodebook, load_codebook
from ndir.errors import NdirInputError, ResultFileError
from ndir.jcf import JCF
from ndir.model_files import FORMAT_VERSION, KINDS, file_kind, read_model_file, write_model_file
from ndir.projection import load_projector, save_projector


def _pca(rng, D=6, d=2):
    return DescriptorPCA(
        rng.normal(size=D).astype(np.float32),
        np.linalg.qr(rng.normal(size=(D, d)))[0].astype(np.float32),
        np.array([2.0, 1.0], dtype=np.float32),
    )


def _jcf(rng):
    groups = np.repeat(np.arange(4), 2)
    features = [rng.normal(size=(3, 2)) for _ in groups]
    return JCF(n_components=2, n_epochs=1, holdout_fraction=0.0, random_state=0).fit(features, None, groups)


def _models():
    """(kind, writes the model to a path, reads it back and returns what must be equal)."""
    rng = np.random.default_rng(0)
    pca = _pca(rng)
    vlad = VladCodebook(rng.normal(size=(2, 6)).astype(np.float32), np.zeros((2, 6, 2), np.float32), 1, 2)
    fv = FisherCodebook(
        pca, np.array([0.5, 0.5], np.float32), np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), 1, 2
    )
    words = VisualVocabulary(rng.normal(size=(4, 6)).astype(np.float32), 3, 4, 1)
    jcf = _jcf(rng)
    U = np.eye(6, 2, dtype=np.float32)
    return [
        ("descriptor_pca", pca.save, lambda p: DescriptorPCA.load(p).components_, pca.components_),
        ("vlad", vlad.save, lambda p: load_codebook(p)[0].centroids_, vlad.centroids_),
        ("fv", fv.save, lambda p: load_codebook(p)[0].pca_.mean_, pca.mean_),
        ("bovw", words.save, lambda p: VisualVocabulary.load(p).centroids_, words.centroids_),
        ("jcf", jcf.save, lambda p: JCF.load(p).U_, jcf.U_),
        ("projector", lambda p: save_projector(p, U, signature="fv-2"), lambda p: load_projector(p)[0].toarray(), U),
    ]  # fmt: skip


@pytest.mark.parametrize("site", range(6), ids=[model[0] for model in _models()])
def test_every_kind_round_trips_with_its_kind_and_format_version(tmp_path, site):
    """Each model's save writes its kind and the format version; its load (and
    file_kind) read them back; the six are every kind there is."""
    kind, save, load, expected = _models()[site]
    path = tmp_path / "model.npz"
    save(path)
    with np.load(path) as npz:
        assert str(npz["kind"]) == kind and int(npz["format_version"]) == FORMAT_VERSION == 1
    assert file_kind(path) == kind
    np.testing.assert_array_equal(load(path), expected)
    assert sorted(model[0] for model in _models()) == sorted(KINDS)


def test_the_arrays_come_back_without_the_bookkeeping_fields(tmp_path):
    path = tmp_path / "model.npz"
    write_model_file(path, "vlad", centroids=np.arange(6.0).reshape(2, 3), seed=np.int64(3))
    arrays = read_model_file(path, "vlad", ["centroids", "seed"])
    assert sorted(arrays) == ["centroids", "seed"] and int(arrays["seed"]) == 3
    np.testing.assert_array_equal(arrays["centroids"], np.arange(6.0).reshape(2, 3))
    assert path.exists() and not (tmp_path / "model.npz.npz").exists()
    with pytest.raises(ValueError, match="kind 'codebook' is none of"):
        write_model_file(path, "codebook", centroids=np.zeros(2))


def test_files_of_format_0_are_read(tmp_path):
    """Written before this version: a projector had no kind (recognised by its arrays),
    the other kinds no format version; their arrays are the same, so they read as
    written today."""
    U = np.array([[1.5, 0.0], [0.0, -2.0], [0.25, 0.0]], dtype=np.float32)
    new = tmp_path / "new.npz"
    save_projector(new, U, signature="fv-2", sparsity=0.5)
    old = tmp_path / "old.npz"
    with np.load(new) as npz:
        np.savez(old, **{key: npz[key] for key in npz.files if key not in ("kind", "format_version")})
    assert file_kind(old) == "projector"
    (old_U, old_meta), (_, new_meta) = load_projector(old), load_projector(new)
    np.testing.assert_array_equal(old_U.toarray(), U)
    assert old_meta == new_meta == {"signature": "fv-2", "sparsity": 0.5}
    codebook = tmp_path / "vlad.npz"
    np.savez(codebook, kind=np.array("vlad"), centroids=np.ones((2, 3)), components=np.zeros((2, 3, 1)),
             seed=np.int64(1), n_iter=np.int64(2))  # fmt: skip
    assert load_codebook(codebook)[1] == "vlad-2"


def _written(path, content):
    if content == "text":
        path.write_text("not an archive")
    elif content == "npy":
        with open(path, "wb") as handle:
            np.save(handle, np.arange(3))
    elif content == "foreign":
        np.savez(path, x=np.arange(3))
    elif content == "truncated":
        write_model_file(path, "jcf", U=np.zeros((2, 2)), V=np.zeros((2, 2)), state=np.array("{}"))
        path.write_bytes(path.read_bytes()[:100])
    elif content == "vlad":
        write_model_file(path, "vlad", centroids=np.zeros((2, 3)))
    elif content == "jcf without state":
        write_model_file(path, "jcf", U=np.zeros((2, 2)), V=np.zeros((2, 2)))
    elif content == "newer":
        np.savez(path, kind=np.array("jcf"), format_version=np.array(FORMAT_VERSION + 1))
    elif content == "unknown kind":
        np.savez(path, kind=np.array("model"))
    return path


REBUILD = r"delete it and run `snakemake \S+ --cores all`"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file; fit the JCF model first"),
        ("text", rf"unreadable \(ValueError: .*\), cut short or damaged: {REBUILD}"),
        ("truncated", rf"unreadable \(BadZipFile: .*\), cut short or damaged: {REBUILD}"),
        ("npy", rf"not a model file of ndir \(a single array, not an .npz archive\); pass one that ndir wrote, "
                rf"descriptor PCA, .*; if the workflow wrote this one, {REBUILD}"),
        ("foreign", rf"not a model file of ndir \(it says no kind; its arrays are \['x'\]\); .*{REBUILD}"),
        ("unknown kind", rf"not a model file of ndir \(its kind is 'model'\); .*{REBUILD}"),
        ("newer", rf"a JCF model of format 2, newer than this ndir reads \(up to 1\); install the ndir that wrote it, "
                  rf"or {REBUILD}"),
        ("vlad", "not a JCF model \\(it is a VLAD codebook: its kind is 'vlad', expected 'jcf'\\); pass the file "
                 "written by the matching fit rule"),
        ("jcf without state", rf"JCF model file lacks \['state'\]: {REBUILD}"),
    ],
)  # fmt: skip
def test_a_file_the_reader_refuses_gives_one_error_naming_it_and_the_fix(tmp_path, content, message):
    """JCF.load as an example of every kind's load: one NdirInputError, the file named
    first, then why and what to do; unreadable files and missing arrays are
    ResultFileErrors (a rule's output to rebuild) with the command that rebuilds them."""
    (tmp_path / "results").mkdir()
    path = tmp_path / "results" / "model.npz"
    if content is not None:
        _written(path, content)
    with pytest.raises(NdirInputError, match=message) as error:
        JCF.load(path)
    assert str(error.value).startswith(f"{path}: ")
    assert isinstance(error.value, ResultFileError) == (content in ("text", "truncated", "jcf without state"))
    if content not in (None, "vlad", "jcf without state"):  # file_kind's own refusals: the same error
        with pytest.raises(NdirInputError) as error_of_kind:
            file_kind(path)
        assert str(error_of_kind.value) == str(error.value)


def test_the_rebuild_advice_names_the_file_from_its_results_folder(tmp_path):
    """The advice's snakemake target is exactly the damaged file, from results/ on, as
    the workflow's rules name it (test_workflow follows such an advice for a codebook)."""
    (tmp_path / "run/results/codebooks").mkdir(parents=True)
    path = _written(tmp_path / "run/results/codebooks/fv-4.npz", "truncated")
    with pytest.raises(ResultFileError, match=r"run `snakemake results/codebooks/fv-4.npz --cores all`"):
        load_codebook(path)
