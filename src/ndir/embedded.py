"""The embedded near-duplicate data set, built from the real photos shipped with ndir.

Each group is one *scene*, a whole photo of ``ndir/photos/`` or a window of one,
and its images are *views* of that scene that differ the way holiday photos of
one place do: another framing (random crop covering 55-95 % of the scene, scale),
a tilted or slanted camera (rotation up to 15 degrees, mild perspective), another
exposure (gamma, contrast, brightness, white balance), a blurred or noisy shot
and JPEG compression (quality 25-95). Not every view gets every change, and the
query view (``v = 0``) gets the mildest ones.

Group sizes follow INRIA Holidays (1491 images in 500 groups: 3 images per group
on average): 2 to 5 images, with probabilities :data:`GROUP_SIZE_PROBABILITIES`.

Files use Holidays naming, image id ``100000 + 100 g + v`` for view ``v`` of group
``g``, so ``ndir.data.scan_dataset("embedded", folder)`` reads them back with
group ``id // 100`` and query ``id % 100 == 0``.
"""

import io
import logging
from importlib import resources
from pathlib import Path

import cv2
import numpy as np
import pandas as pd

from .errors import ConfigError, DatasetError

logger = logging.getLogger(__name__)

#: P(group of n images), n = 2..5; mean 3.02 images per group, as in Holidays (2.98).
GROUP_SIZE_PROBABILITIES = {2: 0.40, 3: 0.30, 4: 0.18, 5: 0.12}

#: Image number of view 0 of group 0 (Holidays numbering starts at 100000).
FIRST_IMAGE_NUMBER = 100000

#: Provenance table written beside the views.
PROVENANCE_FILE = "views.csv"

#: A photo is cut into at most this many scene windows (halves, thirds, quarters)...
MAX_WINDOWS_PER_PHOTO = 4
#: ...each at least this many pixels on a side.
MIN_WINDOW_SIDE = 160
#: Views sample only pixels this far inside their window, so that bilinear
#: interpolation never reads a neighbouring window of the same photo.
WINDOW_MARGIN = 2
#: Longer side of the views in pixels when none is given: the default run's
#: (``embedded.view_size`` of config.yaml, and ``ndir build-embedded --size``).
DEFAULT_VIEW_SIZE = 320
#: Smallest longer side of a view in pixels (``embedded.view_size``, ``--size``).
MIN_VIEW_SIZE = 64


