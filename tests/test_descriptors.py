import math

import cv2
import numpy as np
import pytest

from ndir.descriptors import (
    dense_grid,
    dense_grid_shape,
    dense_hog,
    image_descriptors,
    min_image_size,
    n_descriptors,
    orientation_maps,
)
from ndir.errors import NdirInputError

# ---------------------------------------------------------------- slow reference


def brute_force_votes(image):
    """Per-pixel 8-bin orientation votes, by explicit loops (float64)."""
    height, width = image.shape
    votes = np.zeros((height, width, 8))
    for y in range(height):
        for x in range(width):
            # central differences with the edge pixel replicated
            gx = (float(image[y, min(x + 1, width - 1)]) - float(image[y, max(x - 1, 0)])) / 2
            gy = (float(image[min(y + 1, height - 1), x]) - float(image[max(y - 1, 0), x])) / 2
            magnitude = math.hypot(gx, gy)
            if magnitude == 0:
                continue
            theta = math.atan2(gy, gx) % (2 * math.pi)
            t = theta / (2 * math.pi / 8)
            k = math.floor(t)
            frac = t - k
            votes[y, x, k % 8] += magnitude * (1 - frac)
            votes[y, x, (k + 1) % 8] += magnitude * frac
    return votes


def brute_force_sift_normalise(histogram):
    norm = math.sqrt(sum(v * v for v in histogram))
    if norm < 1e-3:
        return [0.0] * len(histogram)
    clipped = [min(v / norm, 0.2) for v in histogram]
    norm = math.sqrt(sum(v * v for v in clipped))
    return [v / norm for v in clipped]


def brute_force_raw_histograms(image, step, cell_sizes):
    """Un-normalised 128-d histograms, looping over scales, patches, cells, pixels."""
    votes = brute_force_votes(image)
    height, width = image.shape
    rows = []
    for c in cell_sizes:
        patch = 4 * c
        for y0 in range(0, height - patch + 1, step):
            for x0 in range(0, width - patch + 1, step):
                histogram = [0.0] * 128
                for a in range(4):
                    for b in range(4):
                        for y in range(y0 + a * c, y0 + (a + 1) * c):
                            for x in range(x0 + b * c, x0 + (b + 1) * c):
                                for k in range(8):
                                    histogram[(4 * a + b) * 8 + k] += votes[y, x, k]
                rows.append(histogram)
    return np.array(rows)


def brute_force_dense_hog(image, step, cell_sizes):
    raw = brute_force_raw_histograms(image, step, cell_sizes)
    return np.array([brute_force_sift_normalise(list(h)) for h in raw])


# ---------------------------------------------------------------- grid and counts


@pytest.mark.parametrize(
    "height, width, step, patch",
    [
        (16, 16, 3, 16),
        (17, 30, 3, 16),
        (40, 41, 2, 24),
        (100, 77, 5, 40),
        (15, 99, 1, 16),
    ],
)
def test_dense_grid_matches_enumeration(height, width, step, patch):
    expected = [
        (y, x)
        for y in range(0, height, step)
        for x in range(0, width, step)
        if y + patch <= height and x + patch <= width
    ]
    grid = dense_grid(height, width, step, patch)
    assert grid.shape == (len(expected), 2)
    assert [tuple(p) for p in grid.tolist()] == expected
    n_rows, n_cols = dense_grid_shape(height, width, step, patch)
    assert n_rows * n_cols == len(expected)


