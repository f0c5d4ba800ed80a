"""The retrieval browser (ndir.browse, ndir.browse_page, ndir.stages.browse): the data the
page reads, and the page itself in headless Chromium (tests/browsers.py), on made-up
data, at Holidays scale and on the tiny run."""

import json
import re

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from ndir import browse
from ndir.browse_page import page_html
from ndir.evaluation import map_from_scores

from .browsers import Opened, chromium

# --------------------------------------------------------------------------- made-up data


def made_up(folder, n_images=24, n_groups=8, n_methods=3, k=5, seed=0, frontier=False):
    """A page of ``n_methods`` random rankings of ``n_images`` images in ``n_groups``
    groups (the first image of each its query), written into ``folder``; returns the
    data and each method's (n_queries, n_images) scores."""
    rng = np.random.default_rng(seed)
    groups = np.sort(np.r_[np.arange(n_groups), rng.integers(0, n_groups, n_images - n_groups)])
    firsts = np.r_[0, np.flatnonzero(np.diff(groups)) + 1]
    query_rows = np.array([q for q in firsts if np.count_nonzero(groups == groups[q]) > 1])
    scores, methods = {}, []
    for m in range(n_methods):
        S = rng.normal(size=(query_rows.size, n_images)).round(1)  # rounded: ties
        S += 1.5 * (groups[None, :] == groups[query_rows][:, None]) * rng.random((query_rows.size, 1))
        key = f"method-{m}"
        scores[key] = S
        ap = map_from_scores(S, query_rows, groups, return_per_query=True)[1]
        methods.append(
            browse.method_from_scores(
                key, f"Method {m}", f"Group {m // 2}", S, query_rows, groups, k, ap, family=f"family {m % 2}",
                input="made-up", R=8 * (m + 1), tau=0.9 if m % 2 else None,
                record=(f"method {m}", "made-up") if frontier else None,
            )
        )  # fmt: skip
    sources = []
    for i in range(n_images):
        path = folder.parent / f"{folder.name}-source-{i}.png"
        if not path.exists():
            colour = tuple(int(c) for c in rng.integers(0, 255, 3))
            Image.new("RGB", (300 + 7 * (i % 5), 200), colour).save(path)
        sources.append(path)
    names = [f"image {i:04d}.png" for i in range(n_images)]
    points = None
    if frontier:
        records = pd.DataFrame(
            {
                "method": [f"method {m}" for m in range(n_methods)] + ["other"],
                "signature": ["made-up"] * (n_methods + 1),
                "madds_per_query": [10.0 ** (2 + m) for m in range(n_methods + 1)],
                "db_bytes_per_image": [8.0 * (m + 1) for m in range(n_methods + 1)],
                "test_map": [m.map / 100 for m in methods] + [0.5],
            }
        )
        styles = pd.DataFrame(
            {"family": "made-up", "input": "made-up", "colour": "#1f77b4", "marker": "o"}, index=records.index
        )
        costs = {"madds_per_query": "multiply-adds per query", "db_bytes_per_image": "bytes per database image"}
        fronts = {cost: np.ones(len(records), dtype=bool) for cost in costs}
        points = browse.frontier_points(records, fronts, costs, styles, methods)
    data = browse.page_data(
        "made-up page", names, browse.thumbnail_names(n_images), query_rows, methods, k=k, groups=groups.tolist(),
        subtitle="made up", notes=["a note"], frontier=points,
    )  # fmt: skip
    browse.write_browser(folder, data, sources)
    return data, scores, query_rows, groups


# --------------------------------------------------------------------------- rankings


def test_a_ranking_leaves_the_query_out_and_puts_negatives_first_on_ties():
    # Images 0-1 in group 0 (query 0), 2-4 in group 1 (query 2).
    groups = np.array([0, 0, 1, 1, 1])
    scores = np.array(
        [
            [9.0, 0.5, 0.5, 0.2, 0.9],  # query 0: its match (1) ties image 2: 2 goes first
            [0.3, 0.3, 9.0, 0.3, 0.1],  # query 2: a negative and two matches tie
        ]
    )
    top, matches, images, ap = browse.rankings(scores, [0, 2], groups, k=3)
    assert top.tolist() == [[4, 2, 1], [0, 1, 3]]
    assert [m.tolist() for m in matches] == [[2], [2, 3]]
    assert [i.tolist() for i in images] == [[1], [3, 4]]
    assert np.allclose(ap, map_from_scores(scores, [0, 2], groups, return_per_query=True)[1], atol=1e-12)
    assert ap[0] == pytest.approx((0 + 1 / 3) / 2)  # trapezoid: precision 0 before rank 3, 1/3 after


