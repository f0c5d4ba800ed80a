"""The ``ndir`` command line.

Commands: ``build-embedded`` and ``descriptors`` (data), and the retrieval
commands ``index`` (encode and project a folder of images into a faiss index),
``query`` (rank the indexed near duplicates of images, ``--show`` draws them,
``--browse`` writes the retrieval browser's page of them) and
``info`` (describe a projector, a codebook or an index); see :mod:`ndir.index`.

Exit codes:

0
    Success (``index`` also succeeds when some images were skipped as unreadable:
    each is warned about on stderr and counted in the summary line).
1
    Bad input: a missing or unreadable file, an empty image folder, a projector
    trained for another codebook, an unreadable query image. One line on stderr,
    ``ndir: error: <file>: <what is wrong>; <the fix>``.
2
    Bad command-line usage (from argparse).
141
    The reader of the output went away (``ndir query ... | head``): the output
    stops there, quietly, as for other Unix tools (128 + SIGPIPE).
"""

import argparse
import json
import logging
import math
import os
import signal
import sys
from pathlib import Path

from ndir import __version__, names
from ndir.errors import NdirInputError, os_reason

# ndir.embedded's DEFAULT_VIEW_SIZE, MIN_VIEW_SIZE and DEFAULT_SIBLING_OVERLAP, without
# importing it (OpenCV and pandas: half a second) for every command.
VIEW_SIZE, MIN_VIEW_SIZE, SIBLING_OVERLAP = 320, 64, 0.6


def _build_embedded(args):
    from ndir.data import build_embedded_dataset

    table = build_embedded_dataset(
        args.out_dir,
        n_groups=args.groups,
        seed=args.seed,
        view_size=args.size,
        allow_overlap=args.allow_overlap,
        sibling_overlap=args.sibling_overlap,
    )
    print(f"wrote {len(table)} images in {table['group'].nunique()} groups to {args.out_dir}")


def _describe(args):
    from ndir.descriptors import image_descriptors

    for path in args.images:
        local = image_descriptors(path, max_width=args.max_width, step=args.step, cell_sizes=tuple(args.cell_sizes))
        print(f"{path}: {local.shape[0]} descriptors of {local.shape[1]} dims")


def _cell_sizes(text):
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return sizes


def _share(text):
    """An argparse type: a share in [0, 0.9] (``embedded.sibling_overlap``'s range)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan  # outside every range
    if not 0.0 <= value <= 0.9:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 0.9, got {text!r}")
    return value


def _int_at_least(minimum):
    """An argparse type: an integer >= ``minimum``."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value

    return parse


_positive_int = _int_at_least(1)


def _exponent(text):
    """An argparse type: a power-normalisation exponent in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan  # outside every range
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def _figure_file(text):
    """An output figure path whose suffix matplotlib can write (png, pdf, svg, ...)."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if Path(text).suffix.lower().lstrip(".") not in formats:
        raise argparse.ArgumentTypeError(
            f"{text!r}: name the figure file with one of the suffixes " + ", ".join(f".{f}" for f in sorted(formats))
        )
    return Path(text)


def _index(args):
    from tqdm import tqdm

    from ndir.index import build_index, check_index_folder, group_labels, image_files, load_encoder

    encoder = load_encoder(
        args.codebook,
        args.projector,
        max_width=args.max_width,
        step=args.step,
        cell_sizes=args.cell_sizes,
        alpha=args.alpha,
    )
    paths = image_files(args.images_dir)
    check_index_folder(args.output)
    groups = None if args.groups is None else group_labels(args.images_dir, args.groups)

    def progress(items, total):
        return tqdm(
            items,
            total=total,
            desc="indexing",
            unit="image",
            file=sys.stderr,
            disable=args.quiet,
        )

    def warn(path, message):
        tqdm.write(f"ndir: warning: skipped {message}", file=sys.stderr)

    index, skipped = build_index(paths, encoder, progress=progress, on_skip=warn, groups=groups, n_jobs=args.jobs)
    if groups is not None:
        index.meta["groups"] = args.groups
    index.save(args.output)
    in_groups = (
        ""
        if groups is None
        else f", {sum(g is not None for g in index.groups)} in "
        f"{len({g for g in index.groups if g is not None})} {args.groups} groups"
    )
    print(
        f"indexed {len(index)} images from {args.images_dir} into {args.output} "
        f"({encoder.signature}, D={encoder.n_features} -> R={encoder.n_components}, "
        f"{encoder.components.nnz} non-zeros{in_groups}); skipped {len(skipped)} unreadable"
    )


