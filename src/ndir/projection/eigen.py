"""Eigenpairs of symmetric matrices with a fixed sign convention: the principal axes of
the PCA baseline (:mod:`ndir.projection.pca`) and of the codebooks' descriptor and
cluster-wise PCAs (:mod:`ndir.codebooks`). NumPy alone, so that the encoding jobs that
use them do not import scikit-learn (0.7 s of a job's start).
"""

import numpy as np


def top_eigenpairs(symmetric, n_components):
    """Largest ``n_components`` eigenvalues (decreasing) and their eigenvectors (columns)
    of symmetric matrices (..., D, D): (..., n_components) and (..., D, n_components)."""
    eigenvalues, vectors = np.linalg.eigh(symmetric)  # increasing order
    return eigenvalues[..., ::-1][..., :n_components], vectors[..., ::-1][..., :n_components]


def largest_entry_positive(vectors):
    """``vectors`` (..., D, k) with each column's sign chosen so that its largest-magnitude
    entry (the first, on ties) is positive: axes that do not depend on the LAPACK build."""
    pivot = np.take_along_axis(vectors, np.abs(vectors).argmax(axis=-2)[..., None, :], axis=-2)
    return vectors * np.sign(pivot)
