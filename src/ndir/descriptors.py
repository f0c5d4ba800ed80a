"""Dense SIFT-like HOG local descriptors (Negrel et al. 2014, §V-B).

The paper uses "HOG local descriptors (128-dimensional) [19], extracted on a
regular dense grid of 3 pixels at 4 scales". We compute them as follows.

Gradient
    Central differences on the grey levels, ``gx = (I[y, x+1] - I[y, x-1]) / 2``
    and ``gy = (I[y+1, x] - I[y-1, x]) / 2``, with the image edge replicated
    (so on the border the difference is one-sided and halved). Magnitude
    ``m = sqrt(gx**2 + gy**2)``; orientation ``theta = atan2(gy, gx)`` in
    [0, 2*pi), measured from the +x (column) axis towards the +y (row, i.e.
    downward) axis.
Orientation binning
    8 bins centred on ``k * pi/4``, k = 0..7. Each pixel votes ``m`` split
    linearly between the two nearest bin centres (circularly): with
    ``t = theta / (pi/4)``, bin ``floor(t) mod 8`` gets ``m * (1 - frac(t))``
    and the next bin gets ``m * frac(t)``. This gives 8 orientation maps,
    computed once per image and shared by all scales.
Spatial binning
    A descriptor covers a square patch of 4x4 cells of ``c x c`` pixels (patch
    side ``4c``). Each cell histogram is the plain (unweighted) sum of the 8
    orientation maps over the cell's pixels: no bilinear spatial
    interpolation, no Gaussian window. Layout of the 128 entries:
    ``index = (4 * cell_row + cell_col) * 8 + orientation`` (orientation
    fastest, as in OpenCV's SIFT).
Scales and grid
    One scale per cell size; the default ``cell_sizes=(4, 6, 8, 10)`` are the
    four bin sizes of VLFeat's ``vl_phow`` (patches of 16, 24, 32 and 40 px).
    At each scale the patches' top-left corners are ``(i * step, j * step)``
    for every ``i, j >= 0`` such that the patch fits in the image
    (:func:`dense_grid`); ``step=3`` is the paper's grid. Rows of the output
    are ordered scale by scale (in the order of ``cell_sizes``), then
    row-major over the grid.
Normalisation
    As in SIFT (Lowe 2004): L2-normalise, clip entries at 0.2, L2-normalise
    again. A patch whose raw histogram has L2 norm below ``MIN_HISTOGRAM_NORM``
    (no gradient at all: on uint8 images the smallest non-zero gradient
    magnitude is 0.5, giving a norm of at least 0.35) yields a zero
    descriptor rather than amplified rounding noise.

Deviations from VLFeat's ``vl_dsift`` / ``vl_phow``: no Gaussian smoothing of
the image per scale, no bilinear (triangular) spatial interpolation between
cells, no Gaussian window, no contrast threshold beyond the zero-gradient
test, and the grid starts at the image corner for every scale (so patch
centres differ between scales instead of being aligned as in ``vl_phow``).

Implementation: the orientation maps are an (H, W, 8) float32 image, each
scale's cell sums one ``cv2.boxFilter`` over it (accumulated in float64 by
OpenCV), and each of the 16 cell positions of all patches is gathered by one
strided slice; Python loops run over scales, bands of grid rows and the 16
cells, never over patches. About 52 ms for the 77 309 descriptors of a
512x384 image on 2 cores (benchmarks/bench_descriptors.py).
"""

import numbers

import cv2
import numpy as np

from ndir.errors import NdirInputError
from ndir.preprocess import MAX_WIDTH, preprocess

N_CELLS = 4
N_ORIENTATIONS = 8
DESCRIPTOR_DIM = N_CELLS * N_CELLS * N_ORIENTATIONS
SIFT_CLIP = 0.2
#: The paper's dense grid (§V-B): a descriptor every 3 pixels at four cell sizes.
STEP = 3
CELL_SIZES = (4, 6, 8, 10)
MIN_HISTOGRAM_NORM = 1e-3
# descriptors per band of grid rows normalised together (~1 MB, cache-sized)
_BAND_DESCRIPTORS = 2048
_CELL_ITEM = np.dtype((np.void, 4 * N_ORIENTATIONS))  # one cell's 8 float32 bins


def dense_grid_shape(height, width, step, patch_size):
    """Number of grid rows and columns of patches that fit in an image.

    Returns
    -------
    (n_rows, n_cols) : tuple of int
        ``(height - patch_size) // step + 1`` (0 if the patch is taller than
        the image), and the same for the width.
    """
    n_rows = (height - patch_size) // step + 1 if height >= patch_size else 0
    n_cols = (width - patch_size) // step + 1 if width >= patch_size else 0
    return n_rows, n_cols