@pytest.mark.parametrize("seed", range(5))
def test_the_ranks_give_the_evaluations_aps_and_the_top_is_their_head(seed):
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, 6, 40)
    query_rows = np.array([np.flatnonzero(groups == g)[0] for g in np.unique(groups) if (groups == g).sum() > 1])
    scores = rng.integers(0, 5, (query_rows.size, 40)).astype(float)  # many ties
    top, matches, images, ap = browse.rankings(scores, query_rows, groups, k=7)
    assert np.allclose(ap, map_from_scores(scores, query_rows, groups, return_per_query=True)[1], rtol=0, atol=1e-12)
    for q, row in enumerate(query_rows):
        assert row not in top[q] and row not in images[q]
        assert sorted(images[q].tolist()) == sorted(set(np.flatnonzero(groups == groups[row])) - {row})
        shown = [r for r, image in enumerate(top[q]) if groups[image] == groups[row]]
        assert shown == [r for r in matches[q] if r < 7]
        assert np.all(np.diff(scores[q][top[q]]) <= 0)


def test_a_method_refuses_aps_that_are_not_its_ranks():
    groups = np.array([0, 0, 1, 1])
    scores = np.array([[9.0, 1.0, 2.0, 0.0], [0.0, 0.0, 9.0, 1.0]])
    with pytest.raises(ValueError, match="differ from the evaluation"):
        browse.method_from_scores("m", "M", "G", scores, [0, 2], groups, 2, ap=[1.0, 1.0])
    method = browse.method_from_scores("m", "M", "G", scores, [0, 2], groups, 2)
    assert method.map == pytest.approx(100 * np.mean([(0 + 1 / 2) / 2, 1.0]))  # its match second, first


def test_page_data_refuses_repeated_keys_uneven_rankings_and_unknown_pairs():
    one = browse.Method("a", "A", "G", np.zeros((2, 3), dtype=int))
    two = browse.Method("b", "B", "G", np.zeros((2, 3), dtype=int))
    common = dict(title="t", names=["x", "y"], thumbs=["thumbs/0.jpg", "thumbs/1.jpg"], queries=[0, 1])
    with pytest.raises(ValueError, match="repeat"):
        browse.page_data(methods=[one, one], **common)
    with pytest.raises(ValueError, match="1 rankings for 2 queries"):
        browse.page_data(methods=[browse.Method("c", "C", "G", np.zeros((1, 3), dtype=int))], **common)
    with pytest.raises(ValueError, match="not two of the methods"):
        browse.page_data(methods=[one, two], compare=["a", "z"], **common)
    assert browse.page_data(methods=[one, two], **common)["compare"] == ["a", "b"]
    assert browse.page_data(methods=[one], **common)["compare"] == ["a", "a"]


def test_a_map_is_printed_as_the_tables_print_it():
    # 97.125 is exact in binary: the tables' np.round gives 97.12 where toFixed(2) gives 97.13.
    assert [browse.map_text(v) for v in (97.125, 97.375, 0.004, 95.66, None)] == [
        "97.12", "97.38", "0.00", "95.66", None
    ]  # fmt: skip
    assert browse.Method("a", "A", "G", [[0]], map=97.125).as_json()["map_text"] == "97.12"


def test_the_data_file_assigns_one_global_and_reads_back(tmp_path):
    data, *_ = made_up(tmp_path / "page")
    text = (tmp_path / "page" / browse.DATA_FILE).read_text()
    assert text.startswith("window.NDIR_BROWSE = {") and text.endswith("};\n") and text.count("\n") == 1
    assert text.isascii()
    assert browse.read_data(tmp_path / "page") == json.loads(json.dumps(data))
    # Rankings, not scores: k indices per query and method, every true match's rank.
    method = data["methods"][0]
    assert np.shape(method["top"]) == (len(data["queries"]), data["k"])
    assert all(len(r) == len(i) for r, i in zip(method["matches"], method["match_images"]))


