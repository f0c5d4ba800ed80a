"""Figures 2-4 of Negrel et al. 2014 from training histories, as PNG and PDF, the seeds
comparison's and the JCF poster's figures (:func:`seeds_comparison_figure`,
:func:`jcf_recall_figure`) and the retrievals figure (queries and their top results,
:func:`retrievals_figure`).

A history is what :func:`ndir.stages.sparse.train_sparse_projector` writes: one row per
iteration with ``objective`` and, every few steps, ``{train,test}_map_{dot,l2}``.
Figures 2-4 each take a list of ``(signature, R, tau, history)`` tuples.
"""

import functools
import itertools
import logging
import textwrap

import numpy as np
from matplotlib import font_manager, ft2font, rcParams
from matplotlib.figure import Figure

from ndir.projection.sparse_rank import STOP_MAX_ITER

logger = logging.getLogger(__name__)

#: Scoring of Figures 2b and 3b: the similarity the projectors are trained for.
SCORING = "dot"


def _label(run, vary):
    """The legend entry of a training; one that stopped before ``max_iter`` says at which
    step and why (its history's ``stopped_by``, :data:`ndir.projection.sparse_rank.STOP_REASONS`)."""
    _, R, tau, history = run
    label = f"R = {R}" if vary == "R" else f"τ = {100 * tau:g} %"
    reason = history["stopped_by"].iloc[0] if "stopped_by" in history else None
    if reason is not None and reason != STOP_MAX_ITER:
        label += f": stopped at step {int(history['iteration'].iloc[-1])}, {reason}"
    return label


def _figure(**kwargs):
    """A figure drawn by Agg through its own canvas: no pyplot state, no global backend
    change for whoever imports this module, nothing to close."""
    return Figure(constrained_layout=True, **kwargs)


def _metadata(path):
    """No creation date in a PDF, no software version in a PNG: the same figure gives
    byte-identical files from run to run and version to version."""
    path = str(path)
    return {"CreationDate": None} if path.endswith(".pdf") else {"Software": None} if path.endswith(".png") else None


def _save(fig, stem):
    for ext in ("png", "pdf"):
        fig.savefig(f"{stem}.{ext}", dpi=150, metadata=_metadata(f"{stem}.{ext}"))


def convergence_figure(runs, vary, signature, stem):
    """Fig. 2 (``vary="R"``, tau = 0) or Fig. 3 (``vary="tau"``, fixed R).

    (a) objective (Eq. 13) against iteration, log scale; (b) training mAP (%).
    """
    fig = _figure(figsize=(10, 4))
    objective, train = fig.subplots(1, 2)
    for run in sorted(runs, key=lambda r: r[1] if vary == "R" else r[2]):
        history = run[3]
        objective.semilogy(history["iteration"], history["objective"].clip(lower=1e-16), label=_label(run, vary))
        measured = history.dropna(subset=[f"train_map_{SCORING}"])
        train.plot(measured["iteration"], 100 * measured[f"train_map_{SCORING}"], label=_label(run, vary))
    objective.set(xlabel="iteration", ylabel="objective (Eq. 13)", title="(a) Objective function evolution")
    train.set(xlabel="iteration", ylabel="training mAP (%)", title="(b) mAP evolution")
    for ax in (objective, train):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{signature.upper()}: training set")
    _save(fig, stem)