def build_embedded_dataset(out_dir, n_groups, seed, view_size=DEFAULT_VIEW_SIZE, allow_overlap=False):
    """Write the embedded near-duplicate set into a folder.

    Scenes: with ``n_groups`` at most the number of shipped photos (118), each group
    gets a different whole photo. With more groups, photos are cut into
    non-overlapping windows (halves, thirds along the longer side, quarters),
    splitting the biggest remaining windows first, so that no two groups show the
    same scene. Beyond :func:`max_groups` groups this is impossible and an error is
    raised unless ``allow_overlap`` is set: then groups past the 118 whole photos
    get random windows (30-80 % of a photo) that may overlap other groups' scenes
    (meant for timing runs at Holidays scale, not for accuracy).

    Deterministic: the same arguments give byte-identical files with the same
    OpenCV build. All random draws come from ``numpy.random.default_rng(seed)``
    and its spawned per-group generators.

    Parameters
    ----------
    out_dir : str or os.PathLike
        Folder to write into; created if missing, must be empty.
    n_groups : int
        Number of groups (scenes), >= 1.
    seed : int
        Seed of every random choice.
    view_size : int, default :data:`DEFAULT_VIEW_SIZE`
        Longer side of every view in pixels; the other follows the crop's aspect
        ratio. Bounding the longer side (not the width) keeps portrait views of
        half-photo windows from tripling the pixel count, hence the descriptors.
    allow_overlap : bool, default False
        Let scenes of different groups overlap when ``n_groups > max_groups()``.

    Returns
    -------
    pandas.DataFrame
        One row per view, sorted as the image table (query first in each group).
        Columns: the image table's ``image_id`` (str), ``path`` (str, absolute),
        ``group`` (int, = image number // 100), ``is_query`` (bool); then the
        provenance written to ``out_dir/views.csv``: ``photo`` (source file in
        ``ndir/photos``), ``license``, ``copyright``, ``photo_source`` (URL);
        ``window_x0, window_y0, window_x1, window_y1`` (int, the scene's box in the
        photo, pixels, half-open); ``coverage`` (float, area of the view's source
        quadrilateral / area of the window); ``rotation_deg``, ``perspective``
        (largest corner shift as a fraction of the crop side); ``quad`` (the source
        quadrilateral's corners ``"x,y;..."``, photo pixels, clockwise from top
        left); ``width``, ``height`` (int, px); ``gamma``, ``contrast``,
        ``brightness`` (grey levels), ``gain_b, gain_g, gain_r``; ``blur_sigma``,
        ``noise_sigma`` (px, grey levels; 0 = not applied); ``jpeg_quality`` (int).
        In ``views.csv``, ``path`` is replaced by the file name ``file``.

    Raises
    ------
    ndir.errors.ConfigError
        If ``n_groups`` or ``view_size`` is not a positive integer (``view_size``
        >= 64), or ``n_groups > max_groups()`` without ``allow_overlap``.
    ndir.errors.DatasetError
        If ``out_dir`` exists and is not an empty folder.
    """
    _check_int("embedded.n_groups", n_groups, 1)
    _check_int("embedded.view_size", view_size, MIN_VIEW_SIZE)
    out_dir = Path(out_dir).expanduser().resolve()
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise DatasetError(f"{out_dir}: not an empty folder; build the embedded set into a new or empty folder")
    out_dir.mkdir(parents=True, exist_ok=True)

    photos = shipped_photos()
    rng = np.random.default_rng(seed)
    scenes = _plan_scenes(photos, n_groups, allow_overlap, rng)
    # Group numbers are a random permutation of the scenes, so that group order
    # says nothing about the photo.
    groups = rng.permutation(n_groups)
    sizes = rng.choice(list(GROUP_SIZE_PROBABILITIES), size=n_groups, p=list(GROUP_SIZE_PROBABILITIES.values()))
    group_rngs = rng.spawn(n_groups)

    rows = []
    for photo_index in np.unique(scenes["photo_index"]):
        photo = photos.iloc[photo_index]
        pixels = _decode_photo(photo["file"])
        for scene in np.flatnonzero(scenes["photo_index"] == photo_index):
            group, box = groups[scene], tuple(int(c) for c in scenes["box"][scene])
            for view in range(sizes[group]):
                number = FIRST_IMAGE_NUMBER + 100 * group + view
                image, params = _render_view(pixels, box, view_size, view == 0, group_rngs[group])
                path = out_dir / f"{number}.jpg"
                path.write_bytes(image)
                rows.append(
                    {
                        "image_id": str(number),
                        "path": str(path),
                        "group": number // 100,
                        "is_query": view == 0,
                        "photo": photo["file"],
                        "license": photo["license"],
                        "copyright": photo["copyright"],
                        "photo_source": photo["source"],
                        "window_x0": box[0],
                        "window_y0": box[1],
                        "window_x1": box[2],
                        "window_y1": box[3],
                        **params,
                    }
                )
    table = pd.DataFrame(rows).sort_values(
        ["group", "is_query", "image_id"], ascending=[True, False, True], ignore_index=True
    )
    provenance = table.drop(columns="path")
    provenance.insert(1, "file", table["image_id"] + ".jpg")
    provenance.to_csv(out_dir / PROVENANCE_FILE, index=False, float_format="%.4g")
    logger.info("wrote %d views of %d scenes into %s", len(table), n_groups, out_dir)
    return table


