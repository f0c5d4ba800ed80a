"""The models' .npz files: written with their kind, read back checked, every refusal
naming the file and what to do."""

import numpy as np
import pytest

from ndir.errors import NdirInputError
from ndir.jcf import JCF
from ndir.model_files import read_model_file, write_model_file


def test_round_trip_keeps_the_arrays_and_the_kind(tmp_path):
    path = tmp_path / "model.npz"
    write_model_file(path, "vlad", centroids=np.arange(6.0).reshape(2, 3), seed=np.int64(3))
    arrays = read_model_file(path, "vlad", ["centroids", "seed"])
    assert str(arrays["kind"]) == "vlad" and int(arrays["seed"]) == 3
    assert np.array_equal(arrays["centroids"], np.arange(6.0).reshape(2, 3))
    assert path.exists() and not (tmp_path / "model.npz.npz").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file; fit the JCF model first"),
        ("text", "not a JCF model: numpy cannot read it"),
        ("npy", "not a JCF model: numpy cannot read it|its kind is 'none'"),
        ("vlad", "not a JCF model \\(its kind is 'vlad', expected 'jcf'\\)"),
        ("jcf without state", r"JCF model file lacks \['state'\]; re-fit it"),
    ],
)
def test_jcf_load_names_the_file_and_the_fix(tmp_path, content, message):
    """JCF.load goes through the same checks as the codebooks (it used to let a
    missing or corrupt file raise numpy's or zipfile's own error)."""
    path = tmp_path / "model.npz"
    if content == "text":
        path.write_text("not an archive")
    elif content == "npy":
        with open(path, "wb") as handle:
            np.save(handle, np.arange(3))
    elif content == "vlad":
        write_model_file(path, "vlad", centroids=np.zeros((2, 3)))
    elif content == "jcf without state":
        write_model_file(path, "jcf", U=np.zeros((2, 2)), V=np.zeros((2, 2)))
    with pytest.raises(NdirInputError, match=message) as error:
        JCF.load(path)
    assert str(path) in str(error.value)