def generalisation_figure(runs, signature, stem):
    """Fig. 4: training and test mAP (%) against iteration, one colour per R.

    (a) reductions scored by the dot product the loss is written for; (b) scored
    L2-normalised, as Tables I and II.
    """
    fig = _figure(figsize=(11, 4.5))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, scoring, title in zip(axes, ("dot", "l2"), ("(a) dot product", "(b) L2-normalised")):
        for run in sorted(runs, key=lambda r: r[1]):
            _, R, tau, history = run
            measured = history.dropna(subset=[f"test_map_{scoring}"])
            (line,) = ax.plot(measured["iteration"], 100 * measured[f"train_map_{scoring}"], label=f"train, R = {R}")
            ax.plot(
                measured["iteration"],
                100 * measured[f"test_map_{scoring}"],
                linestyle="--",
                color=line.get_color(),
                label=f"test, R = {R}",
            )
        ax.set(xlabel="iteration", ylabel="mAP (%)", title=title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small", ncol=2)
    fig.suptitle(f"{signature.upper()}, τ = {100 * runs[0][2]:g} %: training and test sets")
    _save(fig, stem)


def seeds_comparison_figure(records, stem):
    """Test mAP (%) against bytes stored (log scale), one marker per method family.

    ``records``: the comparison's rows (see :mod:`ndir.comparison`); points of one
    family and input (e.g. PCA on FV-256 at each R) are joined by a line, colours
    tell the inputs apart.
    """
    from ndir.report import input_label, method_family

    records = records.assign(family=records["method"].map(method_family))
    markers = dict(zip(sorted(records["family"].unique()), itertools.cycle("osD^v<>pPX*h")))
    colours = dict(zip(sorted(records["signature"].unique()), rcParams["axes.prop_cycle"].by_key()["color"]))
    fig = _figure(figsize=(8, 5.5))
    ax = fig.subplots()
    for (family, signature), rows in records.groupby(["family", "signature"], sort=True):
        rows = rows.sort_values("model_bytes")
        ax.plot(
            rows["model_bytes"],
            100 * rows["test_map"],
            marker=markers[family],
            color=colours[signature],
            linestyle="-" if len(rows) > 1 else "none",
            label=f"{family} ({input_label(signature)})",
        )
    ax.set_xscale("log")
    ax.set(xlabel="bytes stored for the learned model (log scale)", ylabel="test mAP (%)")
    ax.set_title("Seeds comparison: accuracy against storage")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="x-small", ncol=2, loc="best")
    _save(fig, stem)


#: The frontier's colours: a hue per kind of method (the first kind whose prefix starts
#: the family), four shades of it (colormap, first index), one per family of that kind.
FRONTIER_KINDS = (
    (("sparse rank",), "tab20b", 12),
    (("thresholded PCA",), "tab20c", 8),
    (("PCA", "whitened PCA"), "tab20c", 0),
    (("random sparse", "Gaussian RP"), "tab20c", 16),
    (("PQ",), "tab20c", 12),
    (("SOML",), "tab20c", 4),
    (("tf-idf", "sparse similarity matrix"), "tab20b", 4),
    (("second-order pooling", "codebook second-order pooling"), "tab20b", 0),
    (("factorised", "JCF"), "tab20b", 16),
    (("",), "tab20b", 8),
)
#: The frontier's markers, one per input (signature), in the inputs' sorted order.
FRONTIER_MARKERS = "osD^v<>P"


def frontier_styles(records):
    """Colour and marker of each row of the seeds comparison's ``records``: a hue per
    kind of method (:data:`FRONTIER_KINDS`), a shade per family within it
    (:func:`ndir.report.method_family`: tau = 0.99 and 0.9 of one kind are two shades),
    a marker per input. Returns a DataFrame (``records``' index) with ``family``,
    ``input`` (:func:`ndir.report.input_label`), ``colour`` (``#rrggbb``) and ``marker``;
    the figure and the retrieval browser draw with it."""
    import pandas as pd
    from matplotlib.colors import to_hex

    from ndir.report import input_label, method_family

    families = records["method"].map(method_family)
    inputs = records["signature"].map(input_label)

    def kind(family):
        return next(i for i, (prefixes, _, _) in enumerate(FRONTIER_KINDS) if family.startswith(prefixes))

    colour = {}
    for family in sorted(set(families), key=lambda f: (kind(f), f), reverse=True):
        prefixes, cmap, first = FRONTIER_KINDS[kind(family)]
        shade = sum(kind(other) == kind(family) for other in colour) % 4
        colour[family] = to_hex(_colours(cmap)[first + shade])
    marker = dict(zip(sorted(set(inputs)), itertools.cycle(FRONTIER_MARKERS)))
    return pd.DataFrame(
        {"family": families, "input": inputs, "colour": families.map(colour), "marker": inputs.map(marker)},
        index=records.index,
    )


