"""The retrievals figure: its drawing (ndir.figures) and its stage (ndir.stages.report)."""

import warnings

import numpy as np
import pandas as pd
import pytest
from matplotlib.legend import Legend
from matplotlib.text import Text
from PIL import Image

from ndir.encoding import l2_normalise_rows
from ndir.evaluation import holidays_map, misses_near_duplicates, top_k
from ndir.figures import (
    FRAME_COLOURS,
    QUERY_COLOUR,
    _drawable,
    _figure,
    _wrapped_title,
    frame_colour,
    retrievals_figure,
    thumbnail,
)
from ndir.projection import PCAProjection, load_projector, save_projector
from ndir.stages import report

GREEN, RED, GREY = FRAME_COLOURS[True], FRAME_COLOURS[False], FRAME_COLOURS[None]


def rgb(colour):
    return np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])


def has_colour(png, colour, tolerance=12, at_least=50):
    """Whether at least ``at_least`` pixels of the image ``png`` are ``colour``."""
    pixels = np.asarray(Image.open(png).convert("RGB")).astype(int)
    return int((np.abs(pixels - rgb(colour)).max(axis=2) <= tolerance).sum()) >= at_least


@pytest.fixture
def photos(tmp_path):
    """Six small synthetic images of different shapes, in plain colours that are not
    frame colours (light, so frames stand out)."""
    paths = []
    for i, size in enumerate([(60, 40), (40, 60), (50, 50), (80, 30), (45, 70), (64, 48)]):
        path = tmp_path / f"photo{i}.png"
        Image.new("RGB", size, (230, 200 + 5 * i, 120 + 20 * i)).save(path)
        paths.append(str(path))
    return paths


def test_frame_colour_says_near_duplicate_or_not_or_unknown():
    assert frame_colour(True) == GREEN and frame_colour(np.True_) == GREEN
    assert frame_colour(False) == RED and frame_colour(np.False_) == RED
    assert frame_colour(None) == GREY
    assert len({GREEN, RED, GREY, QUERY_COLOUR}) == 4


def test_thumbnail_keeps_the_aspect_and_reads_nothing_else(photos, tmp_path):
    assert thumbnail(photos[3], size=40).shape == (15, 40, 3)
    assert thumbnail(photos[1], size=30).shape == (30, 20, 3)
    (tmp_path / "broken.jpg").write_bytes(b"not an image")
    assert thumbnail(tmp_path / "broken.jpg") is None
    assert thumbnail(tmp_path / "absent.jpg") is None


def test_retrievals_figure_frames_each_result_by_its_relevance(photos, tmp_path):
    queries = [
        {
            "query": photos[0],
            "label": "query 0",
            "methods": [
                {"name": "full", "results": photos[1:4], "relevant": [True, False, True], "ap": 0.83},
                {"name": "PCA", "results": photos[3:6], "relevant": [False, False, True], "ap": 0.25},
            ],
        },
        {
            "query": photos[5],
            "methods": [
                {"name": "full", "results": [photos[2], str(tmp_path / "absent.jpg")]},
                {"name": "PCA", "results": photos[:3], "relevant": [None, True, False]},
            ],
        },
    ]
    outputs = [tmp_path / "retrievals.png", tmp_path / "retrievals.pdf"]
    colours = retrievals_figure(queries, outputs, title="test")
    assert colours == [
        [[GREEN, RED, GREEN], [RED, RED, GREEN]],
        [[GREY, GREY], [GREY, GREEN, RED]],
    ]
    for path in outputs:
        assert path.stat().st_size > 5_000
    assert outputs[1].read_bytes().startswith(b"%PDF")
    for colour in (GREEN, RED, GREY, QUERY_COLOUR):
        assert has_colour(outputs[0], colour)
    # The same input gives the same bytes (no date in the files).
    again = [tmp_path / "again.png", tmp_path / "again.pdf"]
    retrievals_figure(queries, again, title="test")
    assert again[0].read_bytes() == outputs[0].read_bytes()
    assert again[1].read_bytes() == outputs[1].read_bytes()


@pytest.mark.parametrize("width", [2.0, 4.0, 12.0])
def test_a_title_wider_than_its_figure_is_broken_into_lines_that_fit(width):
    title = "Queries (blue) and their top 1; green: near duplicate, red: not, grey: no group; AP over the whole index"
    fig = _figure(figsize=(width, 3.0))
    _wrapped_title(fig, title, fontsize=9)
    text = fig._suptitle
    assert text.get_window_extent().width <= fig.bbox.width
    assert text.get_text().split() == title.split()
    n_lines = text.get_text().count("\n") + 1
    # A title that fits keeps its line and the figure its height.
    assert (n_lines == 1) == (width == 12.0)
    assert fig.get_figheight() == pytest.approx(3.0 + 1.2 * 9 / 72 * (n_lines - 1))


