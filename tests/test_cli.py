"""Tests of the `ndir` retrieval commands (index, query, info) through ndir.cli.main."""

import errno
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ndir.cli import main
from ndir.projection import save_projector

from .conftest import CELLS, STEP, TAU
from .mounts import tmpfs


def index_args(models, images, out, *extra):
    return [
        "index",
        str(images),
        "--codebook",
        str(models["codebook"]),
        "--projector",
        str(models["projector"]),
        "-o",
        str(out),
        "--step",
        str(STEP),
        "--cell-sizes",
        ",".join(map(str, CELLS)),
        *extra,
    ]


@pytest.fixture(scope="module")
def index_dir(tiny_models):  # noqa: F811
    out = tiny_models["root"] / "index"
    assert main(index_args(tiny_models, tiny_models["images"], out, "--quiet")) == 0
    return out


def test_index_writes_folder_and_summary(tiny_models, tmp_path, capsys):  # noqa: F811
    images = tmp_path / "images"
    images.mkdir()
    for path in tiny_models["table"]["path"].iloc[:5]:
        shutil.copy(path, images)
    (images / "broken.jpg").write_bytes(b"not a jpeg")
    out = tmp_path / "idx"
    # --model is the name for --codebook
    args = index_args(tiny_models, images, out)
    args[args.index("--codebook")] = "--model"
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "indexed 5 images" in captured.out and "skipped 1 unreadable" in captured.out
    assert "warning: skipped" in captured.err and "broken.jpg" in captured.err
    assert "indexing" in captured.err  # the progress bar
    assert sorted(p.name for p in out.iterdir()) == [
        "codebook.npz",
        "images.csv",
        "index.faiss",
        "meta.json",
        "projector.npz",
    ]


def test_query_ranks_group_mates_first(tiny_models, index_dir, capsys):  # noqa: F811
    table = tiny_models["table"]
    queries = table[table["is_query"]]
    assert main(["query", str(index_dir), *queries["path"], "-k", "3", "--json"]) == 0
    printed = capsys.readouterr().out
    found = json.loads(printed)
    assert printed == json.dumps(found, indent=2) + "\n"  # indented for people, as documented
    assert [record["query"] for record in found] == list(queries["path"])
    group_of = dict(zip(table["path"], table["group"]))
    # Brute force on the same images: scores are inner products of the projections.
    Y = tiny_models["X"] @ tiny_models["U"].toarray()
    top1_in_group = 0
    for record, group, row in zip(found, queries["group"], queries.index):
        results = record["results"]
        assert [hit["rank"] for hit in results] == [1, 2, 3]
        assert record["query"] not in [hit["path"] for hit in results]
        scores = Y @ Y[row]
        scores[row] = -np.inf
        expected = table["path"].to_numpy()[np.argsort(-scores, kind="stable")[:3]]
        assert [hit["path"] for hit in results] == list(expected)
        np.testing.assert_allclose([hit["score"] for hit in results], np.sort(scores)[::-1][:3], rtol=1e-4)
        top1_in_group += group_of[results[0]["path"]] == group
    # The images are held apart from the models' training groups (other photos). A
    # random first result is a group mate with probability (n_g - 1) / (n - 1), about
    # 0.14 here (< 1 query of 6): the learned ranking does much better.
    chance = sum((table["group"] == g).sum() - 1 for g in queries["group"]) / (len(table) - 1)
    assert top1_in_group >= chance + 3


