"""ndir's files, written and read back in one place.

Model files: the ``.npz`` files of fitted models (descriptor PCA, VLAD and FV codebooks,
visual vocabulary, JCF model, sparse rank projector). Each holds its arrays plus two
fields: ``kind``, a key of :data:`KINDS`, and ``format_version``, :data:`FORMAT_VERSION`
when written. Formats:

- 0, files written before the version was recorded: no ``format_version``, and
  projector files had no ``kind`` either (one is recognised by its arrays). Their
  arrays are those of format 1, so they are read as they are.
- 1: ``kind`` and ``format_version`` in every file.

Result files: the ``.npy``, ``.npz``, ``.csv`` and ``.json`` files one rule writes for
the next, read back by :func:`read_result`.

Every refusal is one :class:`~ndir.errors.NdirInputError` naming the file and what to
do: a file that is missing, that numpy cannot read (cut short or damaged: the command
that rebuilds it, :func:`~ndir.errors.rebuild_advice`), that says no kind (another
program's file), of another kind, of a newer format, or lacking an array.
"""

import zipfile

import numpy as np

from ndir.errors import NdirInputError, ResultFileError, rebuild_advice

#: Every kind of model file, as its ``kind`` field spells it, and as errors name it.
KINDS = {
    "descriptor_pca": "descriptor PCA",
    "vlad": "VLAD codebook",
    "fv": "Fisher Vector codebook",
    "bovw": "visual vocabulary",
    "jcf": "JCF model",
    "projector": "sparse rank projector",
}

#: The format written; every format from 0 to it is read.
FORMAT_VERSION = 1

#: The arrays of a projector file of format 0, which has no ``kind``.
_PROJECTOR_ARRAYS = {"data", "indices", "indptr", "shape", "meta"}

#: What numpy, zipfile, scipy and pandas raise for a file cut short or damaged (a
#: missing array of an ``.npz`` is numpy's KeyError).
_UNREADABLE = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile)


# --------------------------------------------------------------------------- model files


def write_model_file(file, kind, **arrays):
    """Write ``arrays``, ``kind`` (a key of :data:`KINDS`) and :data:`FORMAT_VERSION` to
    the ``.npz`` file ``file`` (a path, written under that very name, or an open file)."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is none of {sorted(KINDS)}")
    fields = {"kind": np.array(kind), "format_version": np.array(FORMAT_VERSION)}
    if hasattr(file, "write"):
        np.savez(file, **fields, **arrays)
        return
    # Through a file object so that numpy does not append ".npz" to the name.
    with open(file, "wb") as handle:
        np.savez(handle, **fields, **arrays)


def file_kind(path):
    """The kind (a key of :data:`KINDS`) of the model file ``path``, refused as
    :func:`read_model_file` refuses a file when it is missing or of no kind."""
    return _read_model_arrays(path, "pass a model file that ndir wrote")[0]


def read_model_file(path, kind, keys):
    """The arrays of the model file ``path`` (without ``kind`` and ``format_version``),
    as a dict; refused unless it is of the given kind and holds ``keys``."""
    what = KINDS[kind]
    found, arrays = _read_model_arrays(path, f"fit the {what} first")
    if found != kind:
        raise NdirInputError(
            f"{path}: not a {what} (it is a {KINDS[found]}: its kind is {found!r}, expected {kind!r}); "
            "pass the file written by the matching fit rule"
        )
    missing = [key for key in keys if key not in arrays]
    if missing:
        raise ResultFileError(f"{path}: {what} file lacks {missing}: {rebuild_advice(path)}")
    return arrays


def _read_model_arrays(path, when_missing):
    """``(kind, arrays)`` of the model file ``path``; ``when_missing``: the advice for a
    file that does not exist."""
    try:
        arrays = read_result(path, _load_npz)
    except FileNotFoundError:
        raise NdirInputError(f"{path}: no such file; {when_missing}") from None
    if arrays is None:
        kind, found = None, "a single array, not an .npz archive"
    elif "kind" in arrays:
        kind = str(arrays.pop("kind"))
        found = f"its kind is {kind!r}"
    elif _PROJECTOR_ARRAYS <= set(arrays):
        kind = "projector"
    else:
        kind, found = None, f"it says no kind; its arrays are {sorted(arrays)}"
    if kind not in KINDS:
        raise NdirInputError(
            f"{path}: not a model file of ndir ({found}); pass one that ndir wrote, {', '.join(KINDS.values())}; "
            f"if the workflow wrote this one, {rebuild_advice(path)}"
        )
    version = int(arrays.pop("format_version", 0))
    if version > FORMAT_VERSION:
        raise NdirInputError(
            f"{path}: a {KINDS[kind]} of format {version}, newer than this ndir reads (up to {FORMAT_VERSION}); "
            f"install the ndir that wrote it, or {rebuild_advice(path)}"
        )
    return kind, arrays


def _load_npz(path):
    """Every array of the ``.npz`` file ``path`` as a dict; None for a bare ``.npy`` array."""
    archive = np.load(path, allow_pickle=False)
    if not isinstance(archive, np.lib.npyio.NpzFile):
        return None
    with archive:
        return {key: archive[key] for key in archive.files}


# --------------------------------------------------------------------------- result files


def read_result(path, load=np.load, **kwargs):
    """``load(path, **kwargs)`` of a file an earlier rule wrote (a ``.npy``, an ``.npz``
    by ``sp.load_npz``...); :class:`~ndir.errors.ResultFileError` naming the file and
    the fix when it cannot be read, instead of NumPy's or zipfile's bare error.
    FileNotFoundError propagates as it is."""
    try:
        return load(path, **kwargs)
    except FileNotFoundError:
        raise
    except _UNREADABLE as error:
        raise ResultFileError(
            f"{path}: unreadable ({type(error).__name__}: {error}), cut short or damaged: {rebuild_advice(path)}"
        ) from error


def read_result_arrays(path, names=None):
    """The arrays ``names`` (None: all) of an ``.npz`` an earlier rule wrote, read whole
    into a dict; ResultFileError as :func:`read_result` when it cannot be read or
    lacks one of them."""

    def load(path):
        with np.load(path) as npz:
            return {name: npz[name] for name in (npz.files if names is None else names)}

    return read_result(path, load)