def test_one_small_jpeg_per_image_and_a_page_that_loads_nothing_from_elsewhere(tmp_path):
    data, *_ = made_up(tmp_path / "page", n_images=12, n_groups=4)
    thumbs = sorted((tmp_path / "page" / browse.THUMBS_FOLDER).iterdir())
    assert len(thumbs) == 12
    for path in thumbs:
        with Image.open(path) as image:
            assert image.format == "JPEG" and max(image.size) == browse.THUMB_SIZE
    html = (tmp_path / "page" / "index.html").read_text()
    assert html == page_html()
    # No font, script, style or image from a network: every src and href is local.
    assert not re.search(r"(https?:)?//[a-z0-9]", html, re.IGNORECASE), re.findall(r"\S*//\S*", html)
    assert re.findall(r'<script src="([^"]+)"', html) == [browse.DATA_FILE]
    assert "@import" not in html and "@font-face" not in html


def test_frontier_points_open_the_methods_of_their_records(tmp_path):
    data, *_ = made_up(tmp_path / "page", frontier=True)
    points = data["frontier"]["points"]
    assert [p["browse"] for p in points] == ["method-0", "method-1", "method-2", None]
    assert [p["map"] for p in points[:3]] == pytest.approx([m["map"] for m in data["methods"]])
    assert [c["column"] for c in data["frontier"]["costs"]] == ["madds_per_query", "db_bytes_per_image"]


# --------------------------------------------------------------------------- the page in Chromium


@pytest.fixture(scope="module")
def browser():
    with chromium() as opened:
        yield opened


def shown_tops(opened, list_id="queries"):
    """The image names of each row's top k, in the page's order, and the rows' queries."""
    return opened.page.evaluate(
        """(id) => Array.from(document.querySelectorAll('#' + id + ' > li')).map(li => ({
            query: Number(li.dataset.query),
            names: Array.from(li.querySelector('ol.strip').querySelectorAll(':scope > li:not(.beyond) .name'))
                .map(n => n.textContent),
            marks: Array.from(li.querySelector('ol.strip').querySelectorAll(':scope > li:not(.beyond)'))
                .map(hit => hit.className + ' ' + hit.querySelector('img').alt),
            alts: Array.from(li.querySelectorAll('img')).map(i => i.alt)}))""",
        list_id,
    )


