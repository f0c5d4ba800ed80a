"""The retrieval browser: a static page that shows every query of a run and its top k
under each method, written by rule ``browse`` (``results/browse/index.html``) and by
``ndir query --browse DIR``.

The page works from the file system, offline: ``index.html`` (:mod:`ndir.browse_page`:
its style and script inline, no font or script from elsewhere), ``data.js`` (the data,
one JavaScript file that assigns the global :data:`DATA_GLOBAL`: a ``<script>`` loads it
from ``file://``, where a ``fetch()`` of JSON is refused) and ``thumbs/`` (one
:data:`THUMB_SIZE`-pixel JPEG per image, shared by every method).

Rankings are stored compactly: per method and query the top :data:`TOP_K` image
indices and the ranks of every true match (all of them, the whole list ranked), and
the query's AP; no score. A ranking follows :func:`ndir.evaluation.map_from_scores`:
the query's own image left out, ties broken pessimistically (negatives first), so
the ranks are those the AP is computed on.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ndir import __version__
from ndir.atomic import atomic_output
from ndir.evaluation import average_precision
from ndir.report import DECIMALS

#: Results shown per query, by the workflow's rule and by ``ndir query --browse``
#: (a constant, not a config key: the page's size grows with it).
TOP_K = 10
#: Longer side of the thumbnails, in pixels, and their JPEG quality.
THUMB_SIZE = 160
THUMB_QUALITY = 80
PAGE_FILE = "index.html"
DATA_FILE = "data.js"
THUMBS_FOLDER = "thumbs"
#: The global that ``data.js`` assigns.
DATA_GLOBAL = "NDIR_BROWSE"
#: Version of the data's layout, checked by the page.
FORMAT_VERSION = 1


@dataclass
class Method:
    """One entry of the page's menu: a method's top k and true matches per query.

    ``key``: a unique identifier (in the page's address); ``label``: the menu's text;
    ``group``: the menu section; ``family``, ``input``, ``R``, ``tau``: how the summary
    describes it. ``top``: per query, up to k image indices, best first; ``matches``: per
    query, the 0-based ranks of all its true matches, increasing (None: relevance
    unknown), and ``match_images`` the images at those ranks; ``ap``: per-query APs in
    [0, 1] (None: unknown, for all or for one query); ``map``: their mean in %, the
    tables' value (computed when not given); ``record``: ``(method, input)`` of its row
    in the seeds comparison (the frontier), if it has one.
    """

    key: str
    label: str
    group: str
    top: np.ndarray
    matches: list | None = None
    match_images: list | None = None
    ap: np.ndarray | None = None
    family: str = ""
    input: str = ""
    R: int | None = None
    tau: float | None = None
    record: tuple | None = None
    map: float | None = field(default=None)

    def __post_init__(self):
        if self.ap is not None and self.map is None and all(value is not None for value in self.ap):
            self.map = 100 * float(np.mean(self.ap))

    def as_json(self):
        return {
            "key": self.key,
            "label": self.label,
            "group": self.group,
            "family": self.family,
            "input": self.input,
            "R": None if self.R is None else int(self.R),
            "tau": None if self.tau is None else float(self.tau),
            "map": self.map,
            "map_text": map_text(self.map),
            "record": None if self.record is None else list(self.record),
            "top": _lists(self.top),
            "matches": _lists(self.matches),
            "match_images": _lists(self.match_images),
            "ap": None if self.ap is None else [None if value is None else float(value) for value in self.ap],
        }


def map_text(value):
    """A mAP in % as the tables print it (:data:`ndir.report.DECIMALS`, rounded by
    ``np.round``: an exact half goes to the even digit, where JavaScript's ``toFixed``
    would round up); None for None."""
    return None if value is None else f"{np.round(value, DECIMALS) + 0.0:.{DECIMALS}f}"


def _lists(arrays):
    return None if arrays is None else [[int(value) for value in array] for array in arrays]


def rankings(scores, query_rows, groups, k=TOP_K):
    """Each query's top ``k`` and the ranks of all its true matches, from scores.

    Parameters
    ----------
    scores : (n_queries, n_images) float array, higher is more similar; finite.
    query_rows : (n_queries,) int, each query's column.
    groups : (n_images,) group labels (the true matches of a query: the other images of
        its group).
    k : results kept per query (at most ``n_images - 1``).

    Returns
    -------
    top : (n_queries, min(k, n_images - 1)) int, image indices best first.
    matches : list of (n_positives,) int arrays, the 0-based ranks of each query's true
        matches in its whole list, increasing.
    match_images : list of (n_positives,) int arrays, the images at those ranks.
    ap : (n_queries,) float64, :func:`ndir.evaluation.average_precision` of those ranks.
    """
    scores = np.array(scores, dtype=np.float64)
    query_rows = np.asarray(query_rows, dtype=np.intp).ravel()
    groups = np.asarray(groups).ravel()
    n_queries, n_images = scores.shape
    if n_queries != query_rows.size or n_images != groups.size:
        raise ValueError(f"scores {scores.shape} for {query_rows.size} queries and {groups.size} images")
    if not np.all(np.isfinite(scores)):
        raise ValueError("scores contain NaN or infinite values")
    order = _ranked(scores, query_rows, groups)
    positive = groups[order] == groups[query_rows][:, None]
    matches = [np.flatnonzero(row) for row in positive]
    match_images = [row[ranks] for row, ranks in zip(order, matches)]
    ap = np.array([average_precision(ranks, ranks.size) if ranks.size else 0.0 for ranks in matches])
    return order[:, : min(k, n_images - 1)], matches, match_images, ap


def _ranked(scores, query_rows, groups):
    """(n_queries, n_images - 1): each query's list without its own image, by decreasing
    score, negatives before positives of equal score, then by column."""
    rows = np.arange(query_rows.size)
    positive = groups[None, :] == groups[query_rows][:, None]
    scores[rows, query_rows] = -np.inf  # the query itself: last, then left out
    # lexsort: the last key is the primary one.
    order = np.lexsort((positive, -scores), axis=1)
    return order[:, :-1]


def method_from_scores(key, label, group, scores, query_rows, groups, k=TOP_K, ap=None, **describe):
    """A :class:`Method` from its scores (:func:`rankings`); ``ap``: the per-query APs
    the run's evaluation computes (:func:`ndir.evaluation.map_from_scores`), which the
    ranks' own must equal (checked), kept so that the page's means are the tables'."""
    top, matches, match_images, from_ranks = rankings(scores, query_rows, groups, k)
    if ap is not None:
        ap = np.asarray(ap, dtype=np.float64)
        if ap.shape != from_ranks.shape or not np.allclose(ap, from_ranks, rtol=0, atol=1e-9):
            worst = int(np.argmax(np.abs(ap - from_ranks))) if ap.shape == from_ranks.shape else None
            raise ValueError(f"{label}: the ranks' APs differ from the evaluation's (query {worst})")
    return Method(key, label, group, top, matches, match_images, from_ranks if ap is None else ap, **describe)


def dot_scores(Y, query_rows):
    """Scores of signatures compared by dot product, as :func:`ndir.evaluation.holidays_map`
    computes them (summed in float64)."""
    from ndir.projection.product import float64_inner

    Y = np.asarray(Y)
    return float64_inner(Y[np.asarray(query_rows)], Y)


def page_data(
    title, names, thumbs, queries, methods, k=TOP_K, groups=None, subtitle="", notes=(), frontier=None, compare=None
):
    """The page's data (``data.js``): ``names`` (file names, the thumbnails' alt text)
    and ``thumbs`` (paths relative to the page) of the images, ``queries`` (their
    indices), ``methods`` (:class:`Method`, in menu order), ``compare`` (the keys of
    the two compared first; default: the first two methods), ``groups`` (each image's
    group label, or None), the ``frontier`` (:func:`frontier_points`) and ``notes``
    (sentences under the summary)."""
    keys = [method.key for method in methods]
    if len(set(keys)) != len(keys):
        raise ValueError(f"method keys repeat: {sorted(key for key in keys if keys.count(key) > 1)}")
    if not methods:
        raise ValueError("no method to browse")
    n_queries = len(queries)
    for method in methods:
        if len(method.top) != n_queries:
            raise ValueError(f"{method.label}: {len(method.top)} rankings for {n_queries} queries")
    if compare is not None and (len(compare) != 2 or not set(compare) <= set(keys)):
        raise ValueError(f"compare {compare}: not two of the methods' keys")
    if len(names) != len(thumbs):
        raise ValueError(f"{len(names)} image names for {len(thumbs)} thumbnails")
    return {
        "format": FORMAT_VERSION,
        "generator": f"ndir {__version__}",
        "title": title,
        "subtitle": subtitle,
        "k": int(k),
        "images": {
            "names": [str(name) for name in names],
            "thumbs": [str(thumb) for thumb in thumbs],
            "groups": None if groups is None else [None if g is None else str(g) for g in groups],
        },
        "queries": [int(q) for q in queries],
        "methods": [method.as_json() for method in methods],
        "compare": list(compare) if compare is not None else keys[:2] if len(keys) > 1 else keys * 2,
        "frontier": frontier,
        "notes": list(notes),
    }


def frontier_points(records, fronts, costs, styles, methods):
    """The frontier as the page draws it: one point per row of the seeds comparison's
    ``records`` (its CSV), its costs (the columns of ``costs``, ``{column: unit}``),
    test mAP (%), whether it is on each cost's Pareto front (``fronts``, ``{column:
    mask}``), its colour and marker (``styles``, rows as ``records``: ``family``,
    ``colour``, ``marker``; :func:`ndir.figures.frontier_styles`) and the key of the
    browsed method it opens, if any (``methods`` whose ``record`` is its
    ``(method, signature)``)."""
    by_record = {tuple(method.record): method.key for method in methods if method.record is not None}
    points = []
    for i, row in enumerate(records.itertuples(index=False)):
        points.append(
            {
                "method": row.method,
                "input": styles["input"].iloc[i],
                "family": styles["family"].iloc[i],
                "colour": styles["colour"].iloc[i],
                "marker": styles["marker"].iloc[i],
                "costs": [float(getattr(row, column)) for column in costs],
                "map": 100 * float(row.test_map),
                "map_text": map_text(100 * float(row.test_map)),
                "front": [bool(fronts[column][i]) for column in costs],
                "browse": by_record.get((row.method, row.signature)),
            }
        )
    return {"costs": [{"column": column, "unit": unit} for column, unit in costs.items()], "points": points}


def write_thumbnail(source, target, size=THUMB_SIZE):
    """A JPEG of the image ``source`` whose longer side is at most ``size`` pixels."""
    from PIL import Image

    with Image.open(source) as image:
        image = image.convert("RGB")
        image.thumbnail((size, size))
        image.save(target, "JPEG", quality=THUMB_QUALITY, optimize=True)


def thumbnail_names(n_images):
    """``thumbs/<i>.jpg`` of each image, relative to the page."""
    return [f"{THUMBS_FOLDER}/{i}.jpg" for i in range(n_images)]


def write_browser(folder, data, sources):
    """Write the page into ``folder``: ``index.html``, ``data.js`` and a thumbnail of
    each image of ``data`` from its file ``sources[i]`` (those of ``data['images']``,
    in order). The folder is created; the files are written atomically, the page last,
    so that a page is never there without its data. Returns the page's path."""
    from ndir.browse_page import page_html

    folder = Path(folder)
    thumbs = data["images"]["thumbs"]
    if len(sources) != len(thumbs):
        raise ValueError(f"{len(sources)} image files for {len(thumbs)} thumbnails")
    for source, thumb in zip(sources, thumbs):
        target = folder / thumb
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(target) as tmp:
            write_thumbnail(source, tmp)
    with atomic_output(folder / DATA_FILE) as tmp:
        Path(tmp).write_text(data_script(data), encoding="utf-8")
    with atomic_output(folder / PAGE_FILE) as tmp:
        Path(tmp).write_text(page_html(), encoding="utf-8")
    return folder / PAGE_FILE


def data_script(data):
    """``data.js``: one line that assigns the data to ``window.NDIR_BROWSE`` (ASCII JSON)."""
    return f"window.{DATA_GLOBAL} = {json.dumps(data, separators=(',', ':'), allow_nan=False)};\n"


def read_data(folder):
    """The data of the page in ``folder`` (``data.js`` read back), for tests and tools."""
    text = (Path(folder) / DATA_FILE).read_text(encoding="utf-8")
    prefix = f"window.{DATA_GLOBAL} = "
    if not text.startswith(prefix):
        raise ValueError(f"{folder}/{DATA_FILE}: not a page's data")
    return json.loads(text[len(prefix) :].rstrip().removesuffix(";"))


def folder_bytes(folder):
    """Bytes of every file under ``folder``."""
    return sum(path.stat().st_size for path in Path(folder).rglob("*") if path.is_file())
