"""The embedded near-duplicate data set, built from the real photos shipped with ndir.

Each group is one *scene*, a whole photo of ``ndir/photos/`` or a window of one,
and its images are *views* of that scene that differ the way holiday photos of
one place do: another framing (random crop covering 55-95 % of the scene, scale),
a tilted or slanted camera (rotation up to 15 degrees on half the views, mild
perspective on half), another exposure (gamma, contrast, brightness, white
balance) and JPEG compression (quality 70-95); the query view (``v = 0``) gets
the mildest changes. When photos are cut into windows, neighbouring windows share
60 % of a tile's side: scenes of different groups with pixels in common, the near
misses a real collection holds.

The views used to be blurred (sigma 0.6-2 px), noisy (sigma 2-8 grey levels) or
strongly compressed (JPEG 25-60) on 30 % of views each. On dense HOG these
nuisances move every affected signature the same way, so the first principal
axes followed them, and PCA lost 24-30 mAP points at R = 32 where real near
duplicates lose 2-9: :class:`ViewRecipe` describes each change, and
``benchmarks/embedded_ablation.py`` measures what each does (docs/data.md).

Group sizes follow INRIA Holidays (1491 images in 500 groups: 3 images per group
on average): 2 to 5 images, with probabilities :data:`GROUP_SIZE_PROBABILITIES`.

Files use Holidays naming, image id ``100000 + 100 g + v`` for view ``v`` of group
``g``, so ``ndir.data.scan_dataset("embedded", folder)`` reads them back with
group ``id // 100`` and query ``id % 100 == 0``.
"""

import io
import logging
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import cv2
import numpy as np
import pandas as pd

from ndir.errors import ConfigError, DatasetError

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
#: Share of a tile's side that neighbouring windows of one photo have in common
#: (``embedded.sibling_overlap`` of config.yaml).
DEFAULT_SIBLING_OVERLAP = 0.6
#: Smallest longer side of a view in pixels (``embedded.view_size``, ``--size``).
MIN_VIEW_SIZE = 64