def frontier_figure(records, fronts, summaries, costs, stem):
    """Test mAP (%) against each cost of ``costs`` (log scale), one panel each.

    ``records``: the comparison's rows (see :mod:`ndir.comparison`), one marker per
    method and setting, coloured by method family and shaped by input
    (:func:`frontier_styles`: two legends under the panels, inside the figure);
    ``fronts`` ``{cost: mask}`` of each panel's Pareto front, drawn as a step line
    through its points, circled and labelled with their method and input;
    ``summaries`` ``{cost: sentence}`` printed under the legends.
    """
    from matplotlib.lines import Line2D

    styles = frontier_styles(records)
    fig = _figure(figsize=(14, 9.5))
    grid = fig.add_gridspec(3, len(costs), height_ratios=[5.6, 1.3, 0.7])
    labels = []
    for i, (cost, unit) in enumerate(costs.items()):
        ax = fig.add_subplot(grid[0, i])
        for (colour, marker), rows in records.groupby([styles["colour"], styles["marker"]], sort=True):
            ax.scatter(rows[cost], 100 * rows["test_map"], marker=marker, color=colour, s=30, edgecolors="0.25",
                       linewidths=0.4)  # fmt: skip
        front = records[fronts[cost]].sort_values(cost)
        ax.plot(front[cost], 100 * front["test_map"], drawstyle="steps-post", color="black", lw=1.2)
        ax.scatter(front[cost], 100 * front["test_map"], s=130, facecolors="none", edgecolors="black", lw=1.2)
        labels.append((ax, front, cost))
        ax.set_xscale("log")
        ax.set(xlabel=f"{unit} (log scale)", ylabel="test mAP (%)")
        ax.set_title(f"({'ab'[i]}) mAP against {unit}; Pareto front in black, labelled")
        ax.grid(alpha=0.3, which="both")
    legend_ax = fig.add_subplot(grid[1, :])
    legend_ax.axis("off")
    family_colours = dict(zip(styles["family"], styles["colour"]))
    input_markers = dict(zip(styles["input"], styles["marker"]))
    swatch = dict(linestyle="none", markersize=8, markeredgecolor="0.25", markeredgewidth=0.4)
    families = legend_ax.legend(
        [Line2D([], [], marker="o", color=family_colours[f], **swatch) for f in sorted(family_colours)],
        sorted(family_colours),
        title="colour: method family",
        loc="upper left",
        ncol=4,
        fontsize="small",
        frameon=False,
    )
    legend_ax.add_artist(families)
    legend_ax.legend(
        [Line2D([], [], marker=input_markers[i], color="0.55", **swatch) for i in sorted(input_markers)],
        sorted(input_markers),
        title="marker: input",
        loc="upper right",
        ncol=1,
        fontsize="small",
        frameon=False,
    )
    text = fig.add_subplot(grid[2, :])
    text.axis("off")
    lines = [f"Front by {unit}: {summaries[cost]}." for cost, unit in costs.items()]
    text.text(0, 1, "\n".join(textwrap.fill(line, 190) for line in lines), va="top", fontsize="x-small")
    fig.draw_without_rendering()  # the constrained layout places the panels, then the labels go in
    for ax, front, cost in labels:
        _label_front(ax, front, cost, styles)
    _save(fig, stem)


#: Where a front point's label may go, in points from the point: beside it, then
#: further below (a front climbs along the top left of its panel; below is free).
_LABEL_OFFSETS = [(dx, dy) for dy in (-9, 9, -23, 23, *range(-37, -200, -14)) for dx in (9, -9)]