def shipped_photos():
    """The photos shipped in ``ndir/photos``, as listed by its ``MANIFEST.csv``.

    Returns
    -------
    pandas.DataFrame
        Columns ``file``, ``width``, ``height`` (px), ``license``, ``copyright``,
        ``source`` (URL of the original), ``modified`` (what was changed).
    """
    manifest = resources.files("ndir").joinpath("photos", "MANIFEST.csv").read_text(encoding="utf-8")
    return pd.read_csv(io.StringIO(manifest), keep_default_na=False)


def max_groups(photos=None):
    """Most groups :func:`build_embedded_dataset` makes from non-overlapping scenes.

    Each photo gives up to :data:`MAX_WINDOWS_PER_PHOTO` windows of at least
    :data:`MIN_WINDOW_SIDE` px a side.
    """
    photos = shipped_photos() if photos is None else photos
    return sum(_max_windows(int(w), int(h)) for w, h in zip(photos["width"], photos["height"], strict=True))


# --------------------------------------------------------------------------- scenes


def _plan_scenes(photos, n_groups, allow_overlap, rng):
    """Choose the scene of every group: a photo and a window (x0, y0, x1, y1) of it.

    Returns a dict of arrays: ``photo_index`` (n_groups,) int and ``box``
    (n_groups, 4) int.
    """
    widths = photos["width"].to_numpy(dtype=np.int64)
    heights = photos["height"].to_numpy(dtype=np.int64)
    n_photos = len(photos)
    capacity = max_groups(photos)
    if n_groups <= n_photos:
        chosen = np.sort(rng.choice(n_photos, size=n_groups, replace=False))
        boxes = [(0, 0, widths[i], heights[i]) for i in chosen]
        return {"photo_index": chosen, "box": np.array(boxes)}
    if n_groups <= capacity:
        counts = np.ones(n_photos, dtype=np.int64)
        limits = np.array([_max_windows(w, h) for w, h in zip(widths, heights, strict=True)])
        # Ties between photos of one size are broken in a random order.
        order = rng.permutation(n_photos)
        for _ in range(n_groups - n_photos):
            # Split next the photo whose windows stay the biggest after the split.
            area = np.where(counts < limits, widths * heights / (counts + 1), -1.0)
            best = order[np.argmax(area[order])]
            counts[best] += 1
        photo_index, boxes = [], []
        for i in range(n_photos):
            for box in _windows(widths[i], heights[i], counts[i]):
                photo_index.append(i)
                boxes.append(box)
        return {"photo_index": np.array(photo_index), "box": np.array(boxes)}
    if not allow_overlap:
        raise ConfigError(
            f"embedded.n_groups: {n_groups} groups need as many distinct scenes, but the {n_photos} shipped "
            f"photos give at most {capacity} non-overlapping windows of at least {MIN_WINDOW_SIDE} px a side; "
            f"use at most {capacity} groups (or let scenes repeat, for a timing set: embedded.allow_overlap in the "
            "config, --allow-overlap for `ndir build-embedded`)"
        )
    photo_index = np.concatenate([np.arange(n_photos), rng.integers(n_photos, size=n_groups - n_photos)])
    boxes = [(0, 0, widths[i], heights[i]) for i in range(n_photos)]
    for i in photo_index[n_photos:]:
        boxes.append(_random_window(widths[i], heights[i], rng))
    return {"photo_index": photo_index, "box": np.array(boxes)}


def _grid(width, height, count):
    """(rows, columns) cutting a photo into ``count`` windows: strips along the longer side, or 2 x 2."""
    if count == 4:
        return 2, 2
    return (1, count) if width >= height else (count, 1)


def _windows(width, height, count):
    """The ``count`` non-overlapping windows (x0, y0, x1, y1) tiling a photo."""
    rows, cols = _grid(width, height, count)
    xs = np.round(np.linspace(0, width, cols + 1)).astype(int)
    ys = np.round(np.linspace(0, height, rows + 1)).astype(int)
    return [(xs[c], ys[r], xs[c + 1], ys[r + 1]) for r in range(rows) for c in range(cols)]