def _query(args):
    from ndir.index import NearDuplicateIndex, query_index

    for image in args.images:
        if not Path(image).is_file():
            raise NdirInputError(f"{image}: no such query image file; check the path")
    if args.show is not None:
        _check_figure_folder(args.show)
    if args.browse is not None:
        _check_browse_folder(args.browse)
    index = NearDuplicateIndex.load(args.index)
    # With groups the figure prints each query's AP and the page the rank of every true
    # match, which need the whole ranking.
    labelled = (args.show is not None or args.browse is not None) and index.groups is not None
    found = query_index(index, args.images, k=len(index) if labelled else args.k)
    if args.show is not None:
        if not any(record["results"] for record in found):
            raise NdirInputError(
                f"{args.index}: no result to draw, the index holds no image but the "
                "queries' own files; index the images to search among"
            )
        try:
            show_queries(index, found, args.k, args.show)
        except OSError as error:
            raise NdirInputError(
                f"{args.show}: cannot write the figure ({os_reason(error)}); name a file in a folder you can write to"
            ) from None
        print(f"wrote {args.show}", file=sys.stderr)
    if args.browse is not None:
        try:
            page = browse_queries(index, found, args.k, args.browse)
        except OSError as error:
            raise NdirInputError(
                f"{args.browse}: cannot write the page ({os_reason(error)}); name a folder you can write to"
            ) from None
        print(f"wrote {page}", file=sys.stderr)
    found = [{**record, "results": record["results"][: args.k]} for record in found]
    if args.json:
        json.dump(found, sys.stdout, indent=2)
        print()
        return
    for i, record in enumerate(found):
        if i:
            print()
        print(f"query: {record['query']}")
        print(f"{'rank':>4}  {'score':>9}  image")
        for hit in record["results"]:
            print(f"{hit['rank']:>4}  {hit['score']:>9.5f}  {hit['path']}")


def _check_figure_folder(path):
    """NdirInputError unless a figure can be written to ``path``, before any work."""
    from ndir.atomic import check_writable

    folder = path.resolve().parent
    if not folder.is_dir():
        raise NdirInputError(f"{path}: its folder does not exist; create it or name another file")
    try:
        check_writable(folder)
    except OSError as error:
        raise NdirInputError(
            f"{path}: cannot write the figure there ({os_reason(error)}); name a file in a folder you can write to"
        ) from None


def _check_browse_folder(folder):
    """NdirInputError unless the page can be written into ``folder`` (created), before any work."""
    from ndir.atomic import check_writable

    if folder.exists() and not folder.is_dir():
        raise NdirInputError(f"{folder}: not a folder; name a folder for the page (it is created)")
    try:
        check_writable(folder)
    except OSError as error:
        raise NdirInputError(
            f"{folder}: cannot write the page there ({os_reason(error)}); name a folder you can write to"
        ) from None


def browse_queries(index, found, k, folder):
    """Write the retrieval browser (:mod:`ndir.browse`) of the queries of ``found``
    (:func:`ndir.index.query_index`) and their top ``k`` into ``folder``: the page,
    its data and a thumbnail of each image shown. The index's projector is the one
    method. When the index has groups and every query is one of its images, each
    result is marked a true match or not, and the page gives the rank of every true
    match and each query's AP (``found`` must then hold whole rankings). Returns the
    page's path."""
    from ndir import browse
    from ndir.evaluation import average_precision

    paths, position = [], {}

    def image(path):
        if path not in position:
            position[path] = len(paths)
            paths.append(path)
        return position[path]

    queries = [image(record["query"]) for record in found]
    query_groups = [index.group_of(record["query"]) for record in found]
    labelled = index.groups is not None and all(group is not None for group in query_groups)
    top, matches, match_images, ap = [], [], [], []
    for record, group in zip(found, query_groups):
        hits = record["results"]
        top.append([image(hit["path"]) for hit in hits[:k]])
        if labelled:
            ranks = [rank for rank, hit in enumerate(hits) if index.group_of(hit["path"]) == group]
            matches.append(ranks)
            match_images.append([image(hits[rank]["path"]) for rank in ranks])
            n_positives = sum(g == group for g in index.groups) - 1
            ap.append(average_precision(ranks, n_positives) if n_positives else None)
    meta = index.meta
    signature = meta["codebook"]["signature"]
    tau = meta["projector"]["meta"].get("sparsity")
    label = f"{signature.upper()} sparse rank R = {index.n_components}" + ("" if tau is None else f", τ = {tau:g}")
    known = [value for value in ap if value is not None]
    method = browse.Method(
        "index",
        label,
        f"The index {index.folder.name if index.folder else ''}".strip(),
        top,
        matches if labelled else None,
        match_images if labelled else None,
        ap if labelled else None,
        family="sparse rank",
        input=signature.upper(),
        R=index.n_components,
        tau=tau,
        map=100 * sum(known) / len(known) if known else None,
    )
    data = browse.page_data(
        title=f"ndir query: {len(found)} queries against {index.folder or 'an index'}",
        subtitle=f"{len(index)} indexed images ({label}); top {k} per query"
        + ("" if labelled else "; no groups: relevance unknown"),
        names=[Path(path).name for path in paths],
        thumbs=browse.thumbnail_names(len(paths)),
        groups=[index.group_of(path) for path in paths] if index.groups is not None else None,
        queries=queries,
        methods=[method],
        k=k,
        notes=[
            "AP over the whole index, the query's own file left out."
            if labelled
            else "The index has no groups (ndir index --groups), or a query is not one of its images: "
            "no AP and no true match."
        ],
    )
    return browse.write_browser(folder, data, paths)