def build_embedded_dataset(
    out_dir,
    n_groups,
    seed,
    view_size=DEFAULT_VIEW_SIZE,
    allow_overlap=False,
    recipe=None,
    sibling_overlap=DEFAULT_SIBLING_OVERLAP,
):
    """Write the embedded near-duplicate set into a folder.

    Scenes: with ``n_groups`` at most the number of shipped photos (118), each group
    gets a different whole photo. With more groups, photos are cut into windows
    (halves, thirds along the longer side, quarters), splitting the biggest
    remaining windows first, so that no two groups show the same scene; neighbouring
    windows share ``sibling_overlap`` of a tile's side. Beyond :func:`max_groups`
    groups this is impossible and an error is raised unless ``allow_overlap`` is
    set: then groups past the 118 whole photos
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
    recipe : ViewRecipe, optional
        How the views other than the query differ from it; default
        :data:`DEFAULT_RECIPE`.
    sibling_overlap : float, default :data:`DEFAULT_SIBLING_OVERLAP`
        When photos are cut into windows, neighbouring windows share this share of
        a tile's side: scenes of different groups that show some of the same
        pixels, the near misses real collections hold. 0: windows tile the photo.

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
        left); ``width``, ``height`` (int, px); ``scale`` (view px per photo px:
        below 1 the crop was shrunk, above 1 enlarged); ``gamma``, ``contrast``,
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
    scenes = _plan_scenes(photos, n_groups, allow_overlap, rng, sibling_overlap)
    # Group numbers are a random permutation of the scenes, so that group order
    # says nothing about the photo.
    groups = rng.permutation(n_groups)
    sizes = rng.choice(list(GROUP_SIZE_PROBABILITIES), size=n_groups, p=list(GROUP_SIZE_PROBABILITIES.values()))
    group_rngs = rng.spawn(n_groups)
    recipe = DEFAULT_RECIPE if recipe is None else recipe

    rows = []
    for photo_index in np.unique(scenes["photo_index"]):
        photo = photos.iloc[photo_index]
        pixels = _decode_photo(photo["file"])

        def another_photo(view_rng, this=photo_index):
            other = view_rng.integers(len(photos) - 1)
            return _decode_photo(photos["file"].iloc[other + (other >= this)])

        for scene in np.flatnonzero(scenes["photo_index"] == photo_index):
            group, box = groups[scene], tuple(int(c) for c in scenes["box"][scene])
            for view in range(sizes[group]):
                number = FIRST_IMAGE_NUMBER + 100 * group + view
                view_recipe = QUERY_RECIPE if view == 0 else recipe
                image, params = _render_view(pixels, box, view_size, view_recipe, group_rngs[group], another_photo)
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
    """Most groups :func:`build_embedded_dataset` makes from distinct scenes.

    Each photo gives up to :data:`MAX_WINDOWS_PER_PHOTO` windows whose tiles have at
    least :data:`MIN_WINDOW_SIDE` px a side (neighbours then share
    ``sibling_overlap`` of a tile's side).
    """
    photos = shipped_photos() if photos is None else photos
    return sum(_max_windows(int(w), int(h)) for w, h in zip(photos["width"], photos["height"], strict=True))


# --------------------------------------------------------------------------- scenes


def _plan_scenes(photos, n_groups, allow_overlap, rng, sibling_overlap=0.0):
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
            for box in _windows(widths[i], heights[i], counts[i], sibling_overlap):
                photo_index.append(i)
                boxes.append(box)
        return {"photo_index": np.array(photo_index), "box": np.array(boxes)}
    if not allow_overlap:
        raise ConfigError(
            f"embedded.n_groups: {n_groups} groups need as many distinct scenes, but the {n_photos} shipped "
            f"photos give at most {capacity} distinct windows of at least {MIN_WINDOW_SIDE} px a side; "
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


def _windows(width, height, count, sibling_overlap=0.0):
    """The ``count`` windows (x0, y0, x1, y1) tiling a photo, each grown into its
    neighbours by ``sibling_overlap / 2`` of a tile's side, so that neighbours share
    ``sibling_overlap`` of a tile's side (0: a tiling, no overlap)."""
    rows, cols = _grid(width, height, count)
    xs = np.linspace(0, width, cols + 1)
    ys = np.linspace(0, height, rows + 1)
    grow_x, grow_y = sibling_overlap * width / cols / 2, sibling_overlap * height / rows / 2
    return [
        (
            int(round(max(0, xs[c] - grow_x))),
            int(round(max(0, ys[r] - grow_y))),
            int(round(min(width, xs[c + 1] + grow_x))),
            int(round(min(height, ys[r + 1] + grow_y))),
        )
        for r in range(rows)
        for c in range(cols)
    ]


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


@dataclass(frozen=True)
class ViewRecipe:
    """How strongly the views of a scene (other than its query) differ from it.

    Each change is drawn independently per view: with its ``*_probability``, with a
    strength uniform in its range. The query view (``v = 0``) always gets the mild
    changes of :data:`QUERY_RECIPE`. ``benchmarks/embedded_ablation.py`` measures
    what each change does to Table I's shape (docs/data.md).

    Parameters
    ----------
    coverage : (float, float)
        Area of the view's crop as a share of the scene window.
    rotation_probability, rotation_deg : float
        Share of views rotated by up to ``rotation_deg`` degrees; the others by up to 3.
    perspective_probability : float; perspective : (float, float)
        Share of views whose corners move by a share of the crop's sides in this range.
    parallax_probability : float; parallax_px, parallax_cell_px : (float, float)
        Share of views whose pixels move by a smooth random field, as parts of a
        3-D scene move against each other when the camera moves: its largest
        displacement and the size of its cells, in view pixels.
    photometric_probability : float
        Share of views with another exposure: gamma ``exp(U(-log_gamma, log_gamma))``,
        contrast about mid-grey in ``contrast``, ``brightness`` grey levels at most,
        per-channel gains within ``1 +- gain`` (white balance).
    lighting_probability : float; lighting : (float, float)
        Share of views lit unevenly: a multiplicative ramp in a random direction whose
        gain goes from ``1 - s`` to ``1 + s`` across the view, ``s`` in ``lighting``.
    occluder_probability : float; occluder_area : (float, float)
        Share of views with a foreground object: an ellipse with a soft edge, cut
        from another shipped photo, whose box covers this share of the view.
    blur_probability : float; blur_sigma : (float, float)
        Share of out-of-focus views and their Gaussian blur (px, before JPEG).
    noise_probability : float; noise_sigma : (float, float)
        Share of noisy views and their Gaussian noise (grey levels).
    low_quality_probability : float; low_quality, quality : (int, int)
        Share of views compressed at a JPEG quality in ``low_quality``; the others
        in ``quality`` (bounds included).
    """

    coverage: tuple = (0.55, 0.95)
    rotation_probability: float = 0.5
    rotation_deg: float = 15.0
    perspective_probability: float = 0.5
    perspective: tuple = (0.02, 0.08)
    parallax_probability: float = 0.0
    parallax_px: tuple = (2.0, 6.0)
    parallax_cell_px: tuple = (20.0, 60.0)
    photometric_probability: float = 0.8
    log_gamma: float = 0.4
    contrast: tuple = (0.75, 1.25)
    brightness: float = 25.0
    gain: float = 0.1
    lighting_probability: float = 0.0
    lighting: tuple = (0.1, 0.4)
    occluder_probability: float = 0.0
    occluder_area: tuple = (0.05, 0.15)
    blur_probability: float = 0.0
    blur_sigma: tuple = (0.6, 2.0)
    noise_probability: float = 0.0
    noise_sigma: tuple = (2.0, 8.0)
    low_quality_probability: float = 0.0
    low_quality: tuple = (25, 60)
    quality: tuple = (70, 95)


#: The query's view: a near-full crop, level, exposure barely changed, good JPEG.
QUERY_RECIPE = ViewRecipe(
    coverage=(0.75, 0.95),
    rotation_probability=0.0,
    perspective_probability=0.0,
    photometric_probability=1.0,
    log_gamma=0.1,
    contrast=(0.95, 1.05),
    brightness=5.0,
    gain=0.0,
    blur_probability=0.0,
    noise_probability=0.0,
    low_quality_probability=0.0,
    quality=(80, 95),
)

#: The default run's views (``embedded`` data set).
DEFAULT_RECIPE = ViewRecipe()


def _render_view(photo, box, view_size, recipe, rng, occluder_source=None):
    """Draw one view of the scene ``box`` of ``photo`` (H, W, 3) uint8 BGR.

    ``occluder_source(rng)`` gives another photo (H', W', 3) to cut an occluder
    from. Returns the JPEG bytes and the parameters drawn (for ``views.csv``).
    """
    quad, rect_w, rect_h, geometry = _sample_geometry(box, recipe, rng)
    tone = _sample_tone(recipe, rng)
    scale = view_size / max(rect_w, rect_h)
    width, height = max(1, int(round(rect_w * scale))), max(1, int(round(rect_h * scale)))

    # Warp at the crop's own resolution, then resize: INTER_AREA averages the
    # pixels when shrinking, where warpPerspective alone would alias.
    work_w, work_h = (max(width, int(round(rect_w))), max(height, int(round(rect_h))))
    target = np.float32([[0, 0], [work_w - 1, 0], [work_w - 1, work_h - 1], [0, work_h - 1]])
    homography = cv2.getPerspectiveTransform(quad.astype(np.float32), target)
    parallax = _sample_parallax(recipe, rng)
    if parallax["parallax_px"] > 0:
        view = _warp_with_parallax(photo, homography, (work_w, work_h), box, parallax, work_w / width, rng)
    else:
        view = cv2.warpPerspective(
            photo, homography, (work_w, work_h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
        )
    if (work_w, work_h) != (width, height):
        view = cv2.resize(view, (width, height), interpolation=cv2.INTER_AREA)

    occluder = _sample_occluder(recipe, width, height, rng)
    if occluder["occluder_area"] > 0 and occluder_source is not None:
        view = _paste_occluder(view, occluder, occluder_source(rng), rng)
    view = cv2.LUT(view, _tone_curve(tone))
    if tone["lighting"] > 0:
        view = _relight(view, tone["lighting"], tone["lighting_angle_deg"])
    if tone["blur_sigma"] > 0:
        view = cv2.GaussianBlur(view, (0, 0), tone["blur_sigma"])
    if tone["noise_sigma"] > 0:
        noise = rng.standard_normal(view.shape, dtype=np.float32) * np.float32(tone["noise_sigma"])
        view = cv2.add(view, noise, dtype=cv2.CV_8U)  # rounds and saturates to 0..255
    ok, encoded = cv2.imencode(".jpg", view, [cv2.IMWRITE_JPEG_QUALITY, tone["jpeg_quality"]])
    if not ok:
        raise RuntimeError("OpenCV could not encode a JPEG view")
    params = {**geometry, **parallax, "width": width, "height": height, "scale": scale, **tone, **occluder}
    return encoded.tobytes(), params


def _sample_geometry(box, recipe, rng):
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
    coverage = rng.uniform(*recipe.coverage)
    strong = rng.random() < recipe.rotation_probability
    rotation = rng.uniform(-recipe.rotation_deg, recipe.rotation_deg) if strong else rng.uniform(-3, 3)
    slanted = rng.random() < recipe.perspective_probability
    perspective = rng.uniform(*recipe.perspective) if slanted else 0.0
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


def _sample_parallax(recipe, rng):
    """Amplitude (view px) and cell size (view px) of a view's smooth displacement field, or 0 for none."""
    if rng.random() >= recipe.parallax_probability:
        return {"parallax_px": 0.0, "parallax_cell_px": 0.0}
    return {"parallax_px": rng.uniform(*recipe.parallax_px), "parallax_cell_px": rng.uniform(*recipe.parallax_cell_px)}


def _warp_with_parallax(photo, homography, size, box, parallax, work_per_view_px, rng):
    """The crop of ``photo`` that ``homography`` maps to ``size`` (w, h), each pixel
    displaced by a smooth random field: what a camera moved in a 3-D scene sees.

    The field is Gaussian noise on a grid of ``parallax_cell_px`` (view px) cells,
    cubic-interpolated, scaled so that its largest displacement is ``parallax_px``
    view px. Source positions stay inside the scene window ``box``. One bilinear
    interpolation, at the working resolution (before the view's INTER_AREA resize).
    """
    work_w, work_h = size
    cell = parallax["parallax_cell_px"] * work_per_view_px
    grid_w, grid_h = int(np.ceil(work_w / cell)) + 2, int(np.ceil(work_h / cell)) + 2
    field = rng.standard_normal((2, grid_h, grid_w)).astype(np.float32)
    field = np.stack([cv2.resize(f, (work_w, work_h), interpolation=cv2.INTER_CUBIC) for f in field])
    field *= parallax["parallax_px"] * work_per_view_px / max(np.abs(field).max(), 1e-6)
    ys, xs = np.mgrid[0:work_h, 0:work_w].astype(np.float64)
    points = np.stack([xs + field[0], ys + field[1], np.ones_like(xs)])
    source = np.tensordot(np.linalg.inv(homography), points, axes=1)
    x0, y0, x1, y1 = box
    map_x = np.clip(source[0] / source[2], x0, x1 - 1).astype(np.float32)
    map_y = np.clip(source[1] / source[2], y0, y1 - 1).astype(np.float32)
    return cv2.remap(photo, map_x, map_y, interpolation=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def _sample_tone(recipe, rng):
    """Exposure, lighting, blur, noise and compression of one view."""
    if rng.random() < recipe.photometric_probability:
        gamma = np.exp(rng.uniform(-recipe.log_gamma, recipe.log_gamma))
        contrast, brightness = rng.uniform(*recipe.contrast), rng.uniform(-recipe.brightness, recipe.brightness)
        gains = rng.uniform(1 - recipe.gain, 1 + recipe.gain, size=3)
    else:
        gamma, contrast, brightness, gains = 1.0, 1.0, 0.0, np.ones(3)
    lit = rng.random() < recipe.lighting_probability
    lighting, lighting_angle = (rng.uniform(*recipe.lighting), rng.uniform(0, 360)) if lit else (0.0, 0.0)
    blur = rng.uniform(*recipe.blur_sigma) if rng.random() < recipe.blur_probability else 0.0
    noise = rng.uniform(*recipe.noise_sigma) if rng.random() < recipe.noise_probability else 0.0
    low = rng.random() < recipe.low_quality_probability
    low_q, high_q = recipe.low_quality if low else recipe.quality
    return {
        "gamma": float(gamma),
        "contrast": float(contrast),
        "brightness": float(brightness),
        "gain_b": gains[0],
        "gain_g": gains[1],
        "gain_r": gains[2],
        "lighting": lighting,
        "lighting_angle_deg": lighting_angle,
        "blur_sigma": blur,
        "noise_sigma": noise,
        "jpeg_quality": int(rng.integers(low_q, high_q + 1)),
    }


def _sample_occluder(recipe, width, height, rng):
    """Box of a view's occluder (px, half-open), or area 0 for none."""
    if rng.random() >= recipe.occluder_probability:
        return {"occluder_area": 0.0, "occluder_box": ""}
    area = rng.uniform(*recipe.occluder_area) * width * height
    aspect = np.exp(rng.uniform(-0.7, 0.7))
    w = int(np.clip(round(np.sqrt(area * aspect)), 1, width))
    h = int(np.clip(round(area / w), 1, height))
    x0, y0 = int(rng.integers(width - w + 1)), int(rng.integers(height - h + 1))
    return {"occluder_area": w * h / (width * height), "occluder_box": f"{x0},{y0},{x0 + w},{y0 + h}"}


def _paste_occluder(view, occluder, other_photo, rng):
    """``view`` with an object cut from ``other_photo`` in its occluder box.

    The object is an ellipse filling the box, its edge feathered over a tenth of
    the box's smaller side: a pasted rectangle's straight, sharp edges would add
    the same horizontal and vertical gradients to every occluded view.
    """
    x0, y0, x1, y1 = (int(v) for v in occluder["occluder_box"].split(","))
    w, h = x1 - x0, y1 - y0
    oh, ow = other_photo.shape[:2]
    # A crop of the other photo at most twice the box, at the box's aspect ratio.
    side = min(1.0, ow / (2 * w), oh / (2 * h))
    cw, ch = max(1, int(2 * w * side)), max(1, int(2 * h * side))
    cx, cy = int(rng.integers(ow - cw + 1)), int(rng.integers(oh - ch + 1))
    patch = cv2.resize(other_photo[cy : cy + ch, cx : cx + cw], (w, h), interpolation=cv2.INTER_AREA)
    mask = np.zeros((h, w), dtype=np.float32)
    cv2.ellipse(mask, (w // 2, h // 2), (max(1, w // 2 - 1), max(1, h // 2 - 1)), 0, 0, 360, 1.0, -1)
    mask = cv2.GaussianBlur(mask, (0, 0), max(0.5, min(w, h) / 10))[:, :, None]
    view = view.copy()
    region = view[y0:y1, x0:x1].astype(np.float32)
    view[y0:y1, x0:x1] = np.round(mask * patch + (1 - mask) * region).astype(np.uint8)
    return view


def _relight(view, strength, angle_deg):
    """Multiply ``view`` by a linear ramp from ``1 - strength`` to ``1 + strength`` along ``angle_deg``."""
    height, width = view.shape[:2]
    angle = np.deg2rad(angle_deg)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    along = np.cos(angle) * (xs / max(width - 1, 1) - 0.5) + np.sin(angle) * (ys / max(height - 1, 1) - 0.5)
    along /= max(np.abs(along).max(), 1e-9) * 2  # in [-0.5, 0.5]
    gain = 1.0 + 2.0 * np.float32(strength) * along
    return np.clip(view.astype(np.float32) * gain[:, :, None], 0, 255).round().astype(np.uint8)


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