@pytest.mark.parametrize(
    "height, width, step, cell_sizes",
    [
        (40, 40, 3, (4, 6, 8, 10)),
        (384, 512, 3, (4, 6, 8, 10)),
        (57, 90, 4, (4, 6, 8, 10)),
        (33, 20, 1, (2, 5)),
        (64, 48, 7, (3,)),
    ],
)
def test_descriptor_count_equals_grid_formula(height, width, step, cell_sizes):
    n = sum(((height - 4 * c) // step + 1) * ((width - 4 * c) // step + 1) for c in cell_sizes)
    assert n_descriptors(height, width, step, cell_sizes) == n
    image = np.random.default_rng(0).integers(0, 256, (height, width), dtype=np.uint8)
    descriptors = dense_hog(image, step=step, cell_sizes=cell_sizes)
    assert descriptors.shape == (n, 128)
    assert descriptors.dtype == np.float32


def test_default_count_for_a_512x384_image():
    # 123*166 + 121*163 + 118*161 + 115*158 patches of 16, 24, 32 and 40 px
    assert n_descriptors(384, 512) == 77309


# ---------------------------------------------------------------- against brute force


@pytest.mark.parametrize(
    "shape, step, cell_sizes",
    [((23, 29), 2, (2, 3)), ((45, 50), 3, (4, 6, 8, 10)), ((20, 26), 5, (5, 2))],
)
def test_dense_hog_equals_brute_force(shape, step, cell_sizes):
    image = np.random.default_rng(sum(shape)).integers(0, 256, shape, dtype=np.uint8)
    expected = brute_force_dense_hog(image, step, cell_sizes)
    np.testing.assert_allclose(dense_hog(image, step=step, cell_sizes=cell_sizes), expected, atol=1e-5, rtol=0)


def test_bands_of_grid_rows_do_not_change_the_result(monkeypatch):
    # dense_hog normalises bands of grid rows; with 5 descriptors per band
    # (one grid row per band here) every band boundary is exercised
    image = np.random.default_rng(10).integers(0, 256, (23, 29), dtype=np.uint8)
    monkeypatch.setattr("ndir.descriptors._BAND_DESCRIPTORS", 5)
    np.testing.assert_allclose(
        dense_hog(image, step=2, cell_sizes=(2, 3)),
        brute_force_dense_hog(image, 2, (2, 3)),
        atol=1e-5,
        rtol=0,
    )


def test_orientation_maps_equal_brute_force_votes():
    image = np.random.default_rng(4).integers(0, 256, (13, 17), dtype=np.uint8)
    maps = orientation_maps(image)
    assert maps.shape == (13, 17, 8) and maps.dtype == np.float32
    np.testing.assert_allclose(maps, brute_force_votes(image), rtol=1e-5, atol=1e-4)


def test_repeated_calls_are_bitwise_identical():
    image = np.random.default_rng(11).integers(0, 256, (64, 80), dtype=np.uint8)
    first = dense_hog(image)
    for _ in range(3):
        np.testing.assert_array_equal(dense_hog(image.copy()), first)


def test_float_and_uint8_images_agree():
    image = np.random.default_rng(5).integers(0, 256, (30, 30), dtype=np.uint8)
    np.testing.assert_allclose(
        dense_hog(image, cell_sizes=(4, 6)),
        dense_hog(image.astype(np.float64), cell_sizes=(4, 6)),
        atol=1e-6,
    )


# ---------------------------------------------------------------- SIFT normalisation


def test_sift_clipping_on_a_crafted_patch():
    # One 16x16 patch (cell 4): a strong vertical edge inside cell (1, 1) and
    # faint texture elsewhere, so a few entries dominate the raw histogram.
    rng = np.random.default_rng(6)
    image = rng.integers(100, 104, (16, 16)).astype(np.uint8)
    image[4:8, 6:8] = 250
    raw = brute_force_raw_histograms(image, 3, (4,))[0]
    unit = raw / np.linalg.norm(raw)
    clipped = unit > 0.2
    assert 0 < clipped.sum() < 128  # clipping must actually happen here

    descriptor = dense_hog(image, step=3, cell_sizes=(4,))
    assert descriptor.shape == (1, 128)
    d = descriptor[0].astype(np.float64)
    assert np.linalg.norm(d) == pytest.approx(1, abs=1e-6)
    # after clipping every dominant entry is 0.2 before renormalisation, so
    # they all equal the maximum, and the others keep their relative sizes
    expected = np.minimum(unit, 0.2)
    expected /= np.linalg.norm(expected)
    np.testing.assert_allclose(d, expected, atol=1e-6)
    np.testing.assert_allclose(d[clipped], d.max(), rtol=1e-6)
    assert d[~clipped].max() < d.max()
    # without the clip the largest entry would be much bigger
    assert unit.max() > 1.5 * d.max()


def test_rows_are_unit_norm_or_zero():
    rng = np.random.default_rng(7)
    image = rng.integers(0, 256, (60, 70), dtype=np.uint8)
    image[:30, :40] = 77  # a flat region: its patches have no gradient
    descriptors = dense_hog(image)
    norms = np.linalg.norm(descriptors, axis=1)
    zero = norms == 0
    assert zero.any() and not zero.all()
    np.testing.assert_allclose(norms[~zero], 1, atol=1e-5)
    assert descriptors.min() >= 0


def test_constant_image_gives_zero_descriptors():
    descriptors = dense_hog(np.full((50, 60), 128, np.uint8))
    assert descriptors.shape == (n_descriptors(50, 60), 128)
    assert not descriptors.any()


# ---------------------------------------------------------------- orientation


def ramp(angle, shape=(40, 40)):
    """Float image whose gradient has direction `angle` (radians, x towards +y rows)."""
    y, x = np.mgrid[: shape[0], : shape[1]].astype(np.float64)
    return 4.0 * (math.cos(angle) * x + math.sin(angle) * y)


@pytest.mark.parametrize("k", range(8))
def test_single_gradient_direction_fills_one_bin(k):
    image = ramp(k * math.pi / 4)
    descriptors = dense_hog(image, step=3, cell_sizes=(4,))
    # patches touching the image edge see one-sided differences there, which
    # bend diagonal gradients; all others see the ramp's exact direction
    corners = dense_grid(*image.shape, 3, 16)
    inside = (corners.min(axis=1) > 0) & (corners.max(axis=1) + 16 < 40)
    per_bin = descriptors[inside].reshape(-1, 16, 8)
    assert len(per_bin) == 49  # 7 x 7 of the 9 x 9 grid
    assert np.abs(np.delete(per_bin, k, axis=2)).max() < 1e-6
    # 16 equal cells, each 1/4 before the (uniform) clip: 1/4 after renormalising
    np.testing.assert_allclose(per_bin[:, :, k], 0.25, atol=1e-6)


def test_uint8_horizontal_ramp_is_bin_zero():
    # brightness growing to the right: gradient along +x, orientation 0
    image = np.tile(np.arange(0, 200, 5, dtype=np.uint8), (24, 1))
    per_bin = dense_hog(image, cell_sizes=(4, 6)).reshape(-1, 16, 8)
    assert per_bin[:, :, 1:].max() == 0
    # interior cells see gx = 2.5, edge-column cells a mix with gx = 1.25
    assert per_bin[:, :, 0].min() > 0


def test_gradient_between_two_bins_is_shared_linearly():
    # an angle 3/4 of the way from bin 0 (0 deg) to bin 1 (45 deg) votes
    # 1/4 of the magnitude to bin 0 and 3/4 to bin 1
    image = ramp(0.75 * math.pi / 4)
    interior = orientation_maps(image)[1:-1, 1:-1]
    magnitude = 4.0  # slope of the ramp along its gradient
    np.testing.assert_allclose(interior[..., 0], magnitude / 4, rtol=1e-5)
    np.testing.assert_allclose(interior[..., 1], 3 * magnitude / 4, rtol=1e-5)
    assert interior[..., 2:].max() < 1e-5


def test_orientation_maps_sum_to_gradient_magnitude():
    image = np.random.default_rng(9).integers(0, 256, (30, 40), dtype=np.uint8)
    gy, gx = np.gradient(image.astype(np.float64))  # central differences inside
    maps = orientation_maps(image).sum(axis=2)
    np.testing.assert_allclose(maps[1:-1, 1:-1], np.hypot(gx, gy)[1:-1, 1:-1], rtol=1e-5)
    assert (np.count_nonzero(orientation_maps(image), axis=2) <= 2).all()


# ---------------------------------------------------------------- validation


def test_min_image_size():
    assert min_image_size((4, 6, 8, 10)) == 40
    assert min_image_size((3,)) == 12
    dense_hog(np.zeros((40, 40), np.uint8))  # exactly the minimum is fine


@pytest.mark.parametrize("shape", [(39, 100), (100, 39), (10, 10)])
def test_too_small_image_raises_naming_sizes(shape):
    with pytest.raises(ValueError, match=r"minimum 40 px") as info:
        dense_hog(np.zeros(shape, np.uint8))
    assert f"{shape[1]}x{shape[0]}" in str(info.value)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"image": np.zeros((50, 50, 3), np.uint8)}, "2-D"),
        ({"image": np.zeros((50, 50), np.int16)}, "dtype"),
        ({"image": [[0] * 50] * 50}, "2-D"),
        ({"image": np.full((50, 50), np.nan)}, "NaN"),
        ({"step": 0}, "step"),
        ({"step": 1.5}, "step"),
        ({"cell_sizes": ()}, "cell_sizes"),
        ({"cell_sizes": (4, 0)}, "cell_sizes"),
    ],
)
def test_rejects_bad_arguments(kwargs, match):
    arguments = {"image": np.zeros((50, 50), np.uint8), **kwargs}
    with pytest.raises(ValueError, match=match):
        dense_hog(**arguments)


# ---------------------------------------------------------------- file pipeline


def test_image_descriptors_chains_read_preprocess_dense_hog(tmp_path):
    from ndir.preprocess import preprocess

    rng = np.random.default_rng(8)
    gray = cv2.GaussianBlur(rng.integers(0, 256, (90, 700), dtype=np.uint8), (5, 5), 0)
    path = tmp_path / "wide.png"
    cv2.imwrite(str(path), gray)
    descriptors = image_descriptors(path, max_width=128, step=4, cell_sizes=(3, 4))
    np.testing.assert_array_equal(
        descriptors,
        dense_hog(preprocess(gray, max_width=128), step=4, cell_sizes=(3, 4)),
    )


def test_image_descriptors_names_file_too_small_after_resizing(tmp_path):
    path = tmp_path / "strip.png"
    cv2.imwrite(str(path), np.zeros((60, 1200), np.uint8))  # 512 x 26 once resized
    with pytest.raises(NdirInputError, match="strip.png"):
        image_descriptors(path)
