"""Saving and loading learned projectors as ``.npz`` files.

A projector file holds U (D x R) in CSC form (``data`` float32, ``indices`` and
``indptr`` int32, ``shape``) and a JSON ``meta`` record (signature, R, tau, training
settings), so that ``ndir`` can check it against the signature it is applied to.
"""

import json
import zipfile

import numpy as np
import scipy.sparse as sp

from ..errors import NdirInputError


def save_projector(path, components, **meta):
    """Write U and its metadata to ``path`` (an open file or a path ending in .npz).

    Parameters
    ----------
    components : (D, R) scipy sparse matrix or array
        The projectors U.
    **meta
        JSON-serialisable facts about U (e.g. ``signature="fv-256"``, ``sparsity=0.99``).
    """
    U = sp.csc_array(components, dtype=np.float32)
    np.savez(
        path,
        data=U.data.astype(np.float32),
        indices=U.indices.astype(np.int32),
        indptr=U.indptr.astype(np.int32),
        shape=np.asarray(U.shape, dtype=np.int64),
        meta=np.asarray(json.dumps(meta, sort_keys=True)),
    )


def load_projector(path):
    """Read a projector written by :func:`save_projector`.

    Returns
    -------
    components : scipy.sparse.csc_array, (D, R) float32
    meta : dict
    """
    try:
        loaded = np.load(path)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise ValueError("a single array, not an .npz archive")
        with loaded as npz:
            U = sp.csc_array(
                (npz["data"], npz["indices"], npz["indptr"]), shape=tuple(npz["shape"])
            )
            meta = json.loads(str(npz["meta"]))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise NdirInputError(
            f"{path}: not an ndir projector file ({error}); "
            "use a results/sparse/<signature>/R<R>-tau<tau>.npz written by the workflow"
        ) from error
    return U, meta