TITLE = "Queries (blue) and their top 3; green: near duplicate, red: not, grey: no group; AP over the whole index"


def drawn_figure(monkeypatch):
    """Keep the Figure that the next ndir.figures call draws, to measure its artists."""
    drawn = []

    def keep(**kwargs):
        drawn.append(_figure(**kwargs))
        return drawn[-1]

    monkeypatch.setattr("ndir.figures._figure", keep)
    return drawn


@pytest.mark.parametrize("k", [1, 3, 5])
def test_a_long_title_stays_above_the_column_numbers(photos, tmp_path, monkeypatch, k):
    drawn = drawn_figure(monkeypatch)
    queries = [{"query": photos[0], "methods": [{"name": "sparse", "results": photos[1 : 1 + k]}]}]
    retrievals_figure(queries, [tmp_path / "x.png"], title=TITLE)
    fig = drawn[0]
    (title,) = [text for text in fig.subfigs[0].texts if text.get_text().split() == TITLE.split()]
    numbers = [ax.title for ax in fig.subfigs[1].axes if ax.get_title()]
    assert [number.get_text() for number in numbers] == [str(rank) for rank in range(1, k + 1)]
    bottom = title.get_window_extent().y0
    assert all(number.get_window_extent().y1 <= bottom for number in numbers)
    assert title.get_window_extent().width <= fig.bbox.width


def test_file_names_no_font_draws_are_question_marks_and_one_warning(photos, tmp_path, caplog, monkeypatch):
    drawn = drawn_figure(monkeypatch)
    queries = [{"query": photos[0], "label": "東京タワー.jpg", "methods": [{"name": "m", "results": photos[1:3]}]}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns once per missing glyph
        retrievals_figure(queries, [tmp_path / "x.png", tmp_path / "x.pdf"])
    label = drawn[0].subfigs[0].axes[0].get_xlabel()
    if label == "東京タワー.jpg":
        pytest.skip("an installed font draws CJK here")
    assert label == "?????.jpg"
    assert "install a font that has them (fonts-noto-cjk" in caplog.text and "東京タワー.jpg" in caplog.text


def test_characters_the_default_font_lacks_are_drawn_with_an_installed_font_that_has_them():
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    default = font_manager.findfont(font_manager.FontProperties())
    has = set(FT2Font(default).get_charmap())
    for font in sorted(font_manager.fontManager.ttflist, key=lambda font: font.name):
        extra = [c for c in map(chr, FT2Font(font.fname).get_charmap()) if ord(c) not in has and c.isprintable()]
        if extra and "Last Resort" not in font.name:
            break
    else:
        pytest.skip("no installed font has a character the default font lacks")
    text, families = _drawable(f"photo {extra[0]}.jpg")
    assert text == f"photo {extra[0]}.jpg"
    assert families[0] == font_manager.FontProperties(fname=default).get_name() and len(families) == 2
    assert ord(extra[0]) in FT2Font(font_manager.findfont(families[1])).get_charmap()
    assert _drawable("photo.jpg")[1] == families[:1]


def test_retrievals_figure_without_labels_draws_no_green_or_red(photos, tmp_path):
    out = tmp_path / "plain.png"
    queries = [{"query": photos[0], "methods": [{"name": "sparse", "results": photos[1:], "captions": ["0.9"] * 5}]}]
    assert retrievals_figure(queries, [out]) == [[[GREY] * 5]]
    assert has_colour(out, GREY) and not has_colour(out, GREEN) and not has_colour(out, RED)


def test_retrievals_figure_rejects_mismatched_flags(photos, tmp_path):
    bad = [{"query": photos[0], "methods": [{"name": "m", "results": photos[1:3], "relevant": [True]}]}]
    with pytest.raises(ValueError, match="1 relevance flags for 2 results"):
        retrievals_figure(bad, [tmp_path / "x.png"])
    with pytest.raises(ValueError, match="no query"):
        retrievals_figure([], [tmp_path / "x.png"])


# --------------------------------------------------------------------------- the stage


def test_pick_queries_is_seeded_sorted_and_takes_a_failure():
    failed = np.zeros(40, dtype=bool)
    failed[[7, 31]] = True
    for seed in range(20):
        chosen = report.pick_queries(failed, 5, seed)
        assert chosen == report.pick_queries(failed, 5, seed)
        assert chosen == sorted(set(chosen)) and len(chosen) == 5
        assert {7, 31} & set(chosen)
    assert len({tuple(report.pick_queries(failed, 5, seed)) for seed in range(20)}) > 1
    assert report.pick_queries(np.zeros(3, dtype=bool), 5, 0) == [0, 1, 2]
    assert len(report.pick_queries(np.zeros(10, dtype=bool), 4, 0)) == 4
    assert report.pick_queries(np.ones(10, dtype=bool), 0, 0) == []


def test_rankings_are_the_head_of_the_list_the_ap_is_computed_on():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(6), 3)
    is_query = np.tile([True, False, False], 6)
    Y = rng.normal(size=(18, 4)).astype(np.float32)
    query_rows = np.flatnonzero(is_query)
    top, ap = top_k(Y, query_rows, groups, k=5)
    assert top.shape == (6, 5)
    np.testing.assert_allclose(ap, holidays_map(Y, groups, is_query, return_per_query=True)[1])
    for q, row in enumerate(query_rows):
        scores = Y @ Y[row]
        scores[row] = -np.inf
        np.testing.assert_array_equal(top[q], np.argsort(-scores, kind="stable")[:5])
    # Query 0 (group 0) finds 1 of its 2 near duplicates in its top 5: it misses one;
    # query 3 (group 1) finds both.
    top = np.array([[4, 1, 5, 6, 7], [4, 5, 0, 6, 7]])
    groups = np.array([0, 0, 0, 1, 1, 1, 2, 2])
    assert misses_near_duplicates(top, [0, 3], groups).tolist() == [True, False]
    assert misses_near_duplicates(top[:, :1], [0, 3], groups).tolist() == [True, False]