def _max_windows(width, height):
    """Largest window count whose windows all keep MIN_WINDOW_SIDE px a side."""
    best = 1
    for count in range(2, MAX_WINDOWS_PER_PHOTO + 1):
        rows, cols = _grid(width, height, count)
        if min(width // cols, height // rows) >= MIN_WINDOW_SIDE:
            best = count
    return best


def _random_window(width, height, rng):
    """A random window covering 30-80 % of a photo, aspect ratio within 1.35x of the photo's."""
    area = rng.uniform(0.3, 0.8) * width * height
    aspect = width / height * np.exp(rng.uniform(-0.3, 0.3))
    w = min(width, int(round(np.sqrt(area * aspect))))
    h = min(height, int(round(w / aspect)))
    x0 = int(rng.integers(width - w + 1))
    y0 = int(rng.integers(height - h + 1))
    return x0, y0, x0 + w, y0 + h


def _decode_photo(name):
    data = resources.files("ndir").joinpath("photos", name).read_bytes()
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)


# --------------------------------------------------------------------------- views


def _render_view(photo, box, view_size, is_query, rng):
    """Draw one view of the scene ``box`` of ``photo`` (H, W, 3) uint8 BGR.

    Returns the JPEG bytes and the parameters drawn (for ``views.csv``).
    """
    quad, rect_w, rect_h, geometry = _sample_geometry(box, is_query, rng)
    tone = _sample_tone(is_query, rng)
    scale = view_size / max(rect_w, rect_h)
    width, height = max(1, int(round(rect_w * scale))), max(1, int(round(rect_h * scale)))

    # Warp at the crop's own resolution, then resize: INTER_AREA averages the
    # pixels when shrinking, where warpPerspective alone would alias.
    work_w, work_h = (max(width, int(round(rect_w))), max(height, int(round(rect_h))))
    target = np.float32([[0, 0], [work_w - 1, 0], [work_w - 1, work_h - 1], [0, work_h - 1]])
    homography = cv2.getPerspectiveTransform(quad.astype(np.float32), target)
    view = cv2.warpPerspective(
        photo, homography, (work_w, work_h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
    )
    if (work_w, work_h) != (width, height):
        view = cv2.resize(view, (width, height), interpolation=cv2.INTER_AREA)

    view = cv2.LUT(view, _tone_curve(tone))
    if tone["blur_sigma"] > 0:
        view = cv2.GaussianBlur(view, (0, 0), tone["blur_sigma"])
    if tone["noise_sigma"] > 0:
        noise = rng.standard_normal(view.shape, dtype=np.float32) * np.float32(tone["noise_sigma"])
        view = cv2.add(view, noise, dtype=cv2.CV_8U)  # rounds and saturates to 0..255
    ok, encoded = cv2.imencode(".jpg", view, [cv2.IMWRITE_JPEG_QUALITY, tone["jpeg_quality"]])
    if not ok:
        raise RuntimeError("OpenCV could not encode a JPEG view")
    return encoded.tobytes(), {**geometry, "width": width, "height": height, **tone}


def _sample_geometry(box, is_query, rng):
    """Source quadrilateral of a view inside the scene window.

    A crop rectangle covering ``coverage`` of the window (aspect ratio jittered by
    up to 16 %), its corners moved by up to ``perspective`` x its sides, rotated
    by ``rotation_deg``, shrunk if needed to fit the window, then placed at random.

    Returns
    -------
    quad : (4, 2) float64
        Corners (x, y) in photo pixels, clockwise from top left.
    rect_w, rect_h : float
        Sides of the (shrunk) crop rectangle: the view's aspect ratio and scale.
    params : dict
        ``coverage``, ``rotation_deg``, ``perspective``, ``quad`` (str).
    """
    x0, y0, x1, y1 = box
    room_w, room_h = x1 - x0 - 2 * WINDOW_MARGIN, y1 - y0 - 2 * WINDOW_MARGIN
    if is_query:
        coverage, rotation, perspective = rng.uniform(0.75, 0.95), rng.uniform(-3, 3), 0.0
    else:
        coverage = rng.uniform(0.55, 0.95)
        rotation = rng.uniform(-15, 15) if rng.random() < 0.5 else rng.uniform(-3, 3)
        perspective = rng.uniform(0.02, 0.08) if rng.random() < 0.5 else 0.0
    aspect = room_w / room_h * np.exp(rng.uniform(-0.15, 0.15))
    rect_w = np.sqrt(coverage * room_w * room_h * aspect)
    rect_h = rect_w / aspect
    corners = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]]) * [rect_w / 2, rect_h / 2]
    corners += rng.uniform(-perspective, perspective, size=(4, 2)) * [rect_w, rect_h]
    angle = np.deg2rad(rotation)
    rotate = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    corners = corners @ rotate.T
    span = corners.max(axis=0) - corners.min(axis=0)
    shrink = min(1.0, room_w / span[0], room_h / span[1])
    corners *= shrink
    # Range of centres keeping the quadrilateral inside the window; when the
    # shrink made it fit exactly, rounding can leave the range a hair below zero.
    first = np.array([x0, y0]) + WINDOW_MARGIN - corners.min(axis=0)
    last = np.maximum(first, np.array([x1, y1]) - WINDOW_MARGIN - corners.max(axis=0))
    quad = corners + rng.uniform(first, last)
    x, y = quad[:, 0], quad[:, 1]
    area = 0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))
    params = {
        "coverage": area / ((x1 - x0) * (y1 - y0)),
        "rotation_deg": rotation,
        "perspective": perspective,
        "quad": ";".join(f"{a:.2f},{b:.2f}" for a, b in quad),
    }
    return quad, rect_w * shrink, rect_h * shrink, params


