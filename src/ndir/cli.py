"""The ``ndir`` command line.

Exit codes: 0 success, 1 bad input (the message names the file or key and the fix),
2 bad command-line usage (from argparse).
"""

import argparse
import logging
import sys

from . import __version__
from .errors import NdirInputError


def _build_embedded(args):
    from .data import build_embedded_dataset

    table = build_embedded_dataset(args.out_dir, n_groups=args.groups, seed=args.seed, view_size=args.size)
    print(f"wrote {len(table)} images in {table['group'].nunique()} groups to {args.out_dir}")


def _describe(args):
    from .descriptors import image_descriptors

    for path in args.images:
        local = image_descriptors(path, max_width=args.max_width, step=args.step)
        print(f"{path}: {local.shape[0]} descriptors of {local.shape[1]} dims")


def build_parser():
    parser = argparse.ArgumentParser(prog="ndir", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"ndir {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    embedded = commands.add_parser(
        "build-embedded", help="write the embedded near-duplicate set (Holidays naming) into a folder"
    )
    embedded.add_argument("out_dir")
    embedded.add_argument("--groups", type=int, default=200, help="number of groups (default: 200)")
    embedded.add_argument("--seed", type=int, default=0)
    embedded.add_argument("--size", type=int, default=384, help="longer side of the views in pixels")
    embedded.set_defaults(func=_build_embedded)

    describe = commands.add_parser("descriptors", help="count the dense HOG descriptors of images")
    describe.add_argument("images", nargs="+")
    describe.add_argument("--max-width", type=int, default=512)
    describe.add_argument("--step", type=int, default=3)
    describe.set_defaults(func=_describe)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    try:
        args.func(args)
    except NdirInputError as error:
        print(f"ndir: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