def workflow_like_run(tmp_path, n_groups=12):
    """An image table (one small image file each), signatures and a sparse projector
    as the workflow writes them: groups of 3 images, the first the query,
    alternately train and test. Groups 0 and 2 are noise: their queries miss near
    duplicates."""
    rng = np.random.default_rng(1)
    D, R = 24, 4
    rows, X = [], []
    centres = rng.normal(size=(n_groups, D))
    for g in range(n_groups):
        for i in range(3):
            path = tmp_path / f"{100000 + 100 * g + i}.png"
            Image.new("RGB", (40 + 7 * i, 40), (200, 10 * g, 60 * i)).save(path)
            rows.append(
                {
                    "image_id": path.stem,
                    "path": str(path),
                    "group": 1000 + g,
                    "is_query": i == 0,
                    "split": "train" if g % 2 else "test",
                }
            )
            X.append(rng.normal(size=D) if g in (0, 2) else centres[g] + 0.2 * rng.normal(size=D))
    X = np.asarray(X, dtype=np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    images = tmp_path / "images.csv"
    pd.DataFrame(rows).to_csv(images, index=False)
    signatures = tmp_path / "fv-4.npy"
    np.save(signatures, X)
    U = np.zeros((D, R), dtype=np.float32)
    U[rng.choice(D, size=R, replace=False), np.arange(R)] = 1.0
    projector = tmp_path / "R4-tau0.99.npz"
    save_projector(projector, U, signature="fv-4", n_features=D, n_components=R, sparsity=0.99)
    return images, signatures, projector


def test_stage_draws_chosen_queries_under_three_methods_a_failure_among_them(tmp_path, monkeypatch):
    images, signatures, projector = workflow_like_run(tmp_path)
    drawn = []

    def draw(blocks, outputs, title=None):
        drawn.append(blocks)
        if len(drawn) == 1:  # later calls only check the choice of queries
            return retrievals_figure(blocks, outputs, title=title)

    monkeypatch.setattr("ndir.figures.retrievals_figure", draw)
    figures = [tmp_path / "out" / "retrievals.png", tmp_path / "out" / "retrievals.pdf"]
    (tmp_path / "out").mkdir()
    report.retrievals_figure(images, signatures, projector, figures, "fv-4", n_queries=3, k=5, seed=0)
    assert all(path.stat().st_size > 5_000 for path in figures)
    table = pd.read_csv(images, dtype={"image_id": str})
    test = table[table["split"] == "test"]
    group_of = dict(zip(test["path"], test["group"]))
    query_of = {row.path: row.group for row in test[test["is_query"]].itertuples()}
    blocks = drawn[0]
    assert len(blocks) == 3
    # Groups of 3 test images: each query has 2 near duplicates.
    assert all(block["label"].endswith("\n2 near duplicates") for block in blocks)
    # Each method's AP of a query is its per-query Holidays AP (holidays_map) under
    # that method's test signatures: full, PCA fitted on the training split, and the
    # projector's (a selection of 4 coordinates here), reduced ones L2-normalised.
    X = np.load(signatures)
    train_rows, test_rows = (table["split"] == "train").to_numpy(), (table["split"] == "test").to_numpy()
    U = load_projector(projector)[0].toarray()
    X_test, test_groups, test_queries = X[test_rows], test["group"].to_numpy(), test["is_query"].to_numpy()
    pca = PCAProjection(n_components=4).fit(X[train_rows])
    expected_ap = {
        name: holidays_map(Y, test_groups, test_queries, return_per_query=True)[1]
        for name, Y in (("full", X_test), ("PCA", pca.transform(X_test)), ("sparse", l2_normalise_rows(X_test @ U)))
    }
    query_paths = test.loc[test["is_query"], "path"].tolist()
    assert [m["name"].split("\n")[0] for m in blocks[0]["methods"]] == ["FV-4", "PCA", "sparse rank"]
    assert [b["query"] for b in blocks] == [
        p for p in test["path"] if p in query_of and p in {b["query"] for b in blocks}
    ]
    failures = 0
    for block in blocks:
        group = query_of[block["query"]]
        q = query_paths.index(block["query"])
        for method, name in zip(block["methods"], ("full", "PCA", "sparse")):
            assert len(method["results"]) == 5 and block["query"] not in method["results"]
            assert method["relevant"] == [group_of[p] == group for p in method["results"]]
            assert method["ap"] == pytest.approx(expected_ap[name][q], abs=1e-6)
            failures += sum(method["relevant"]) < 2  # 2 near duplicates, room for 5
    assert failures > 0
    # Same seed, same queries; another seed may pick others but still a failure.
    report.retrievals_figure(images, signatures, projector, figures, "fv-4", n_queries=3, k=5, seed=0)
    assert [b["query"] for b in drawn[1]] == [b["query"] for b in blocks]
    for seed in range(1, 4):
        report.retrievals_figure(images, signatures, projector, figures, "fv-4", n_queries=2, k=5, seed=seed)
        assert any(sum(m["relevant"]) < 2 for b in drawn[-1] for m in b["methods"])
    # A k beyond the test split lists every other test image.
    report.retrievals_figure(images, signatures, projector, figures, "fv-4", n_queries=1, k=1000, seed=0)
    assert all(len(m["results"]) == len(test) - 1 for m in drawn[-1][0]["methods"])


def test_stage_refuses_a_projector_of_another_signature(tmp_path):
    images, signatures, projector = workflow_like_run(tmp_path)
    other = tmp_path / "other.npz"
    save_projector(other, np.eye(24, 4, dtype=np.float32), signature="vlad-4", sparsity=0.9)
    with pytest.raises(report.ResultFileError, match="projector for vlad-4, not fv-4"):
        report.retrievals_figure(
            images, signatures, other, [tmp_path / "x.png", tmp_path / "x.pdf"], "fv-4", n_queries=2, k=3, seed=0
        )


def test_a_convergence_curve_that_stops_early_says_when_and_why():
    import pandas as pd

    from ndir.figures import _label
    from ndir.projection.sparse_rank import STOP_MAX_ITER, STOP_STALLED

    stalled = pd.DataFrame({"iteration": np.arange(96), "stopped_by": STOP_STALLED})
    assert _label(("fv-64", 32, 0.0, stalled), "R") == f"R = 32: stopped at step 95, {STOP_STALLED}"
    full = pd.DataFrame({"iteration": np.arange(201), "stopped_by": STOP_MAX_ITER})
    assert _label(("fv-64", 64, 0.99, full), "tau") == "τ = 99 %"


# --------------------------------------------------------------------------- the frontier


def frontier_records():
    """Rows of a seeds comparison: every kind of method, three inputs, two of them on both fronts."""
    rows = [
        ("PCA R=32", "fv-256"), ("whitened PCA R=32", "fv-256"), ("thresholded PCA R=32 τ=0.9", "fv-256"),
        ("thresholded PCA R=32 τ=0.99", "vlad-256"), ("sparse rank R=32 τ=0.9", "fv-256"),
        ("sparse rank R=32 τ=0.99", "vlad-256"), ("sparse rank R=64 τ=0.99", "fv-256"),
        ("random sparse R=32 τ=0.9", "fv-256"), ("Gaussian RP R=32", "vlad-256"), ("PQ 8 B (PCA-16)", "fv-256"),
        ("SOML-DA", "tfidf"), ("SOML-TG", "tfidf"), ("tf-idf", "tfidf"), ("sparse similarity matrix", "tfidf"),
        ("second-order pooling", "local-pca-80"), ("JCF-64 (K=64)", "local-fv-64"),
        ("factorised R=64 (K=1)", "local-pca-80"),
    ]  # fmt: skip
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "method": [m for m, _ in rows],
            "signature": [s for _, s in rows],
            "madds_per_query": 10 ** rng.uniform(4, 8, len(rows)),
            "db_bytes_per_image": 10 ** rng.uniform(1, 5, len(rows)),
            "test_map": rng.uniform(0.5, 0.97, len(rows)),
        }
    )