def dense_grid(height, width, step, patch_size):
    """Top-left corners of the square patches of a regular dense grid.

    Parameters
    ----------
    height, width : int
        Image size in pixels.
    step : int
        Grid stride in pixels.
    patch_size : int
        Patch side in pixels.

    Returns
    -------
    (n, 2) int64
        ``(y, x)`` of each patch, row-major: corners at ``0, step, 2*step, ...``
        along each axis while the patch fits; ``n = n_rows * n_cols`` from
        :func:`dense_grid_shape`.
    """
    n_rows, n_cols = dense_grid_shape(height, width, step, patch_size)
    ys, xs = np.meshgrid(
        np.arange(n_rows, dtype=np.int64) * step,
        np.arange(n_cols, dtype=np.int64) * step,
        indexing="ij",
    )
    return np.stack([ys.ravel(), xs.ravel()], axis=1)


def n_descriptors(height, width, step=STEP, cell_sizes=CELL_SIZES):
    """Number of rows :func:`dense_hog` returns for an image of this size."""
    return sum(int(np.prod(dense_grid_shape(height, width, step, N_CELLS * c))) for c in cell_sizes)


def min_image_size(cell_sizes=CELL_SIZES):
    """Smallest image side (px) on which :func:`dense_hog` fits every scale's patch."""
    return N_CELLS * max(cell_sizes)


def orientation_maps(image):
    """Magnitude-weighted, linearly interpolated orientation channels.

    Parameters
    ----------
    image : (H, W) array
        Grey levels (uint8 or float).

    Returns
    -------
    (H, W, 8) float32
        Channel k holds, per pixel, the share of the gradient magnitude voted
        to the orientation bin centred on ``k * pi/4`` (see module docstring);
        at most two channels per pixel are non-zero and they sum to the
        magnitude.
    """
    height, width = image.shape
    padded = cv2.copyMakeBorder(image.astype(np.float32), 1, 1, 1, 1, cv2.BORDER_REPLICATE)
    gx = (padded[1:-1, 2:] - padded[1:-1, :-2]) * np.float32(0.5)
    gy = (padded[2:, 1:-1] - padded[:-2, 1:-1]) * np.float32(0.5)
    # np.hypot rather than cv2.magnitude, whose last bit varies between calls
    # on the same input (OpenCV 5.0) and would make outputs irreproducible
    magnitude = np.hypot(gx, gy)
    # np.arctan2 rather than cv2.phase, whose angle is off by up to 0.01 degree
    # and would blur the bin interpolation beyond float32 precision.
    position = np.arctan2(gy, gx) * np.float32(N_ORIENTATIONS / (2 * np.pi))
    lower = np.floor(position)
    upper_vote = (position - lower) * magnitude
    # position lies in [-4, 4]; & 7 is the modulo 8 that also wraps negatives
    lower_bin = lower.astype(np.int32) & (N_ORIENTATIONS - 1)
    upper_bin = (lower_bin + 1) & (N_ORIENTATIONS - 1)

    maps = np.zeros((height, width, N_ORIENTATIONS), dtype=np.float32)
    flat = maps.reshape(-1)
    pixel_offset = np.arange(0, height * width * N_ORIENTATIONS, N_ORIENTATIONS, dtype=np.int64).reshape(height, width)
    flat[pixel_offset + lower_bin] = magnitude - upper_vote
    flat[pixel_offset + upper_bin] = upper_vote
    return maps