def _label_front(ax, front, cost, styles):
    """Write each front point's method and input beside it, at the first of
    :data:`_LABEL_OFFSETS` where the label stays inside the panel and overlaps neither
    a label already written nor a front point (cheapest point first; where none is
    free, the one that overlaps fewest); a label set further away is joined to its
    point by a thin line."""
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    box = ax.get_window_extent()
    pixels = ax.transData.transform(np.column_stack([front[cost], 100 * front["test_map"]]))
    radius = 8 * ax.figure.dpi / 72
    taken = [Bbox.from_extents(x - radius, y - radius, x + radius, y + radius) for x, y in pixels]
    for index, row in front.iterrows():
        best = None
        for dx, dy in _LABEL_OFFSETS:
            far = abs(dy) > 9
            label = ax.annotate(
                f"{row['method']} ({styles.loc[index, 'input']})",
                (row[cost], 100 * row["test_map"]),
                xytext=(dx, dy),
                textcoords="offset points",
                fontsize=7,
                ha="left" if dx > 0 else "right",
                va="center",
                bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.85),
                arrowprops=dict(arrowstyle="-", color="0.4", lw=0.5, shrinkA=0, shrinkB=5) if far else None,
            )
            label.set_in_layout(False)
            label.get_window_extent()  # places the text
            extent = Text.get_window_extent(label).padded(4)  # the text alone, not its line
            inside = box.x0 <= extent.x0 and extent.x1 <= box.x1 and box.y0 <= extent.y0 and extent.y1 <= box.y1
            overlaps = sum(extent.overlaps(other) for other in taken) + (0 if inside else len(taken) + 1)
            if best is None or overlaps < best[0]:
                if best is not None:
                    best[1].remove()
                best = (overlaps, label, extent)
            else:
                label.remove()
            if overlaps == 0:
                break
        taken.append(best[2])


def _colours(name):
    from matplotlib import colormaps

    cmap = colormaps[name]
    return [cmap(j) for j in range(cmap.N)]