def test_frontier_colours_are_method_families_and_markers_inputs():
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    from ndir.figures import frontier_styles

    records = frontier_records()
    styles = frontier_styles(records)
    by_family = styles.groupby("family")["colour"].nunique()
    assert (by_family == 1).all() and styles.drop_duplicates("family")["colour"].is_unique
    by_input = styles.groupby("input")["marker"].nunique()
    assert (by_input == 1).all() and styles.drop_duplicates("input")["marker"].is_unique
    assert set(styles["input"]) == {"FV-256", "VLAD-256", "tf-idf", "local (PCA-80)", "local (FV-64)"}
    # A kind of method is one hue: its two tau are two shades of the learned projectors' red.
    reds = {to_hex(colormaps["tab20b"](i)) for i in range(12, 16)}
    colour = dict(zip(styles["family"], styles["colour"]))
    assert {colour["sparse rank τ=0.9"], colour["sparse rank τ=0.99"]} <= reds
    assert colour["sparse rank τ=0.9"] != colour["sparse rank τ=0.99"]
    assert not {colour["PCA"], colour["thresholded PCA τ=0.9"]} & reds


def test_frontier_figure_keeps_its_legends_inside_and_labels_its_fronts(tmp_path, monkeypatch):
    from ndir import comparison, figures
    from ndir.report import method_family

    records = frontier_records()
    costs = {"madds_per_query": "multiply-adds per query", "db_bytes_per_image": "bytes per database image"}
    fronts = {cost: comparison.pareto_front(records[cost], records["test_map"]) for cost in costs}
    drawn = []
    save = figures._save
    monkeypatch.setattr(figures, "_save", lambda fig, stem: (drawn.append(fig), save(fig, stem)))
    figures.frontier_figure(records, fronts, {cost: "a sentence" for cost in costs}, costs, tmp_path / "frontier")
    assert (tmp_path / "frontier.png").stat().st_size > 10_000 and (tmp_path / "frontier.pdf").exists()
    (fig,) = drawn
    fig.draw_without_rendering()
    whole = fig.bbox
    panels = [ax for ax in fig.axes if ax.get_title()]
    legends = [legend for ax in fig.axes for legend in ax.get_children() if isinstance(legend, Legend)]
    assert len(panels) == 2 and len(legends) == 2
    for legend in legends:
        box = legend.get_window_extent()
        assert whole.x0 <= box.x0 and box.x1 <= whole.x1 and whole.y0 <= box.y0 and box.y1 <= whole.y1
        assert not any(box.overlaps(ax.title.get_window_extent()) for ax in panels)
        assert not any(box.overlaps(ax.get_window_extent()) for ax in panels)
    entries = sum(len(legend.get_texts()) for legend in legends)
    assert entries == records["method"].map(method_family).nunique() + records["signature"].nunique()
    for ax, cost in zip(panels, costs):
        # The same data: every row a point; the front's points labelled, inside the panel, apart.
        assert sum(len(c.get_offsets()) for c in ax.collections[:-1]) == len(records)
        labels = [t for t in ax.texts if t.get_text()]
        front = records[fronts[cost]]
        assert sorted(t.get_text().split(" (")[0] for t in labels) == sorted(front["method"])
        boxes = [Text.get_window_extent(t) for t in labels]
        inside = ax.get_window_extent()
        assert all(inside.x0 <= b.x0 and b.x1 <= inside.x1 and inside.y0 <= b.y0 and b.y1 <= inside.y1 for b in boxes)
        assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
