"""Dimension reduction of image signatures: PCA baseline and sparse rank projectors."""

from ndir.projection.cost import projection_cost, projection_latency
from ndir.projection.pca import PCAProjection, fit_pca
from ndir.projection.sparse_rank import SparseRankProjector
from ndir.projection.storage import load_projector, save_projector

__all__ = [
    "PCAProjection",
    "SparseRankProjector",
    "fit_pca",
    "load_projector",
    "projection_cost",
    "projection_latency",
    "save_projector",
]