def show_queries(index, found, k, path):
    """Draw the queries of ``found`` (:func:`ndir.index.query_index`) and their top
    ``k`` into the figure file ``path`` (:func:`ndir.figures.retrievals_figure`).

    A query that is an image of an index with groups has its results framed green
    (same group) or red, and its AP printed, computed on the results given (the
    whole index for the exact AP); other results are framed grey, with their
    scores. Returns the frame colours, per query.
    """
    from ndir.evaluation import average_precision
    from ndir.figures import retrievals_figure

    meta = index.meta
    tau = meta["projector"]["meta"].get("sparsity")
    name = f"{meta['codebook']['signature'].upper()}\nR = {index.n_components}"
    if tau is not None:
        name += f", τ = {tau:g}"
    blocks, labelled = [], False
    for record in found:
        hits = record["results"]
        method = {
            "name": name,
            "results": [hit["path"] for hit in hits[:k]],
            "captions": [f"{hit['score']:.3g}" for hit in hits[:k]],
        }
        label = Path(record["query"]).name
        group = index.group_of(record["query"])
        if group is not None:
            labelled = True
            groups = [index.group_of(hit["path"]) for hit in hits]
            relevant = [None if g is None else g == group for g in groups]
            method["relevant"] = relevant[:k]
            n_positives = sum(g == group for g in index.groups) - 1
            if n_positives > 0:
                ranks = [rank for rank, flag in enumerate(relevant) if flag]
                method["ap"] = average_precision(ranks, n_positives)
            plural = "" if n_positives == 1 else "s"
            label += f"\ngroup {group}, {n_positives} near duplicate{plural}"
        blocks.append({"query": record["query"], "label": label, "methods": [method]})
    shown = max(len(record["results"][:k]) for record in found)
    title = f"Queries (blue) and their top {shown}; " + (
        "green: near duplicate, red: not, grey: no group; AP over the whole index"
        if labelled
        else "score: the learned similarity y_q^T y"
    )
    return retrievals_figure(blocks, [path], title=title)


def _info(args):
    from ndir.index import describe

    for key, value in describe(args.file).items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        print(f"{key}: {value}")


def _add_descriptor_options(parser):
    """The dense HOG settings (the paper's by default), for the commands that describe
    images: they must be those the codebook was fitted with."""
    parser.add_argument(
        "--max-width",
        type=_positive_int,
        default=512,
        help="resize images to at most this width (default: 512)",
    )
    parser.add_argument("--step", type=_positive_int, default=3, help="dense grid step in pixels (default: 3)")
    parser.add_argument(
        "--cell-sizes",
        type=_cell_sizes,
        default=[4, 6, 8, 10],
        metavar="C,C,...",
        help="HOG cell sizes, one scale each (default: 4,6,8,10)",
    )


