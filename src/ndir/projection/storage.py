"""Saving and loading learned projectors as ``.npz`` model files (kind ``"projector"``,
:mod:`ndir.model_files`).

A projector file holds U (D x R) in CSC form (``data`` float32, ``indices`` and
``indptr`` int32, ``shape``) and a JSON ``meta`` record (signature, R, tau, training
settings), so that ``ndir`` can check it against the signature it is applied to.
"""

import json

import numpy as np
import scipy.sparse as sp

from ndir.model_files import read_model_file, write_model_file


def save_projector(path, components, **meta):
    """Write U and its metadata to ``path`` (an open file or a path, written under that name).

    Parameters
    ----------
    components : (D, R) scipy sparse matrix or array
        The projectors U.
    **meta
        JSON-serialisable facts about U (e.g. ``signature="fv-256"``, ``sparsity=0.99``).
    """
    U = sp.csc_array(components, dtype=np.float32)
    write_model_file(
        path,
        "projector",
        data=U.data.astype(np.float32),
        indices=U.indices.astype(np.int32),
        indptr=U.indptr.astype(np.int32),
        shape=np.asarray(U.shape, dtype=np.int64),
        meta=np.asarray(json.dumps(meta, sort_keys=True)),
    )


def load_projector(path):
    """Read a projector written by :func:`save_projector` (one of format 0, without
    ``kind``, too); NdirInputError as :func:`ndir.model_files.read_model_file`.

    Returns
    -------
    components : scipy.sparse.csc_array, (D, R) float32
    meta : dict
    """
    arrays = read_model_file(path, "projector", ["data", "indices", "indptr", "shape", "meta"])
    U = sp.csc_array((arrays["data"], arrays["indices"], arrays["indptr"]), shape=tuple(arrays["shape"]))
    return U, json.loads(str(arrays["meta"]))