def _sample_tone(is_query, rng):
    """Exposure, blur, noise and compression of one view (the query's are mild)."""
    if is_query:
        return {
            "gamma": float(np.exp(rng.uniform(-0.1, 0.1))),
            "contrast": rng.uniform(0.95, 1.05),
            "brightness": rng.uniform(-5, 5),
            "gain_b": 1.0,
            "gain_g": 1.0,
            "gain_r": 1.0,
            "blur_sigma": 0.0,
            "noise_sigma": 0.0,
            "jpeg_quality": int(rng.integers(80, 96)),
        }
    if rng.random() < 0.8:
        gamma, contrast, brightness = np.exp(rng.uniform(-0.4, 0.4)), rng.uniform(0.75, 1.25), rng.uniform(-25, 25)
        gains = rng.uniform(0.9, 1.1, size=3)
    else:
        gamma, contrast, brightness, gains = 1.0, 1.0, 0.0, np.ones(3)
    blur = rng.uniform(0.6, 2.0) if rng.random() < 0.3 else 0.0
    noise = rng.uniform(2, 8) if rng.random() < 0.3 else 0.0
    quality = rng.integers(25, 61) if rng.random() < 0.3 else rng.integers(70, 96)
    return {
        "gamma": float(gamma),
        "contrast": contrast,
        "brightness": brightness,
        "gain_b": gains[0],
        "gain_g": gains[1],
        "gain_r": gains[2],
        "blur_sigma": blur,
        "noise_sigma": noise,
        "jpeg_quality": int(quality),
    }


def _tone_curve(tone):
    """(256, 1, 3) uint8 look-up table: white balance, contrast about mid-grey, brightness, then gamma."""
    levels = np.arange(256, dtype=np.float64)[:, None]
    gains = np.array([tone["gain_b"], tone["gain_g"], tone["gain_r"]])
    values = (levels * gains - 128) * tone["contrast"] + 128 + tone["brightness"]
    values = 255 * (np.clip(values, 0, 255) / 255) ** tone["gamma"]
    return np.round(values).astype(np.uint8)[:, None, :]


def _check_int(key, value, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{key}: {value!r} is not an integer >= {minimum}")
