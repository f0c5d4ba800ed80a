"""Image pre-processing of Negrel et al. 2014, §V-B.

"For all our experiments, we perform a two-step pre-processing on all images:
(a) image resizing (to a maximum width of 512 pixels); (b) histogram equalization."
"""

import numbers

import cv2
import numpy as np

#: The paper's images are resized to at most this width in pixels (§V-B).
MAX_WIDTH = 512


def preprocess(gray, max_width=MAX_WIDTH):
    """Shrink a grey-level image to at most ``max_width`` columns, then equalise it.

    Parameters
    ----------
    gray : (H, W) uint8
        Grey-level image, as returned by :func:`ndir.data.read_gray`.
    max_width : int, default 512
        Largest width after resizing, in pixels. Wider images are shrunk with
        ``cv2.INTER_AREA`` (pixel-area averaging, the alias-free choice for
        down-sampling) to width ``max_width`` and height
        ``max(1, round(H * max_width / W))``, keeping the aspect ratio; narrower
        images are never upscaled.

    Returns
    -------
    (H', W') uint8
        The resized image after ``cv2.equalizeHist`` (global histogram
        equalisation over 256 grey levels), W' <= ``max_width``.

    Raises
    ------
    ValueError
        If ``gray`` is not a non-empty 2-D uint8 array or ``max_width`` is not a
        positive integer.
    """
    if not isinstance(gray, np.ndarray) or gray.ndim != 2 or gray.dtype != np.uint8:
        raise ValueError(
            "preprocess expects a 2-D uint8 grey-level array, got "
            f"{_describe(gray)}; read images with ndir.data.read_gray"
        )
    if gray.size == 0:
        raise ValueError(f"preprocess got an empty image of shape {gray.shape}")
    if not isinstance(max_width, numbers.Integral) or isinstance(max_width, bool) or max_width < 1:
        raise ValueError(f"max_width must be a positive integer, got {max_width!r}")

    height, width = gray.shape
    image = np.ascontiguousarray(gray)
    if width > max_width:
        new_height = max(1, round(height * max_width / width))
        image = cv2.resize(image, (int(max_width), new_height), interpolation=cv2.INTER_AREA)
    return cv2.equalizeHist(image)


def _describe(array):
    """Shape and dtype of an array, or the type of anything else, for error messages."""
    if isinstance(array, np.ndarray):
        return f"an array of shape {array.shape} and dtype {array.dtype}"
    return f"an object of type {type(array).__name__}"
