import cv2
import numpy as np
import pytest

from ndir.preprocess import preprocess


@pytest.mark.parametrize(
    "shape, max_width, expected",
    [
        ((777, 1333), 512, (298, 512)),  # 777 * 512 / 1333 = 298.4
        ((480, 640), 512, (384, 512)),
        ((1000, 600), 512, (853, 512)),  # portrait: 1000 * 512 / 600 = 853.3
        ((40, 2000), 100, (2, 100)),
        ((3, 3000), 100, (1, 100)),  # never collapses to zero rows
    ],
)
def test_resize_caps_width_and_keeps_aspect(shape, max_width, expected):
    gray = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    out = preprocess(gray, max_width=max_width)
    assert out.dtype == np.uint8
    assert out.shape == expected
    assert out.shape[1] <= max_width
    assert abs(out.shape[0] - shape[0] * out.shape[1] / shape[1]) <= 1


@pytest.mark.parametrize("shape", [(100, 200), (384, 512), (600, 300)])
def test_no_upscaling(shape):
    gray = np.random.default_rng(1).integers(0, 256, shape, dtype=np.uint8)
    # Not resampled at all: only equalised.
    np.testing.assert_array_equal(preprocess(gray, max_width=512), cv2.equalizeHist(gray))


def test_downscaling_averages_pixel_areas():
    # Each 2x2 block of `image` averages exactly to `base` (the +-d pattern
    # sums to zero), so an area-averaging halving gives `base` exactly, while
    # nearest-neighbour sampling would give base + d.
    rng = np.random.default_rng(2)
    base = rng.integers(20, 230, (50, 64)).astype(np.int16)
    pattern = np.tile(np.array([[1, -1], [-1, 1]], np.int16), (50, 64)) * 15
    image = (np.kron(base, np.ones((2, 2), np.int16)) + pattern).astype(np.uint8)
    out = preprocess(image, max_width=64)
    np.testing.assert_array_equal(out, cv2.equalizeHist(base.astype(np.uint8)))


def test_histogram_is_equalised():
    # a low-contrast, bell-shaped grey-level distribution: far from uniform
    rng = np.random.default_rng(3)
    gray = np.clip(rng.normal(120, 12, (300, 400)), 0, 255).astype(np.uint8)

    def cdf_deviation(image):
        levels, counts = np.unique(image, return_counts=True)
        cdf = np.cumsum(counts) / image.size
        # for an equalised image the fraction of pixels <= v is about v / 255
        return np.max(np.abs(cdf - levels / 255))

    assert cdf_deviation(gray) > 0.3
    out = preprocess(gray)
    assert out.shape == gray.shape
    assert out.min() == 0 and out.max() == 255
    assert cdf_deviation(out) < 0.03


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((10, 10), np.float32),
        np.zeros((10, 10, 3), np.uint8),
        np.zeros(10, np.uint8),
        np.zeros((0, 10), np.uint8),
        [[0, 1], [2, 3]],
    ],
)
def test_rejects_bad_images(bad):
    with pytest.raises(ValueError, match="preprocess"):
        preprocess(bad)


@pytest.mark.parametrize("max_width", [0, -5, 2.5, True])
def test_rejects_bad_max_width(max_width):
    with pytest.raises(ValueError, match="max_width"):
        preprocess(np.zeros((10, 10), np.uint8), max_width=max_width)
