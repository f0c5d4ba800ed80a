"""Dimension reduction of image signatures: PCA baseline and sparse rank projectors."""

from .pca import PCAProjection

__all__ = ["PCAProjection"]
