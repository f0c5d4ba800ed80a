"""Dimension reduction of image signatures: PCA baseline and sparse rank projectors."""

from .cost import projection_cost, projection_latency
from .pca import PCAProjection
from .sparse_rank import SparseRankProjector
from .storage import load_projector, save_projector

__all__ = [
    "PCAProjection",
    "SparseRankProjector",
    "load_projector",
    "projection_cost",
    "projection_latency",
    "save_projector",
]