def dense_hog(image, step=STEP, cell_sizes=CELL_SIZES):
    """Dense SIFT-like HOG descriptors of a grey-level image at several scales.

    Parameters
    ----------
    image : (H, W) uint8 or float array
        Grey levels in [0, 255] (the output of :func:`ndir.preprocess.preprocess`).
    step : int, default 3
        Grid stride in pixels ("regular dense grid of 3 pixels", §V-B).
    cell_sizes : sequence of int, default (4, 6, 8, 10)
        Cell side in pixels, one scale per entry; patch side ``4 * cell_size``.

    Returns
    -------
    (n, 128) float32
        One row per patch, scale by scale then row-major over the grid of
        :func:`dense_grid`; ``n = n_descriptors(H, W, step, cell_sizes)``
        (77 309 rows for a 512x384 image with the defaults). Rows have unit
        L2 norm and are SIFT-normalised (module docstring), or are zero for
        patches without gradient.

    Raises
    ------
    ValueError
        If the arguments are malformed, or the image is smaller than
        ``min_image_size(cell_sizes)`` on a side.
    """
    if (
        not isinstance(image, np.ndarray)
        or image.ndim != 2
        or not (image.dtype == np.uint8 or np.issubdtype(image.dtype, np.floating))
    ):
        raise ValueError(
            "dense_hog expects a 2-D uint8 or float grey-level array, got "
            + (
                f"shape {image.shape} and dtype {image.dtype}"
                if isinstance(image, np.ndarray)
                else f"an object of type {type(image).__name__}"
            )
        )
    if image.dtype != np.uint8 and not np.isfinite(image).all():
        raise ValueError("dense_hog got an image with NaN or infinite grey levels")
    if not _is_positive_int(step):
        raise ValueError(f"step must be a positive integer, got {step!r}")
    cell_sizes = tuple(cell_sizes)
    if not cell_sizes or not all(_is_positive_int(c) for c in cell_sizes):
        raise ValueError(f"cell_sizes must be a non-empty sequence of positive integers, got {cell_sizes!r}")
    minimum = min_image_size(cell_sizes)
    height, width = image.shape
    if min(height, width) < minimum:
        raise ValueError(
            f"image of {width}x{height} px is smaller than the minimum {minimum} px "
            f"on a side needed for a {minimum}x{minimum} patch "
            f"(cell sizes {cell_sizes})"
        )

    maps = orientation_maps(image)
    descriptors = np.empty((n_descriptors(height, width, step, cell_sizes), DESCRIPTOR_DIM), np.float32)
    start = 0
    for cell in cell_sizes:
        # cells[y, x] = sum of maps over rows y..y+cell-1 and columns x..x+cell-1
        # (OpenCV accumulates float32 box sums in float64)
        cells = cv2.boxFilter(
            maps,
            -1,
            (cell, cell),
            anchor=(0, 0),
            normalize=False,
            borderType=cv2.BORDER_CONSTANT,
        )
        n_rows, n_cols = dense_grid_shape(height, width, step, N_CELLS * cell)
        n = n_rows * n_cols
        scale = descriptors[start : start + n]
        # Copy each cell's 8 bins as one 32-byte item: numpy's strided copy is
        # about twice as fast with one opaque item as with 8 float32 (bit-exact).
        cell_items = cells.view(_CELL_ITEM)[..., 0]
        scale_items = scale.view(_CELL_ITEM).reshape(n_rows, n_cols, N_CELLS * N_CELLS)
        # Bands of grid rows small enough that the normalisation passes run on
        # data still in cache (the bands, not the patches, are looped over).
        band = max(1, _BAND_DESCRIPTORS // n_cols)
        for r0 in range(0, n_rows, band):
            r1 = min(n_rows, r0 + band)
            for cell_row in range(N_CELLS):
                y0 = r0 * step + cell_row * cell
                rows = cell_items[y0 : y0 + (r1 - r0) * step : step]
                for cell_col in range(N_CELLS):
                    x0 = cell_col * cell
                    scale_items[r0:r1, :, N_CELLS * cell_row + cell_col] = rows[:, x0 : x0 + n_cols * step : step]
            _sift_normalise(scale[r0 * n_cols : r1 * n_cols])
        start += n
    return descriptors


def image_descriptors(path, max_width=MAX_WIDTH, step=STEP, cell_sizes=CELL_SIZES):
    """Read, pre-process and describe one image file (§V-B pipeline).

    ``read_gray -> preprocess(max_width) -> dense_hog(step, cell_sizes)``.

    Returns
    -------
    (n, 128) float32
        See :func:`dense_hog`.

    Raises
    ------
    ndir.errors.ImageReadError
        If the file cannot be decoded.
    ndir.errors.NdirInputError
        If the resized image is smaller than ``min_image_size(cell_sizes)``.
    """
    # imported here so that ndir.data may import this module (min_image_size)
    from ndir.data import read_gray

    image = preprocess(read_gray(path), max_width=max_width)
    minimum = min_image_size(cell_sizes)
    if min(image.shape) < minimum:
        height, width = image.shape
        raise NdirInputError(
            f"{path}: image is {width}x{height} px after resizing to at most "
            f"{max_width} px wide, smaller than the {minimum} px needed on a side "
            "for one descriptor; use a larger image, or remove it from the image folder"
        )
    return dense_hog(image, step=step, cell_sizes=cell_sizes)


def descriptor_params(config):
    """The parameters of :func:`image_descriptors_with` that a workflow config sets
    (``preprocess.max_width``, ``descriptors.step``, ``descriptors.cell_sizes``)."""
    return {
        "max_width": config["preprocess"]["max_width"],
        "step": config["descriptors"]["step"],
        "cell_sizes": config["descriptors"]["cell_sizes"],
    }


def image_descriptors_with(path, params):
    """:func:`image_descriptors` with a mapping of its parameters (``max_width``, ``step``,
    ``cell_sizes``), as the config's ``descriptors`` and a codebook file store them."""
    return image_descriptors(
        path, max_width=params["max_width"], step=params["step"], cell_sizes=tuple(params["cell_sizes"])
    )


def _sift_normalise(descriptors):
    """In place: L2-normalise rows, clip at 0.2, L2-normalise again (Lowe 2004).

    Clipping the raw row at ``0.2 * norm`` and normalising once is the same
    as normalising, clipping at 0.2 and renormalising, with one pass less.
    Rows whose raw norm is below MIN_HISTOGRAM_NORM become zero.
    """
    norms = np.sqrt(np.einsum("ij,ij->i", descriptors, descriptors))
    np.minimum(descriptors, (np.float32(SIFT_CLIP) * norms)[:, None], out=descriptors)
    clipped_norms = np.sqrt(np.einsum("ij,ij->i", descriptors, descriptors))
    scale = np.zeros_like(clipped_norms)
    np.divide(1, clipped_norms, out=scale, where=norms >= MIN_HISTOGRAM_NORM)
    descriptors *= scale[:, None]


def _is_positive_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value > 0