def build_parser():
    parser = argparse.ArgumentParser(
        prog="ndir",
        description="Near-duplicate image retrieval with the sparse rank projectors "
        "learned by the ndir workflow: index a folder of images, query it, describe "
        "the models.",
    )
    parser.add_argument("--version", action="version", version=f"ndir {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    summary = "write the embedded near-duplicate set (Holidays naming) into a folder"
    embedded = commands.add_parser("build-embedded", help=summary, description=summary)
    embedded.add_argument("out_dir", metavar="OUT_DIR", help="folder to write the images and views.csv into")
    embedded.add_argument(
        "--groups",
        type=_positive_int,
        default=200,
        help="number of groups (default: 200, the workflow's)",
    )
    embedded.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the views' windows and edits (default: 0, the workflow's)",
    )
    embedded.add_argument(
        "--size",
        type=_int_at_least(MIN_VIEW_SIZE),
        default=VIEW_SIZE,
        help=f"longer side of the views in pixels, at least {MIN_VIEW_SIZE} (default: {VIEW_SIZE}, the workflow's)",
    )
    embedded.add_argument(
        "--sibling-overlap",
        type=_share,
        default=SIBLING_OVERLAP,
        help="share of a tile's side that neighbouring windows of one photo have in "
        f"common, 0 to 0.9 (default: {SIBLING_OVERLAP}, the workflow's)",
    )
    embedded.add_argument(
        "--allow-overlap",
        action="store_true",
        help="let the scenes of different groups overlap, for more groups than the "
        "shipped photos give distinct scenes (a timing set: its mAP says nothing)",
    )
    embedded.set_defaults(func=_build_embedded)

    summary = "count the dense HOG descriptors of images"
    describe = commands.add_parser("descriptors", help=summary, description=summary)
    describe.add_argument("images", nargs="+", metavar="IMAGE", help="image files")
    _add_descriptor_options(describe)
    describe.set_defaults(func=_describe)

    index = commands.add_parser(
        "index",
        help="encode and project every image of a folder into a near-duplicate index",
        description="Compute descriptors -> signature -> sparse projection y = U^T x for "
        "every image under IMAGES_DIR and store them in a faiss inner-product index "
        "(folder INDEX: index.faiss, images.csv, meta.json). Unreadable images are "
        "skipped with a warning.",
    )
    index.add_argument("images_dir", metavar="IMAGES_DIR")
    index.add_argument(
        "--codebook",
        "--model",
        required=True,
        metavar="NPZ",
        help=f"codebook, {names.CODEBOOK_FILE_HINT}",
    )
    index.add_argument(
        "--projector",
        required=True,
        metavar="NPZ",
        help=f"projector learned for that codebook's signature, {names.PROJECTOR_FILE_HINT}",
    )
    index.add_argument("-o", "--output", required=True, metavar="INDEX", help="index folder to write")
    _add_descriptor_options(index)
    index.add_argument(
        "--alpha",
        type=_exponent,
        default=0.1,
        help="power normalisation exponent, in (0, 1] (default: 0.1)",
    )
    index.add_argument(
        "--groups",
        choices=["holidays", "ukbench", "folders"],
        help="record near-duplicate groups read from the layout of IMAGES_DIR: "
        "holidays (100000.jpg, ...; group = number // 100), ukbench (groups of 4 "
        "numbers) or folders (one sub-folder per group); `query --show` then frames "
        "results green or red",
    )
    index.add_argument(
        "-j",
        "--jobs",
        type=_positive_int,
        default=None,
        metavar="N",
        help="images encoded at once, on N threads (default: every CPU; the index is the same for any N)",
    )
    index.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    index.set_defaults(func=_index)

    query = commands.add_parser(
        "query",
        help="rank the indexed near duplicates of images",
        description="Print the k indexed images of largest score y_q^T y (the learned "
        "similarity) for each query image; the query's own file, if it was indexed, is "
        "left out.",
    )
    query.add_argument("index", metavar="INDEX", help="folder written by `ndir index`")
    query.add_argument("images", nargs="+", metavar="IMAGE", help="query image files")
    query.add_argument("-k", type=_positive_int, default=10, help="results per query (default: 10)")
    query.add_argument("--json", action="store_true", help="print JSON instead of a table")
    query.add_argument(
        "--show",
        type=_figure_file,
        metavar="FIGURE",
        help="also draw each query and its top k into this image file (.png, .pdf, "
        "...); a query indexed with --groups gets green/red frames and its AP",
    )
    query.add_argument(
        "--browse",
        type=Path,
        metavar="DIR",
        help="also write the retrieval browser of the queries into DIR (DIR/index.html, "
        "data.js and thumbnails; opens offline): each query's top k and, for an index with "
        "--groups, true matches, the rank of each and the query's AP",
    )
    query.set_defaults(func=_query)

    summary = "describe a projector, a codebook or an index folder"
    info = commands.add_parser("info", help=summary, description=summary)
    info.add_argument(
        "file",
        metavar="FILE",
        help="a projector or codebook .npz written by the workflow, or an index folder",
    )
    info.set_defaults(func=_info)
    return parser


class _Formatter(logging.Formatter):
    """``ndir: warning: <message>``, as the command's own warnings and errors read."""

    def format(self, record):
        return f"ndir: {record.levelname.lower()}: {record.getMessage()}"


def main(argv=None):
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(_Formatter())
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    try:
        args.func(args)
        sys.stdout.flush()
    except NdirInputError as error:
        print(f"ndir: error: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader closed the pipe: send what Python still wants to flush at exit
        # to /dev/null rather than failing again there.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return 0


if __name__ == "__main__":
    sys.exit(main())
