"""The ``.npz`` files of ndir's fitted models (codebooks, descriptor PCA, visual
vocabulary, JCF): arrays plus a ``kind`` string, read back checked.

A file of another kind, one numpy cannot read, or one that lacks arrays gives an
:class:`~ndir.errors.NdirInputError` naming the file and what to do.
"""

import zipfile

import numpy as np

from ndir.errors import NdirInputError, rebuild_advice

#: What each kind of model file holds, as the errors name it.
KINDS = {
    "descriptor_pca": "descriptor PCA",
    "vlad": "VLAD codebook",
    "fv": "Fisher Vector codebook",
    "bovw": "visual vocabulary",
    "jcf": "JCF model",
}


def write_model_file(path, kind, **arrays):
    """Write ``arrays`` and ``kind`` (a key of :data:`KINDS`) to the ``.npz`` file ``path``."""
    # Through a file object so that numpy does not append ".npz" to the name.
    with open(path, "wb") as handle:
        np.savez(handle, kind=np.array(kind), **arrays)


def read_model_file(path, kind, keys):
    """Every array of the ``.npz`` model file ``path`` of the given kind, as a dict;
    refused unless it is of that kind and holds ``keys``."""
    what = KINDS[kind]
    try:
        archive = np.load(path, allow_pickle=False)
        if isinstance(archive, np.lib.npyio.NpzFile):
            with archive:
                arrays = {key: archive[key] for key in archive.files}
        else:  # a bare .npy array
            arrays = {}
    except FileNotFoundError:
        raise NdirInputError(f"{path}: no such file; fit the {what} first") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        raise NdirInputError(
            f"{path}: not a {what}: numpy cannot read it as an .npz file (if the workflow wrote it, "
            f"it is cut short or damaged: {rebuild_advice(path)})"
        ) from None
    found = str(arrays["kind"]) if "kind" in arrays else "none"
    if found != kind:
        raise NdirInputError(
            f"{path}: not a {what} (its kind is {found!r}, expected {kind!r}); "
            "pass the file written by the matching fit rule"
        )
    missing = [key for key in keys if key not in arrays]
    if missing:
        raise NdirInputError(f"{path}: {what} file lacks {missing}; re-fit it")
    return arrays