#: Markers of the JCF figure's learned families (:data:`ndir.report.JCF_FAMILY_ORDER`).
JCF_MARKERS = {"factorised": "s", "JCF": "o", "JCF shared": "D"}
#: Line styles of the JCF figure's second-order pooling baselines, by increasing size
#: (without codebook, then each codebook size K).
JCF_BASELINE_STYLES = ("--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)))


def jcf_recall_figure(records, stem):
    """Recall@1 (%) against the number of learned parameters (log scale), the JCF
    poster's figure, on our test split.

    ``records``: the JCF records (:mod:`ndir.stages.jcf`). Each learned model is a
    filled marker (one per family: factorised without codebook, JCF-R, JCF-R-k),
    its random initialisation an open marker joined to it by a dotted line, both
    labelled with the method. The second-order pooling baselines learn nothing: they
    are horizontal lines (without codebook, then one per codebook size K), labelled
    with their dimensions.
    """
    colours = rcParams["axes.prop_cycle"].by_key()["color"]
    fig = _figure(figsize=(7.5, 5))
    ax = fig.subplots()
    models = records[records["initialisation"] != "none"]
    learned = models[models["initialisation"] == "learned"].sort_values(["family", "n_parameters"])
    for i, row in enumerate(learned.itertuples()):
        colour = colours[i % len(colours)]
        random = models[(models["initialisation"] == "random") & (models["method"] == f"{row.method}, random init")]
        if len(random):
            ax.plot(
                [row.n_parameters] * 2,
                [100 * random["recall_at_1"].iloc[0], 100 * row.recall_at_1],
                linestyle=":",
                color=colour,
            )
            ax.plot(
                row.n_parameters,
                100 * random["recall_at_1"].iloc[0],
                marker=JCF_MARKERS.get(row.family, "o"),
                markerfacecolor="white",
                color=colour,
                linestyle="none",
            )
        ax.plot(
            row.n_parameters,
            100 * row.recall_at_1,
            marker=JCF_MARKERS.get(row.family, "o"),
            color=colour,
            linestyle="none",
            label=f"{row.method}: {row.n_parameters:,} parameters",
        )
        ax.annotate(
            row.method, (row.n_parameters, 100 * row.recall_at_1), textcoords="offset points", xytext=(6, 4), fontsize=7
        )
    baselines = records[records["initialisation"] == "none"].sort_values("dims")
    for style, row in zip(itertools.cycle(JCF_BASELINE_STYLES), baselines.itertuples()):
        ax.axhline(
            100 * row.recall_at_1, color="0.35", linestyle=style, linewidth=1, label=f"{row.method} ({row.dims:,} dims)"
        )
    ax.set_xscale("log")
    if len(learned):
        low, high = learned["n_parameters"].min(), learned["n_parameters"].max()
        ax.set_xlim(low / 3, high * 3)
    ax.set(xlabel="learned parameters (log scale)", ylabel="test Recall@1 (%)")
    ax.set_title("JCF: Recall@1 against parameters (open markers: random initialisation)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="x-small", loc="best")
    _save(fig, stem)


# --------------------------------------------------------------------------- retrievals

#: Frame of a result that is a near duplicate of its query (True), one that is not
#: (False) and one whose relevance is unknown (None: the images have no groups).
FRAME_COLOURS = {True: "#1a9850", False: "#d73027", None: "#969696"}
#: Frame of the query image.
QUERY_COLOUR = "#2166ac"


def frame_colour(relevant):
    """Frame colour of a result: green a near duplicate, red not, grey unknown (None)."""
    return FRAME_COLOURS[None if relevant is None else bool(relevant)]


def thumbnail(path, size=160):
    """An image as RGB uint8 (h, w, 3), its longer side at most ``size`` pixels,
    aspect kept; None if Pillow cannot read it."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.draft("RGB", (size, size))
            image = image.convert("RGB")
            image.thumbnail((size, size))
            return np.asarray(image)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None


@functools.cache
def _charmap(font_file):
    """The code points the font file ``font_file`` has glyphs for."""
    return frozenset(ft2font.FT2Font(font_file).get_charmap())


def _drawable(text):
    """``text`` and the font families that draw it: matplotlib's default first, then
    installed fonts for the characters it lacks (the CJK of a file name, say), which
    matplotlib falls back to. A character no installed font has becomes ``?``, with a
    warning that says what to install, rather than a box and a warning per glyph."""
    default = font_manager.findfont(font_manager.FontProperties())
    missing = {c for c in text if c.isprintable() and ord(c) not in _charmap(default)}
    families = [font_manager.FontProperties(fname=default).get_name()]
    # Last Resort draws every code point as a box naming its block: no better than "?".
    candidates = sorted(
        {(font.name, font.fname) for font in font_manager.fontManager.ttflist if "Last Resort" not in font.name}
    )
    for name, font_file in candidates:
        if not missing:
            break
        try:
            covered = {c for c in missing if ord(c) in _charmap(font_file)}
        except (OSError, RuntimeError):  # a font file FreeType cannot read
            continue
        if covered and name not in families:
            families.append(name)
            missing -= covered
    if missing:
        logger.warning(
            "no installed font draws %s of %r; drawn as '?': install a font that has them "
            "(fonts-noto-cjk for Chinese, Japanese and Korean)",
            "".join(sorted(missing)),
            text,
        )
        text = "".join("?" if c in missing else c for c in text)
    return text, families


def _show_image(ax, path, colour, size):
    pixels = thumbnail(path, size)
    if pixels is None:
        ax.text(0.5, 0.5, "unreadable", ha="center", va="center", fontsize=7, transform=ax.transAxes)
    else:
        ax.imshow(pixels, interpolation="antialiased")
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_edgecolor(colour)
        spine.set_linewidth(3)


def retrievals_figure(queries, outputs, title=None, thumb_size=128, dpi=110):
    """Query images and their top results under one or several methods, as a grid of
    thumbnails (aspect kept), each result framed by :func:`frame_colour`.

    One band per query (shaded every other one): the query on the left, framed
    blue, then one row per method: its name, its AP for that query if given, and its
    results, best first.

    Parameters
    ----------
    queries : list of dict, one band each:

        ``query`` : path of the query image;
        ``label`` : str, optional, printed under the query;
        ``methods`` : list of dict, one row each: ``name`` (str), ``results``
        (image paths, best first), ``relevant`` (optional, one bool per result, or
        None where unknown; missing: all unknown), ``captions`` (optional, one
        str per result, printed under it, e.g. its score) and ``ap`` (optional
        average precision in [0, 1] of this query under this method, printed if
        given).
    outputs : iterable of paths; each is written in the format of its suffix
        (``.png``, ``.pdf``, ...) at ``dpi``, without a date, so that the same
        input gives the same bytes.
    title : optional figure title.
    thumb_size : longer side of the thumbnails in pixels.

    Returns
    -------
    list (per query) of lists (per method) of the frame colours of its results.
    """
    if not queries:
        raise ValueError("no query to draw")
    k = max((len(m["results"]) for q in queries for m in q["methods"]), default=0)
    if k == 0:
        raise ValueError("no result to draw")
    cell = 1.1
    width_ratios = [1.5, 1.3] + [1.0] * k
    heights = [max(len(q["methods"]), 1) for q in queries]
    fig = _figure(figsize=(cell * sum(width_ratios), cell * sum(heights)))
    ratios = [cell * h for h in heights]  # inches
    if title:
        # The title gets a band of its own above the queries' (a suptitle would be
        # drawn over the first band's column numbers once it takes two lines).
        ratios.insert(0, 0.15 + _LINE_HEIGHT * 9 / 72)
        fig.set_figheight(sum(ratios))
    # Ratios in whole points: fractional ones leave the last band's edge at -1e-16,
    # written "-0" in the PDF one run and "0" the next.
    band_grid = fig.add_gridspec(
        len(ratios), 1, height_ratios=_points(ratios), left=0, right=1, bottom=0, top=1, hspace=0
    )
    bands = [fig.add_subfigure(band_grid[i, 0]) for i in range(len(ratios))]
    if title:
        title_band, bands = bands[0], bands[1:]
    colours = []
    for band, query, n_rows in zip(bands, queries, heights):
        band.set_facecolor("#f2f2f2" if len(colours) % 2 else "white")
        grid = band.add_gridspec(n_rows, 2 + k, width_ratios=width_ratios)
        query_ax = band.add_subplot(grid[:, 0])
        _show_image(query_ax, query["query"], QUERY_COLOUR, thumb_size)
        label, families = _drawable(query.get("label", "query"))
        query_ax.set_xlabel(label, fontsize=7, family=families)
        rows = []
        for row, method in enumerate(query["methods"]):
            label_ax = band.add_subplot(grid[row, 1])
            label_ax.axis("off")
            text = method["name"]
            if method.get("ap") is not None:
                text += f"\nAP {100 * method['ap']:.1f} %"
            label_ax.text(1.0, 0.5, text, ha="right", va="center", fontsize=7, transform=label_ax.transAxes)
            relevant = method.get("relevant") or [None] * len(method["results"])
            if len(relevant) != len(method["results"]):
                raise ValueError(
                    f"{method['name']}: {len(relevant)} relevance flags for {len(method['results'])} results"
                )
            captions = method.get("captions") or [None] * len(method["results"])
            cells = []
            for rank, (path, flag, caption) in enumerate(zip(method["results"], relevant, captions), start=1):
                ax = band.add_subplot(grid[row, 1 + rank])
                cells.append(frame_colour(flag))
                _show_image(ax, path, cells[-1], thumb_size)
                if caption:
                    ax.set_xlabel(caption, fontsize=6)
                if not colours and row == 0:
                    ax.set_title(f"{rank}", fontsize=7)
            rows.append(cells)
        colours.append(rows)
    if title:
        text = title_band.text(0.5, 0.5, title, ha="center", va="center", fontsize=9)
        n_lines = _wrap_to(text, 0.95 * fig.bbox.width)
        ratios[0] += _LINE_HEIGHT * 9 / 72 * (n_lines - 1)
        fig.set_figheight(sum(ratios))
        band_grid.set_height_ratios(_points(ratios))
    for path in outputs:
        fig.savefig(str(path), dpi=dpi, metadata=_metadata(path))
    return colours


def _points(inches):
    return [round(72 * length) for length in inches]


def _wrapped_title(fig, title, fontsize):
    """``fig``'s title, broken into lines where it is wider than the figure (a figure of
    few columns would cut it), the figure made taller by the lines added."""
    n_lines = _wrap_to(fig.suptitle(title, fontsize=fontsize), 0.95 * fig.bbox.width)
    fig.set_figheight(fig.get_figheight() + _LINE_HEIGHT * fontsize / 72 * (n_lines - 1))


_LINE_HEIGHT = 1.2  # of a line of text, in font sizes


def _wrap_to(text, width):
    """Break the text artist ``text`` into lines of at most ``width`` pixels; return
    their number."""
    title = text.get_text()
    drawn = text.get_window_extent().width
    if drawn <= width:
        return 1
    lines = textwrap.wrap(title, max(10, int(len(title) * width / drawn)))
    text.set_text("\n".join(lines))
    return len(lines)