def test_query_table(tiny_models, index_dir, capsys):  # noqa: F811
    query = tiny_models["table"]["path"].iloc[0]
    assert main(["query", str(index_dir), query, "-k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"query: {query}"
    assert lines[1].split() == ["rank", "score", "image"]
    assert [line.split()[0] for line in lines[2:]] == ["1", "2"]
    float(lines[2].split()[1])
    # Without -k: 10 results (the index holds more).
    assert main(["query", str(index_dir), query]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2 + 10


def test_info(tiny_models, index_dir, capsys):  # noqa: F811
    assert main(["info", str(tiny_models["projector"])]) == 0
    out = capsys.readouterr().out
    assert "R: 8" in out and f"tau: {TAU}" in out and "non-zeros: 104" in out
    assert "signature: fv-4" in out and "D: 128" in out and "bytes CSC: 868" in out
    assert main(["info", str(tiny_models["codebook"])]) == 0
    out = capsys.readouterr().out
    assert "kind: fv" in out and "K: 4" in out
    assert main(["info", str(index_dir)]) == 0
    out = capsys.readouterr().out
    assert "type: index" in out and f"images: {len(tiny_models['table'])}" in out


def error_of(capsys, argv):
    """Run the CLI expecting exit code 1; return its one-line error message (the last
    line of stderr, after any warnings about skipped images)."""
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("ndir: error: ")
    return err


def test_errors_name_the_file(tiny_models, index_dir, tmp_path, capsys):  # noqa: F811
    models = tiny_models
    out = tmp_path / "idx"

    missing = tmp_path / "nothing.npz"
    assert str(missing) in error_of(capsys, index_args({**models, "codebook": missing}, models["images"], out))

    wrong = tmp_path / "vlad-projector.npz"
    save_projector(wrong, models["U"], signature="vlad-2", n_features=models["U"].shape[0])
    err = error_of(capsys, index_args({**models, "projector": wrong}, models["images"], out))
    assert str(wrong) in err and "results/sparse/fv-4/" in err

    empty = tmp_path / "empty"
    empty.mkdir()
    assert f"{empty}: no image files" in error_of(capsys, index_args(models, empty, out))
    assert "no such folder" in error_of(capsys, index_args(models, tmp_path / "absent", out))

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "a.jpg").write_bytes(b"")
    assert "none of the 1 images" in error_of(capsys, index_args(models, broken, out, "-q"))

    bad_query = tmp_path / "query.png"
    bad_query.write_bytes(b"garbage")
    assert str(bad_query) in error_of(capsys, ["query", str(index_dir), str(bad_query)])
    assert error_of(capsys, ["query", str(index_dir), str(tmp_path / "q.jpg")]) == (
        f"ndir: error: {tmp_path / 'q.jpg'}: no such query image file; check the path"
    )
    assert "not an ndir index" in error_of(capsys, ["query", str(empty), str(bad_query)])
    assert f"{missing}: no such index folder" in error_of(capsys, ["query", str(missing), str(bad_query)])
    assert f"{models['codebook']}: is a file, not an index folder" in error_of(
        capsys, ["query", str(models["codebook"]), str(bad_query)]
    )
    assert str(missing) in error_of(capsys, ["info", str(missing)])
    history = tmp_path / "R8-tau0.9.csv"  # a training history: nothing damaged, nothing to delete
    history.write_text("iteration,objective\n0,1.5\n")
    assert error_of(capsys, ["info", str(history)]) == (
        f"ndir: error: {history}: not an ndir model file; ndir info describes a codebook or a projector "
        "(.npz, written by the workflow) or an index folder"
    )
    (tmp_path / "occupied").mkdir()
    (tmp_path / "occupied" / "notes.txt").write_text("mine")
    err = error_of(capsys, index_args(models, models["images"], tmp_path / "occupied"))
    assert "occupied: folder exists and is not an ndir index" in err
    assert not out.exists()


INDEX_ARGS = ["index", "x", "--codebook", "c", "--projector", "p", "-o", "o"]


@pytest.mark.parametrize(
    "argv",
    [
        ["index"],
        ["query"],
        ["info"],
        [*INDEX_ARGS, "--cell-sizes", "4,x"],
        [*INDEX_ARGS, "--cell-sizes", "4,0"],
        [*INDEX_ARGS, "-j", "0"],
        [*INDEX_ARGS, "--step", "0"],
        [*INDEX_ARGS, "--max-width", "0"],
        [*INDEX_ARGS, "--max-width", "wide"],
        [*INDEX_ARGS, "--alpha", "0"],
        [*INDEX_ARGS, "--alpha", "1.5"],
        [*INDEX_ARGS, "--alpha", "high"],
        [],
        ["descriptors", "a.jpg", "--step", "-3"],
        ["query", "idx", "q.jpg", "-k", "0"],
        ["build-embedded", "out", "--groups", "0"],
        ["build-embedded", "out", "--size", "63"],
        ["build-embedded", "out", "--sibling-overlap", "0.95"],
    ],
)
def test_usage_errors_exit_2_before_any_work(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "usage: ndir" in err
    if "--alpha" in argv:  # the check's own message, not argparse's "invalid value"
        assert f"expected a number in (0, 1], got {argv[-1]!r}" in err


def test_the_smallest_valid_values_pass_the_parser():
    from ndir.cli import build_parser

    parse = build_parser().parse_args
    args = parse([*INDEX_ARGS, "--step", "1", "--max-width", "1", "--alpha", "1", "-j", "1", "--cell-sizes", "1"])
    assert (args.step, args.max_width, args.alpha, args.jobs, args.cell_sizes) == (1, 1, 1.0, 1, [1])
    assert parse([*INDEX_ARGS, "--alpha", "0.001"]).alpha == 0.001
    assert parse(["query", "idx", "q.jpg", "-k", "1"]).k == 1
    args = parse(["build-embedded", "out", "--groups", "1", "--size", "64", "--sibling-overlap", "0.9"])
    assert (args.groups, args.size, args.sibling_overlap) == (1, 64, 0.9)
    assert parse(["build-embedded", "out", "--sibling-overlap", "0"]).sibling_overlap == 0.0


def test_index_into_a_read_only_folder_fails_before_encoding(tiny_models, tmp_path, capsys, monkeypatch):  # noqa: F811
    monkeypatch.setattr("ndir.index.build_index", lambda *a, **k: pytest.fail("encoded before checking -o"))
    with tmpfs(tmp_path / "ro") as make_read_only:
        make_read_only()
        out = tmp_path / "ro" / "idx"
        err = error_of(capsys, index_args(tiny_models, tiny_models["images"], out, "-q"))
    assert err.startswith(f"ndir: error: {out}: cannot write the index there (Read-only file system)")
    assert err.endswith("pass a folder you can write to (-o)")


def test_query_show_into_a_read_only_folder_fails_before_querying(
    tiny_models, index_dir, tmp_path, capsys, monkeypatch
):  # noqa: F811
    monkeypatch.setattr("ndir.index.query_index", lambda *a, **k: pytest.fail("queried before checking --show"))
    query = str(tiny_models["table"]["path"].iloc[0])
    with tmpfs(tmp_path / "ro") as make_read_only:
        make_read_only()
        figure = tmp_path / "ro" / "shown.png"
        err = error_of(capsys, ["query", str(index_dir), query, "--show", str(figure)])
    assert f"{figure}: cannot write the figure there (Read-only file system)" in err


def test_a_figure_that_cannot_be_saved_is_one_line(tiny_models, index_dir, tmp_path, capsys, monkeypatch):  # noqa: F811
    def disk_full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("ndir.cli.show_queries", disk_full)
    query = str(tiny_models["table"]["path"].iloc[0])
    figure = tmp_path / "shown.png"
    err = error_of(capsys, ["query", str(index_dir), query, "--show", str(figure)])
    assert err == f"ndir: error: {figure}: cannot write the figure (No space left on device); " + (
        "name a file in a folder you can write to"
    )


def test_rebuilding_an_index_on_a_full_disk_keeps_the_old_one(tiny_models, tmp_path, capsys):  # noqa: F811
    query = str(tiny_models["table"]["path"].iloc[0])
    with tmpfs(tmp_path / "disk", size="256k"):
        out = tmp_path / "disk" / "idx"
        assert main(index_args(tiny_models, tiny_models["images"], out, "-q")) == 0
        capsys.readouterr()
        assert main(["query", str(out), query, "--json"]) == 0
        before = capsys.readouterr().out
        # Fill the disk up to the last few kilobytes: the old index stays, a second copy does not fit.
        with open(tmp_path / "disk" / "filler", "wb", buffering=0) as filler:
            with pytest.raises(OSError, match="No space left"):
                while True:
                    filler.write(b"\0" * 4096)
        assert main(index_args(tiny_models, tiny_models["images"], out, "-q")) == 1
        # One line, no message of faiss's own beside it.
        assert capsys.readouterr().err == (
            f"ndir: error: {out}: cannot write the index (No space left on device); the old index is unchanged; "
            "free some space or pass another folder (-o)\n"
        )
        assert main(["query", str(out), query, "--json"]) == 0
        assert capsys.readouterr().out == before
        assert sorted(p.name for p in (tmp_path / "disk").iterdir()) == ["filler", "idx"]


def test_an_index_whose_vectors_do_not_match_its_record_is_named(tiny_models, index_dir, tmp_path, capsys):  # noqa: F811
    import faiss

    query = str(tiny_models["table"]["path"].iloc[0])
    damaged = Path(shutil.copytree(index_dir, tmp_path / "idx"))
    stored = faiss.read_index(str(damaged / "index.faiss"))
    wider = faiss.IndexFlatIP(stored.d + 1)
    wider.add(np.zeros((stored.ntotal, stored.d + 1), np.float32))
    faiss.write_index(wider, str(damaged / "index.faiss"))
    err = error_of(capsys, ["query", str(damaged), query])
    assert err == (
        f"ndir: error: {damaged / 'index.faiss'}: holds vectors of {stored.d + 1} dimensions but meta.json "
        f"records a projector of R = {stored.d}; the index is damaged, build it again with `ndir index`"
    )
    assert f"{damaged / 'index.faiss'}: holds vectors" in error_of(capsys, ["info", str(damaged)])
    meta = json.loads((index_dir / "meta.json").read_text())
    del meta["projector"]
    (damaged / "meta.json").write_text(json.dumps(meta))
    assert f"{damaged / 'meta.json'}: damaged, it has no projector record" in error_of(
        capsys, ["query", str(damaged), query]
    )


def test_query_show_draws_the_queries_and_their_results(tiny_models, index_dir, tmp_path, capsys):  # noqa: F811
    queries = list(tiny_models["table"]["path"].iloc[[0, 3]])
    out = tmp_path / "shown.png"
    assert main(["query", str(index_dir), *queries, "-k", "4", "--show", str(out)]) == 0
    captured = capsys.readouterr()
    assert out.stat().st_size > 10_000 and out.read_bytes().startswith(b"\x89PNG")
    assert f"wrote {out}" in captured.err
    # The table is printed as without --show: k results per query.
    assert [line.split()[0] for line in captured.out.splitlines()[2:6]] == list("1234")
    # An index without groups: every result framed grey, no AP.
    from ndir.cli import show_queries
    from ndir.figures import FRAME_COLOURS
    from ndir.index import NearDuplicateIndex, query_index

    index = NearDuplicateIndex.load(index_dir)
    assert index.groups is None
    found = query_index(index, queries, k=4)
    assert show_queries(index, found, 4, tmp_path / "again.pdf") == [[[FRAME_COLOURS[None]] * 4]] * 2


def test_index_with_groups_frames_query_results_green_or_red(tiny_models, tmp_path, capsys, monkeypatch):  # noqa: F811
    out = tmp_path / "grouped"
    args = index_args(tiny_models, tiny_models["images"], out, "-q")
    assert main([*args, "--groups", "holidays"]) == 0
    table = tiny_models["table"]
    assert f"{len(table)} in {table['group'].nunique()} holidays groups" in (capsys.readouterr().out)
    from ndir.cli import show_queries
    from ndir.evaluation import holidays_map
    from ndir.figures import FRAME_COLOURS
    from ndir.index import NearDuplicateIndex, query_index

    index = NearDuplicateIndex.load(out)
    assert index.meta["groups"] == "holidays"
    group_of = dict(zip(table["path"], table["group"]))
    assert [index.group_of(p) for p in table["path"]] == list(table["group"])
    assert index.group_of(tiny_models["root"] / "fv-4.npz") is None
    queries = table[table["is_query"]]
    found = query_index(index, list(queries["path"]), k=len(index))
    colours = show_queries(index, found, 5, tmp_path / "grouped.png")
    for record, drawn, group in zip(found, colours, queries["group"]):
        expected = [FRAME_COLOURS[group_of[hit["path"]] == group] for hit in record["results"][:5]]
        assert drawn == [expected]
    assert FRAME_COLOURS[True] in str(colours) and FRAME_COLOURS[False] in str(colours)
    # The AP printed is Holidays' AP of the index's own ranking (raw projections).
    drawn_blocks = []
    monkeypatch.setattr(
        "ndir.figures.retrievals_figure",
        lambda blocks, outputs, title=None: drawn_blocks.extend(blocks),
    )
    show_queries(index, found, 5, tmp_path / "unused.png")
    monkeypatch.undo()
    Y = tiny_models["X"] @ tiny_models["U"].toarray()
    _, ap = holidays_map(Y, table["group"].to_numpy(), table["is_query"].to_numpy(), True)
    np.testing.assert_allclose([b["methods"][0]["ap"] for b in drawn_blocks], ap, atol=1e-6)
    # Through the command line, with a PDF.
    pdf = tmp_path / "grouped.pdf"
    assert main(["query", str(out), *queries["path"][:2], "--show", str(pdf)]) == 0
    assert pdf.read_bytes().startswith(b"%PDF")


def test_index_with_group_folders_keeps_the_folder_names(tiny_models, tmp_path, capsys, monkeypatch):  # noqa: F811
    """``--groups folders``: each image's group is its folder's name, as written ("007"
    stays text), and the figure labels the query with it."""
    from ndir.cli import show_queries
    from ndir.index import NearDuplicateIndex, query_index

    layout = tmp_path / "mine"
    paths = list(tiny_models["table"]["path"].iloc[:5])
    for name, chosen in (("beach", paths[:3]), ("007", paths[3:])):
        (layout / name).mkdir(parents=True)
        for path in chosen:
            shutil.copy(path, layout / name)
    out = tmp_path / "idx"
    assert main([*index_args(tiny_models, layout, out, "-q"), "--groups", "folders"]) == 0
    assert "5 in 2 folders groups" in capsys.readouterr().out
    index = NearDuplicateIndex.load(out)
    assert sorted(index.groups) == ["007", "007", "beach", "beach", "beach"]
    query = layout / "007" / Path(paths[3]).name
    assert index.group_of(query) == "007"
    drawn = []
    monkeypatch.setattr(
        "ndir.figures.retrievals_figure",
        lambda blocks, outputs, title=None: drawn.extend(blocks),
    )
    show_queries(index, query_index(index, [query], k=len(index)), 3, tmp_path / "x.png")
    assert drawn[0]["label"].endswith("\ngroup 007, 1 near duplicate")  # one: no plural


def test_query_show_of_an_index_of_only_the_query_says_so(tiny_models, tmp_path, capsys):  # noqa: F811
    images = tmp_path / "one"
    images.mkdir()
    query = Path(shutil.copy(tiny_models["table"]["path"].iloc[0], images))
    assert main(index_args(tiny_models, images, tmp_path / "idx", "-q")) == 0
    err = error_of(capsys, ["query", str(tmp_path / "idx"), str(query), "--show", str(tmp_path / "x.png")])
    assert "no result to draw" in err and not (tmp_path / "x.png").exists()


def test_query_show_errors(index_dir, tiny_models, tmp_path, capsys):  # noqa: F811
    query = str(tiny_models["table"]["path"].iloc[0])
    with pytest.raises(SystemExit) as stop:
        main(["query", str(index_dir), query, "--show", str(tmp_path / "out.txt")])
    assert stop.value.code == 2 and ".png" in capsys.readouterr().err
    missing = tmp_path / "absent" / "out.png"
    assert f"{missing}: its folder does not exist" in error_of(
        capsys, ["query", str(index_dir), query, "--show", str(missing)]
    )


def test_build_embedded_defaults_are_the_workflows():
    """``ndir build-embedded`` with no options builds the default run's set: its group
    count, view size, sibling overlap and seed are config.yaml's, as are the library's;
    a sibling overlap outside 0-0.9 is a usage error."""
    import yaml

    from ndir.cli import MIN_VIEW_SIZE, SIBLING_OVERLAP, VIEW_SIZE, build_parser
    from ndir.embedded import DEFAULT_SIBLING_OVERLAP, DEFAULT_VIEW_SIZE
    from ndir.embedded import MIN_VIEW_SIZE as LIBRARY_MIN_VIEW_SIZE

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())
    args = build_parser().parse_args(["build-embedded", "out"])
    assert (args.groups, args.size, args.sibling_overlap, args.seed) == (
        config["embedded"]["n_groups"],
        config["embedded"]["view_size"],
        config["embedded"]["sibling_overlap"],
        config["seed"],
    )
    assert DEFAULT_VIEW_SIZE == config["embedded"]["view_size"] == VIEW_SIZE
    assert DEFAULT_SIBLING_OVERLAP == config["embedded"]["sibling_overlap"] == SIBLING_OVERLAP
    assert build_parser().parse_args(["build-embedded", "out", "--sibling-overlap", "0"]).sibling_overlap == 0.0
    for bad in ("0.95", "-0.1", "x"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["build-embedded", "out", "--sibling-overlap", bad])
    assert MIN_VIEW_SIZE == LIBRARY_MIN_VIEW_SIZE
    assert args.allow_overlap is False


def test_output_into_a_closed_pipe_ends_quietly(tiny_models):  # noqa: F811
    """``ndir info ... | head -0``: exit status 128 + SIGPIPE, no traceback."""
    import signal
    import subprocess
    import sys

    process = subprocess.Popen(
        [sys.executable, "-m", "ndir.cli", "info", str(tiny_models["codebook"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.close()  # before the command (whose start takes ~1 s) writes
    assert process.wait(timeout=120) == 128 + signal.SIGPIPE
    assert process.stderr.read() == b""


def test_library_warnings_read_as_the_commands_own(tiny_models, tmp_path, capsys):  # noqa: F811
    """A warning logged by the library prints as ``ndir: warning: ...``."""
    images = tmp_path / "images"
    shutil.copytree(tiny_models["images"], images)
    (images / "notes.txt").write_text("not an image")
    import logging

    root = logging.getLogger()
    handlers = root.handlers[:]
    root.handlers.clear()  # as in a fresh process: main() sets up the logging
    try:
        out = tmp_path / "idx"
        assert main([*index_args(tiny_models, images, out, "-q"), "--groups", "holidays"]) == 0
    finally:
        root.handlers[:] = handlers
    assert "ndir: warning: " in capsys.readouterr().err


def test_descriptors_counts_with_the_given_grid(tmp_path, capsys):
    """``ndir descriptors`` counts the dense HOG descriptors of the grid asked for, the
    count :func:`ndir.descriptors.n_descriptors` gives for the image's size."""
    import cv2

    from ndir.descriptors import n_descriptors

    path = tmp_path / "photo.png"
    cv2.imwrite(str(path), np.random.default_rng(0).integers(0, 256, (90, 120), dtype=np.uint8))
    for extra, cells in (([], (4, 6, 8, 10)), (["--cell-sizes", "6", "--step", "5"], (6,))):
        assert main(["descriptors", str(path), *extra]) in (None, 0)
        step = 5 if extra else 3
        assert capsys.readouterr().out == f"{path}: {n_descriptors(90, 120, step, cells)} descriptors of 128 dims\n"


def test_query_browse_writes_the_page_of_the_queries(tiny_models, tmp_path, capsys):  # noqa: F811
    """``--browse DIR``: the retrieval browser of the queries, their top k, true matches
    at every rank and APs over the whole index (an index with groups)."""
    from ndir import browse
    from ndir.evaluation import holidays_map

    index = tmp_path / "grouped"
    assert main([*index_args(tiny_models, tiny_models["images"], index, "-q"), "--groups", "holidays"]) == 0
    table = tiny_models["table"]
    queries = table[table["is_query"]]
    page = tmp_path / "page"
    capsys.readouterr()
    assert main(["query", str(index), *queries["path"], "-k", "4", "--browse", str(page)]) == 0
    captured = capsys.readouterr()
    assert f"wrote {page / 'index.html'}" in captured.err
    assert [line.split()[0] for line in captured.out.splitlines()[2:6]] == list("1234")  # the table as before
    data = browse.read_data(page)
    (method,) = data["methods"]
    names = data["images"]["names"]
    assert [names[q] for q in data["queries"]] == [Path(p).name for p in queries["path"]]
    assert all(len(top) == 4 for top in method["top"])
    group_of = dict(zip((Path(p).name for p in table["path"]), table["group"]))
    for q, top, ranks, images in zip(data["queries"], method["top"], method["matches"], method["match_images"]):
        group = group_of[names[q]]
        assert [r for r, i in enumerate(top) if group_of[names[i]] == group] == [r for r in ranks if r < 4]
        assert sorted(names[i] for i in images) == sorted(
            Path(p).name for p, g in zip(table["path"], table["group"]) if g == group and Path(p).name != names[q]
        )
    # The APs over the whole index, as Holidays' evaluation of the index's projections.
    Y = tiny_models["X"] @ tiny_models["U"].toarray()
    _, ap = holidays_map(Y, table["group"].to_numpy(), table["is_query"].to_numpy(), True)
    np.testing.assert_allclose(method["ap"], ap, atol=1e-6)
    assert method["map"] == pytest.approx(100 * ap.mean(), abs=1e-4)
    # One thumbnail per image shown (queries, results, true matches), no more.
    shown = {*data["queries"], *(i for top in method["top"] for i in top)}
    shown |= {i for images in method["match_images"] for i in images}
    assert len(list((page / "thumbs").iterdir())) == len(names) == len(shown)


def test_query_browse_without_groups_knows_no_relevance(tiny_models, index_dir, tmp_path, capsys):  # noqa: F811
    from ndir import browse

    queries = list(tiny_models["table"]["path"].iloc[[0, 3]])
    assert main(["query", str(index_dir), *queries, "-k", "3", "--browse", str(tmp_path / "page")]) == 0
    (method,) = browse.read_data(tmp_path / "page")["methods"]
    assert method["matches"] is None and method["ap"] is None and method["map"] is None
    assert [len(top) for top in method["top"]] == [3, 3]


def test_query_browse_into_a_file_or_a_read_only_folder_fails_before_querying(
    tiny_models, index_dir, tmp_path, capsys, monkeypatch
):  # noqa: F811
    monkeypatch.setattr("ndir.index.query_index", lambda *a, **k: pytest.fail("queried before checking --browse"))
    query = str(tiny_models["table"]["path"].iloc[0])
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    err = error_of(capsys, ["query", str(index_dir), query, "--browse", str(a_file)])
    assert err == f"ndir: error: {a_file}: not a folder; name a folder for the page (it is created)"
    with tmpfs(tmp_path / "ro") as make_read_only:
        make_read_only()
        folder = tmp_path / "ro" / "page"
        err = error_of(capsys, ["query", str(index_dir), query, "--browse", str(folder)])
    assert f"{folder}: cannot write the page there (Read-only file system)" in err


def test_query_browse_page_opens_in_a_browser(tiny_models, tmp_path):  # noqa: F811
    from .browsers import Opened, chromium

    index = tmp_path / "grouped"
    assert main([*index_args(tiny_models, tiny_models["images"], index, "-q"), "--groups", "holidays"]) == 0
    table = tiny_models["table"]
    queries = list(table[table["is_query"]]["path"])
    assert main(["query", str(index), *queries, "--browse", str(tmp_path / "page")]) == 0
    with chromium() as browser:
        opened = Opened(browser, tmp_path / "page")
        opened.page.wait_for_load_state("load")
        assert opened.page.locator("#queries > li").count() == len(queries)
        assert "mAP" in opened.page.inner_text("#method-map")
        opened.page.click("#tab-compare")  # one method: A and B the same, every query equal
        assert "equal on " + str(len(queries)) in opened.page.inner_text("#compare-summary")
        assert opened.errors == [] and opened.not_files() == []