def test_the_page_shows_every_query_switches_method_and_compares(browser, tmp_path):
    data, scores, query_rows, groups = made_up(tmp_path / "page", n_methods=4, frontier=True)
    names = data["images"]["names"]
    opened = Opened(browser, tmp_path / "page")
    try:
        opened.page.wait_for_load_state("load")
        rows = shown_tops(opened)
        first = data["methods"][0]
        assert [row["query"] for row in rows] == list(range(len(query_rows)))
        assert [row["names"] for row in rows] == [[names[i] for i in top] for top in first["top"]]
        # Alt text names the file: the query's and each result's.
        assert all(names[query_rows[row["query"]]] in row["alts"][0] for row in rows)
        assert all(name in alt for row in rows for name, alt in zip(row["names"], row["alts"][1:]))
        # True matches framed (green) and said so, the others too (red).
        for row, ranks in zip(rows, first["matches"]):
            assert [mark.split()[0] for mark in row["marks"]] == ["match" if r in ranks else "miss" for r in range(5)]
            assert all(
                mark.endswith(", true match" if r in ranks else ", not a match") for r, mark in enumerate(row["marks"])
            )
        # The rank of every true match is written, those beyond the top k included.
        text = opened.page.inner_text("#queries")
        for q, ranks in enumerate(first["matches"]):
            assert f"at rank{'s' if len(ranks) > 1 else ''} {', '.join(str(r + 1) for r in ranks)}" in text
            assert opened.page.locator(f'#queries li[data-query="{q}"] li.beyond').count() == sum(
                r >= data["k"] for r in ranks
            )
        # The menu switches method.
        opened.page.select_option("#method", "method-2")
        assert opened.state().startswith("queries|method-2|")
        assert [row["names"] for row in shown_tops(opened)] == [
            [names[i] for i in top] for top in data["methods"][2]["top"]
        ]
        # Compare: the queries by AP(A) - AP(B), largest first (ties: query order).
        opened.page.click("#tab-compare")
        opened.page.select_option("#compare-a", "method-1")
        opened.page.select_option("#compare-b", "method-3")
        ap = {m["key"]: np.array(m["ap"]) for m in data["methods"]}
        difference = ap["method-1"] - ap["method-3"]
        expected = sorted(range(len(query_rows)), key=lambda q: (-difference[q], q))
        assert [row["query"] for row in shown_tops(opened, "compare-list")] == expected
        opened.page.click("#swap")
        assert [row["query"] for row in shown_tops(opened, "compare-list")] == sorted(
            range(len(query_rows)), key=lambda q: (difference[q], q)
        )
        # The summary prints each mAP as the tables do.
        opened.page.click("#tab-summary")
        maps = opened.page.eval_on_selector_all("#summary-rows td.map", "tds => tds.map(t => t.textContent)")
        assert maps == [browse.map_text(m["map"]) for m in data["methods"]]
        # The frontier: a point opens its method's retrievals; a point of another is no link.
        opened.page.click("#tab-frontier")
        assert opened.page.locator("#frontier a[data-browse]").count() == 2 * 4
        opened.page.locator('#frontier a[data-browse="method-1"]').first.click()
        assert opened.state().startswith("queries|method-1|")
        assert opened.page.is_visible("#view-queries") and not opened.page.is_visible("#view-frontier")
        assert opened.errors == [] and opened.not_files() == []
    finally:
        opened.close()


def test_the_page_is_driven_from_the_keyboard(browser, tmp_path):
    data, *_ = made_up(tmp_path / "page", n_methods=3)
    opened = Opened(browser, tmp_path / "page")
    try:
        page = opened.page
        page.keyboard.press("j")
        assert page.evaluate("document.activeElement.dataset.query") == "0"
        page.keyboard.press("j")
        page.keyboard.press("j")
        page.keyboard.press("k")
        assert page.evaluate("document.activeElement.dataset.query") == "1"
        page.keyboard.press("]")
        assert opened.state().startswith("queries|method-1|")
        page.keyboard.press("[")
        assert opened.state().startswith("queries|method-0|")
        page.focus("#tab-queries")
        page.keyboard.press("ArrowRight")
        assert opened.state().startswith("compare|")
        assert page.evaluate("document.activeElement.id") == "tab-compare"
        page.keyboard.press("End")
        assert opened.state().startswith("summary|")  # no frontier: its tab is hidden
        # Every method's retrievals are a link away (Tab, then Enter).
        link = page.locator("#summary-rows a").nth(2)
        link.focus()
        page.keyboard.press("Enter")
        page.wait_for_function("document.body.dataset.state.startsWith('queries|method-2|')")
        assert opened.errors == []
    finally:
        opened.close()


def test_a_copy_of_the_page_without_its_data_says_where_to_open_it(browser, tmp_path):
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / "index.html").write_text(page_html())
    opened = Opened(browser, tmp_path / "alone")
    try:
        assert opened.page.is_visible("#no-data")
        assert "data.js" in opened.page.inner_text("#no-data") and not opened.page.is_visible("#views")
        assert [e for e in opened.errors if "data.js" not in e and "ERR_FILE_NOT_FOUND" not in e] == []
    finally:
        opened.close()


def holidays_scale(folder):
    """A Holidays-scale page: the 745 images of Holidays' test split in 250 groups (224
    queries: the groups of more than one image) and the paper's grid (8 signatures x 21
    methods: full, 4 PCA, 8 learned, 8 thresholded), 168 methods."""
    return made_up(folder, n_images=745, n_groups=250, n_methods=168, k=browse.TOP_K, seed=1)


