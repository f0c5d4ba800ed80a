"""The signatures' normalisation: the (smoothed) signed square root and the L2
normalisation of rows, with the backward pass the learning needs."""

import numpy as np

NORM_FLOOR = 1e-12
"""Smallest norm divided by in the L2 normalisation (a zero vector stays zero)."""


def signed_sqrt(z, eps=0.0):
    """Smoothed signed square root ``sign(z) (sqrt(|z| + eps) - sqrt(eps))``.

    ``eps = 0`` is the plain signed square root. With ``eps > 0`` the function stays odd
    and zero at 0, and its derivative ``1 / (2 sqrt(|z| + eps))`` is continuous and at
    most ``1 / (2 sqrt(eps))`` (the plain one is infinite at 0), so gradients through it
    stay bounded; it differs from the plain one by at most ``sqrt(eps)``.
    """
    root_eps = np.sqrt(eps)
    return np.sign(z) * (np.sqrt(np.abs(z) + eps) - root_eps)


def _signed_sqrt_derivative(z, eps):
    return 0.5 / np.sqrt(np.abs(z) + eps)


def _l2_normalise_with_norms(S):
    """``S / ||S||_2`` row by row; a zero row stays zero. Returns (normalised, norms)."""
    norms = np.linalg.norm(S, axis=1, keepdims=True)
    return S / np.maximum(norms, NORM_FLOOR), norms


def _normalise(z, sqrt_eps, signed):
    """Signed square root (if ``signed``) then L2 normalisation of each row of ``z``."""
    s = signed_sqrt(z, sqrt_eps) if signed else z
    return _l2_normalise_with_norms(s)[0]


def _normalise_backward(z, grad_y, sqrt_eps, signed):
    """dL/dz from dL/dy for ``y = l2(ssqrt(z))`` (rows independent)."""
    s = signed_sqrt(z, sqrt_eps) if signed else z
    y, norms = _l2_normalise_with_norms(s)
    grad_s = (grad_y - y * np.sum(y * grad_y, axis=1, keepdims=True)) / np.maximum(norms, NORM_FLOOR)
    return grad_s * _signed_sqrt_derivative(z, sqrt_eps) if signed else grad_s
