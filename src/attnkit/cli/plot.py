"""CLI command group ``attnkit plot``: ``plot mask`` and ``plot weights`` (drawn by attnkit.plot).

``attnkit plot mask (--causal N | --lengths 3,5) [-o FILE]``
``attnkit plot weights FILE.json [--index K] [-o FILE] [--title T] [--xlabel X] [--ylabel Y]``

Output paths are checked (extension, writable folder) before anything is
drawn; labels are passed to :mod:`attnkit.plot` raw, which escapes them.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .errors import UsageError
from .parsing import parse_ints


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``plot`` with its kinds ``mask`` and ``weights``."""
    p = subparsers.add_parser("plot", help="draw masks and attention weights")
    kinds = p.add_subparsers(dest="kind", metavar="KIND", required=True)
    _add_mask(kinds)
    _add_weights(kinds)


def _add_mask(kinds: argparse._SubParsersAction) -> None:
    mask = kinds.add_parser("mask", help="draw a causal or padding mask")
    which = mask.add_mutually_exclusive_group(required=True)
    which.add_argument("--causal", type=int, metavar="N", help="an N x N causal mask")
    which.add_argument("--lengths", help='padding masks for these lengths, e.g. "3,5"')
    mask.add_argument("-o", "--output", default="mask.png", help="image file (default mask.png)")
    mask.set_defaults(func=_run_mask)


def _add_weights(kinds: argparse._SubParsersAction) -> None:
    weights = kinds.add_parser(
        "weights",
        help="draw a heatmap of saved weights",
        description='FILE is JSON: {"weights": [[...]], "row_labels": [...], "col_labels": '
        '[...], "mask": [[...]]} with rows = queries (target) and columns = keys (source); '
        "labels and mask (true = may attend) are optional, and masked cells are drawn "
        "hatched. The output of `attnkit explain --format json` works too.",
    )
    weights.add_argument("file", help="JSON file with the weights")
    weights.add_argument(
        "--index",
        type=int,
        metavar="K",
        help="FILE is JSON Lines (e.g. from 'attnkit translate --attention-json'): draw "
        "entry K (1-based, = the input line)",
    )
    weights.add_argument("-o", "--output", help="image file (default: FILE with .png)")
    weights.add_argument("--title", help="title above the heatmap")
    weights.add_argument(
        "--xlabel", default="source (keys)", help="column axis title (default: %(default)s)"
    )
    weights.add_argument(
        "--ylabel", default="target (queries)", help="row axis title (default: %(default)s)"
    )
    weights.set_defaults(func=_run_weights)


def _run_mask(args: argparse.Namespace) -> int:
    from .. import plot
    from ..attention.masks import causal_mask, padding_mask

    plot.check_path(args.output)
    if args.causal is not None:
        if args.causal <= 0:
            raise UsageError(f"--causal needs a positive size, got {args.causal}")
        n = args.causal
        fig = plot.mask_plot(causal_mask(n), title=f"causal mask ({n} x {n})", path=args.output)
    else:
        lengths = parse_ints(args.lengths, "--lengths", minimum=0)
        fig = plot.mask_plot(
            padding_mask(lengths),
            row_labels=[f"len {n}" for n in lengths],
            title=f"padding mask, lengths {', '.join(map(str, lengths))}",
            xlabel="position",
            ylabel="sequence",
            path=args.output,
        )
    report(fig, args.output)
    return 0


def _run_weights(args: argparse.Namespace) -> int:
    from .. import plot

    output = args.output or str(Path(args.file).with_suffix(".png"))
    plot.check_path(output)
    saved = plot.read_weights(args.file, index=args.index)
    fig = plot.heatmap(
        saved.weights,
        saved.row_labels,
        saved.col_labels,
        mask=saved.mask,
        title=args.title,
        xlabel=args.xlabel,
        ylabel=args.ylabel,
        path=output,
    )
    report(fig, output)
    return 0


def report(fig, path: str | os.PathLike) -> None:
    """Print ``wrote PATH (W x H px)`` for a picture just saved."""
    from ..plot import image_size

    width, height = image_size(fig)
    print(f"wrote {path} ({width} x {height} px)")