def test_a_holidays_scale_page_opens_and_switches_method(browser, tmp_path):
    # How fast it opens and switches is measured by benchmarks/bench_browse.py, not here.
    data, *_ = holidays_scale(tmp_path / "page")
    assert len(data["queries"]) >= 200 and len(data["methods"]) == 168
    megabytes = (tmp_path / "page" / browse.DATA_FILE).stat().st_size / 1e6
    assert megabytes < 10, megabytes
    opened = Opened(browser, tmp_path / "page")
    try:
        for key in ("method-100", "method-7", "method-167"):
            opened.page.select_option("#method", key)
            opened.page.wait_for_function(f"document.getElementById('queries').dataset.method === '{key}'")
            assert len(shown_tops(opened)) == len(data["queries"])
            assert opened.state().split("|")[1] == key
        assert opened.errors == []
    finally:
        opened.close()


# --------------------------------------------------------------------------- the tiny run's browser


#: The tiny config's signatures, Table I's R and Table II's (R, tau).
TINY_SIGNATURES = [f"{encoding}-{K}" for encoding in ("vlad", "fv") for K in (4, 8)]
TINY_DIMS = (8, 16)
TINY_GRID = [(R, tau) for R in TINY_DIMS for tau in (0.9, 0.99)]


def independent_aps(run_dir):
    """The per-query APs of the tiny run's methods as the readings recompute them from
    the run's files (by :func:`ndir.evaluation.holidays_map`, not through the browser's
    rankings): {browser key: AP}."""
    from ndir import names
    from ndir import readings as findings
    from ndir.stages import readings

    results = run_dir / "results"
    stems = [run_dir / names.sparse_run(s, R, tau) for s in TINY_SIGNATURES for R, tau in TINY_GRID]
    run = findings.Run(table1_dims=TINY_DIMS)
    readings.projector_aps(
        results / "data/images.csv", [results / f"signatures/{s}.npy" for s in TINY_SIGNATURES], TINY_SIGNATURES,
        [f"{stem}.npz" for stem in stems], [f"{stem}.csv" for stem in stems], TINY_DIMS, True, run, readings.Checks(),
    )  # fmt: skip
    aps = {f"{name}/full": ap for name, ap in run.full.items()}
    aps |= {f"{name}/pca-R{R}": ap for (name, R), ap in run.pca.items()}
    aps |= {f"{name}/sparse-R{R}-tau{tau:g}": ap for (name, tau, R), ap in run.learned.items()}
    aps |= {f"{name}/thresholded-R{R}-tau{tau:g}": ap for (name, tau, R), ap in run.start.items()}
    return aps


@pytest.mark.workflow
def test_the_tiny_runs_browser_ranks_every_method_as_the_tables(tiny_run):
    folder = tiny_run / "results/browse"
    data = browse.read_data(folder)
    table = pd.read_csv(tiny_run / "results/data/images.csv", dtype={"image_id": str})
    test = table[table["split"] == "test"]
    assert len(data["images"]["names"]) == len(test) == len(list((folder / "thumbs").glob("*.jpg")))
    assert len(data["queries"]) == int(test["is_query"].sum())
    keys = {m["key"] for m in data["methods"]}
    assert {f"{s}/full" for s in TINY_SIGNATURES} <= keys
    assert {f"{s}/pca-R{R}" for s in TINY_SIGNATURES for R in TINY_DIMS} <= keys
    kinds = ("sparse", "thresholded")
    assert {f"{s}/{kind}-R{R}-tau{tau:g}" for s in TINY_SIGNATURES for R, tau in TINY_GRID for kind in kinds} <= keys
    assert {"seeds/tf-idf", "seeds/similarity-matrix", "seeds/soml-tg", "seeds/soml-da", "jcf/pooling-K1"} <= keys
    assert {"jcf/K8-R4", "jcf/K8-R4-k2", "jcf/K1-R4", "jcf/pooling-K8"} <= keys
    by_key = {m["key"]: m for m in data["methods"]}
    aps = independent_aps(tiny_run)
    assert len(aps) == 4 * (1 + 2 + 2 * 4)
    for key, ap in aps.items():
        assert np.allclose(by_key[key]["ap"], ap, rtol=0, atol=1e-12), key
    assert "in 54 of 54 cells" in " ".join(data["notes"])
    assert browse.folder_bytes(folder) < 30e6


