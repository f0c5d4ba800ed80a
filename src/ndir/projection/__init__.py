"""Dimension reduction of image signatures: PCA baseline and sparse rank projectors.

The names below load their module on first use (PEP 562): the estimators import
scikit-learn, 0.7 s of the start of every workflow job that imports this package, and
most of them (encoding, tables, figures) need only :mod:`~ndir.projection.product` or
:mod:`~ndir.projection.eigen`.
"""

import importlib

_MODULE_OF = {
    "PCAProjection": "pca",
    "fit_pca": "pca",
    "SparseRankProjector": "sparse_rank",
    "load_projector": "storage",
    "save_projector": "storage",
    "projection_cost": "cost",
    "projection_latency": "cost",
}

__all__ = sorted(_MODULE_OF)


def __getattr__(name):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted([*globals(), *_MODULE_OF])
