"""Tests of ndir.projection.storage: the projector file round trip and its errors."""

import io

import numpy as np
import pytest
import scipy.sparse as sp

from ndir.errors import NdirInputError
from ndir.model_files import write_model_file
from ndir.projection import load_projector, save_projector


def hand_made():
    """(6, 3) float64 U with four non-zeros, one of them not exact in float32 (1/3)."""
    U = np.zeros((6, 3))
    U[[0, 3, 2, 5], [0, 0, 1, 2]] = [1.5, 1.0 / 3.0, -2.25, 0.125]
    return U


META = {
    "signature": "fv-4",
    "sparsity": 0.99,
    "n_components": 3,
    "renormalize": True,
    "line_search": "projected",
    "history": {"objective": [2.5, 0.5], "note": None},
}


@pytest.mark.parametrize("as_sparse", [False, True])
def test_round_trip_keeps_the_entries_in_float32_and_int32_and_the_metadata(as_sparse, tmp_path):
    """U goes out and comes back as a (D, R) float32 CSC matrix whose entries are U's
    rounded to float32, from a dense float64 array or a CSR matrix with int64
    indices; the file holds float32 values and int32 indices and pointers (the
    storage convention of ndir.projection.cost), and the metadata comes back equal,
    nested values included."""
    U = hand_made()
    components = sp.csr_array(U) if as_sparse else U
    if as_sparse:
        components.indices = components.indices.astype(np.int64)
        components.indptr = components.indptr.astype(np.int64)
    path = tmp_path / "R3-tau0.99.npz"
    save_projector(path, components, **META)
    with np.load(path) as npz:
        assert npz["data"].dtype == np.float32
        assert npz["indices"].dtype == npz["indptr"].dtype == np.int32
        np.testing.assert_array_equal(npz["shape"], [6, 3])
        np.testing.assert_array_equal(npz["indptr"], [0, 2, 3, 4])
    loaded, meta = load_projector(path)
    assert sp.issparse(loaded) and loaded.format == "csc" and loaded.shape == (6, 3)
    assert loaded.dtype == np.float32 and loaded.nnz == 4
    np.testing.assert_array_equal(loaded.toarray(), U.astype(np.float32))
    assert meta == META


def test_round_trip_through_an_open_file_keeps_explicit_zeros():
    """save_projector takes an open file too. A stored zero (a column of
    SparseRankProjector.components_ holds exactly M entries, zeros included) stays
    stored, so that the entries per column are those written."""
    U = sp.csc_array(hand_made())
    U.data[1] = 0.0  # the 1/3 of column 0: stored, now zero
    handle = io.BytesIO()
    save_projector(handle, U)
    handle.seek(0)
    loaded, meta = load_projector(handle)
    assert meta == {}
    np.testing.assert_array_equal(loaded.indptr, [0, 2, 3, 4])
    np.testing.assert_array_equal(loaded.indices, [0, 3, 2, 5])
    np.testing.assert_array_equal(loaded.toarray(), U.toarray())


def test_a_file_that_is_no_projector_is_named_in_the_error(results_path):
    """Text under a .npz name, an .npz of other arrays, a projector cut short, a single
    .npy array, a codebook and a missing file: each gives an NdirInputError (a
    ValueError) naming the file, why, and what to do (tests/test_model_files.py has
    every message)."""
    text = results_path / "notes.npz"
    text.write_text("not an archive")
    other = results_path / "other.npz"
    np.savez(other, x=np.arange(3))
    truncated = results_path / "truncated.npz"
    save_projector(truncated, np.eye(6, 2, dtype=np.float32), signature="fv-4")
    truncated.write_bytes(truncated.read_bytes()[:100])
    array = results_path / "array.npy"
    np.save(array, np.arange(3))
    codebook = results_path / "fv-4.npz"
    write_model_file(codebook, "fv", weights=np.ones(4))
    rebuild = "cut short or damaged: delete it and run `snakemake"
    for path, why in [
        (text, rebuild),
        (other, "not a model file of ndir (it says no kind"),
        (truncated, rebuild),
        (array, "not a model file of ndir (a single array"),
        (codebook, "not a sparse rank projector (it is a Fisher Vector codebook"),
        (results_path / "missing.npz", "no such file; fit the sparse rank projector first"),
    ]:
        with pytest.raises(NdirInputError) as error:
            load_projector(path)
        assert str(error.value).startswith(f"{path}: ") and why in str(error.value)


def test_the_file_does_not_depend_on_the_order_of_the_metadata(tmp_path):
    """The metadata are stored with sorted keys: the same projector and metadata given
    in another order write the same bytes (reproducible results files)."""
    U = hand_made()
    save_projector(tmp_path / "a.npz", U, **META)
    save_projector(tmp_path / "b.npz", U, **dict(reversed(list(META.items()))))
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