@pytest.fixture(scope="module")
def tiny_page(tiny_run, browser):
    opened = Opened(browser, tiny_run / "results/browse")
    opened.page.wait_for_load_state("load")
    yield opened
    opened.close()


@pytest.mark.workflow
def test_the_tiny_runs_page_compares_as_the_independent_aps_and_sums_up_as_table2(tiny_run, tiny_page):
    data = browse.read_data(tiny_run / "results/browse")
    page = tiny_page.page
    # The menu switches method.
    page.select_option("#method", "vlad-8/sparse-R16-tau0.99")
    names = data["images"]["names"]
    by_key = {m["key"]: m for m in data["methods"]}
    assert [row["names"] for row in shown_tops(tiny_page)] == [
        [names[i] for i in top] for top in by_key["vlad-8/sparse-R16-tau0.99"]["top"]
    ]
    # Compare learned with PCA: the order of the APs recomputed by the readings.
    aps = independent_aps(tiny_run)
    page.click("#tab-compare")
    for a, b in (("fv-8/sparse-R8-tau0.99", "fv-8/pca-R8"), ("vlad-4/sparse-R16-tau0.9", "vlad-4/pca-R16")):
        page.select_option("#compare-a", a)
        page.select_option("#compare-b", b)
        shown = [row["query"] for row in shown_tops(tiny_page, "compare-list")]
        difference = aps[a] - aps[b]
        assert sorted(shown) == list(range(len(difference)))
        assert np.all(np.diff(difference[shown]) <= 1e-12), (a, b)
        assert shown == sorted(range(len(difference)), key=lambda q: (-difference[q], q))
    # The summary equals Tables I and II as the run wrote them.
    page.click("#tab-summary")
    rows = page.eval_on_selector_all(
        "#summary-rows tr[data-key]",
        "trs => trs.map(tr => [tr.dataset.key, tr.dataset.input, tr.dataset.r, tr.dataset.tau,"
        " tr.querySelector('td.map').textContent])",
    )
    table1 = pd.read_csv(tiny_run / "results/tables/table1.csv", dtype=str).set_index("Sign.")
    table2 = pd.read_csv(tiny_run / "results/tables/table2.csv", dtype=str).set_index("Sign.")
    checked = 0
    for key, label, R, tau, shown in rows:
        if "/sparse-" in key:
            assert shown == table2.loc[label, f"{100 * float(tau):g}% R{R}"], key
        elif "/pca-" in key:
            assert shown == table1.loc[label, R], key
        elif key.endswith("/full"):
            assert shown == table1.loc[label, "Full"], key
        else:
            continue
        checked += 1
    assert checked == 4 * (1 + 2 + 4)
    # The frontier: a point opens its method (one of a learned projector not hidden
    # under another point: the same mAP and cost as its start, when learning did nothing).
    page.click("#tab-frontier")
    key = page.evaluate(
        """() => Array.from(document.querySelectorAll('#frontier a[data-browse*="/sparse-"]')).map(a => {
            const box = a.getBoundingClientRect();
            const top = document.elementFromPoint(box.x + box.width / 2, box.y + box.height / 2);
            return top && top.closest('a') === a ? a.dataset.browse : null;
        }).find(key => key)"""
    )
    assert key in by_key
    page.locator(f'#frontier a[data-browse="{key}"]').first.click()
    assert tiny_page.state().startswith(f"queries|{key}|")
    assert tiny_page.errors == [] and tiny_page.not_files() == []


@pytest.mark.workflow
def test_the_html_report_links_the_browser(tiny_run):
    """The report (results/report.html, as the README makes it) has the page as an entry
    and a caption whose link opens the run's own page beside it."""
    from .conftest import REPO, run_snakemake

    report = tiny_run / "results/report.html"
    result = run_snakemake(
        tiny_run, "--configfile", str(REPO / "tests/configs/tiny.yaml"), "--report", str(report), check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    html = report.read_text(errors="replace")
    assert '"Retrieval browser": {"Other": ["results/browse/index.html"]}' in html
    links = re.findall(r'href=\\"([^"\\]*browse[^"\\]*)\\"', html)
    assert links == ["browse/index.html"] and (report.parent / links[0]).is_file()
    assert "its top 10 under each method" in html
