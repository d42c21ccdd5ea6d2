"""CLI commands: explain, saturation, plot (registered by attnkit.cli.build_parser).

Vectors are typed as comma-separated numbers and matrices as rows separated by
semicolons: ``--keys "1,0,0;0,1,0;0,0,1"``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from .errors import UsageError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``explain``, ``saturation`` and ``plot``."""
    _add_explain(subparsers)
    _add_saturation(subparsers)
    _add_plot(subparsers)


def _add_explain(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "explain",
        help="print the arithmetic of attention for vectors you type",
        description="Print a worked example of (scaled) dot-product attention: scores, "
        "scaling, softmax, weights and the context vector.",
        epilog='example: attnkit explain --query 2,0,1 --keys "1,0,0;0,1,0;0,0,1"',
    )
    p.add_argument("--query", required=True, help='a query "2,0,1", or several "2,0,1;1,1,0"')
    p.add_argument("--keys", required=True, help='key rows, e.g. "1,0,0;0,1,0;0,0,1"')
    p.add_argument("--values", help="value rows (default: the keys)")
    p.add_argument("--no-scale", action="store_true", help="plain dot product, no 1/sqrt(D)")
    p.add_argument("--mask", help='1 = may attend, 0 = masked: "1,1,0" (all queries) or rows')
    p.add_argument("--causal", action="store_true", help="apply a causal mask (bottom-right)")
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    p.add_argument(
        "--precision",
        type=int,
        help="decimals shown (default 3; JSON keeps full precision unless given)",
    )
    p.set_defaults(func=_run_explain)


def _add_saturation(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "saturation",
        help="why attention divides by sqrt(d_k): softmax saturation by width",
        description="For each d_k, draw seeded unit-normal queries and keys and report the "
        "variance of q·k and the mean largest attention weight with and without 1/sqrt(d_k).",
    )
    p.add_argument("--dims", default="4,16,64,256,1024", help="widths d_k (default %(default)s)")
    p.add_argument("--trials", type=int, default=1000, help="draws per width (default 1000)")
    p.add_argument("--num-keys", type=int, default=10, help="keys per draw (default 10)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--plot", metavar="FILE", help="also draw the curves (.png, .svg or .pdf)")
    p.set_defaults(func=_run_saturation)


def _add_plot(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("plot", help="draw masks and attention weights")
    kinds = p.add_subparsers(dest="kind", metavar="KIND", required=True)
    mask = kinds.add_parser("mask", help="draw a causal or padding mask")
    which = mask.add_mutually_exclusive_group(required=True)
    which.add_argument("--causal", type=int, metavar="N", help="an N x N causal mask")
    which.add_argument("--lengths", help='padding masks for these lengths, e.g. "3,5"')
    mask.add_argument("-o", "--output", default="mask.png", help="image file (default mask.png)")
    mask.set_defaults(func=_run_plot_mask)
    weights = kinds.add_parser(
        "weights",
        help="draw a heatmap of saved weights",
        description='FILE is JSON: {"weights": [[...]], "row_labels": [...], "col_labels": '
        "[...]} with rows = queries (target) and columns = keys (source); the output of "
        "`attnkit explain --format json` works too.",
    )
    weights.add_argument("file", help="JSON file with the weights")
    weights.add_argument("-o", "--output", help="image file (default: FILE with .png)")
    weights.add_argument("--title", help="title above the heatmap")
    weights.set_defaults(func=_run_plot_weights)


def _run_explain(args: argparse.Namespace) -> int:
    from ..lessons import explain

    query = parse_matrix(args.query, "--query")
    trace = explain(
        query[0] if ";" not in args.query else query,
        parse_matrix(args.keys, "--keys"),
        None if args.values is None else parse_matrix(args.values, "--values"),
        score="dot" if args.no_scale else "scaled_dot",
        mask=None if args.mask is None else parse_mask(args.mask, "--mask"),
        causal=args.causal,
    )
    if args.format == "json":
        print(dumps(trace.to_dict(precision=args.precision)))
    elif args.format == "markdown":
        sys.stdout.write(trace.to_markdown(_precision(args.precision)))
    else:
        sys.stdout.write(trace.to_text(_precision(args.precision)))
    return 0


def _run_saturation(args: argparse.Namespace) -> int:
    from ..lessons import saturation

    result = saturation(
        parse_ints(args.dims, "--dims"), trials=args.trials, num_keys=args.num_keys, seed=args.seed
    )
    if args.format == "json":
        print(dumps(result.to_dict()))
    else:
        sys.stdout.write(result.to_text())
    if args.plot:
        from .. import plot

        _report(plot.saturation_plot(result, path=args.plot), args.plot)
    return 0


def _run_plot_mask(args: argparse.Namespace) -> int:
    from .. import plot
    from ..attention.functional import causal_mask, padding_mask

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
    _report(fig, args.output)
    return 0


def _run_plot_weights(args: argparse.Namespace) -> int:
    from .. import plot

    saved = plot.read_weights(args.file)
    output = args.output or str(Path(args.file).with_suffix(".png"))
    fig = plot.heatmap(*saved[:3], mask=saved.mask, title=args.title, path=output)
    _report(fig, output)
    return 0


def _report(fig, path: str) -> None:
    from ..plot import image_size

    width, height = image_size(fig)
    print(f"wrote {path} ({width} x {height} px)")


def dumps(data: dict) -> str:
    """Indented JSON with each innermost list (a vector or a matrix row) on one line."""
    text = json.dumps(data, indent=2)

    # JSON strings cannot hold raw newlines, so this only removes layout whitespace.
    def one_line(match: re.Match) -> str:
        return "[" + re.sub(r"\n\s*", " ", match.group(0)[1:-1]).strip() + "]"

    return re.sub(r"\[[^\[\]{}]*\]", one_line, text)


def _precision(precision: int | None) -> int:
    return 3 if precision is None else precision


def parse_matrix(text: str, option: str) -> list[list[float]]:
    """``"1,0;0,1"`` -> ``[[1.0, 0.0], [0.0, 1.0]]``; rows by ``;``, entries by ``,``.

    Raises:
        UsageError: empty input, an empty row or entry, a non-number, a
            non-finite number, or rows of different lengths (naming the row).
    """
    if not text.strip():
        raise UsageError(f"{option} is empty; give numbers like 1,0,0 (rows separated by ;)")
    rows = []
    for r, row in enumerate(text.split(";"), start=1):
        entries = [e.strip() for e in row.split(",")]
        if entries == [""]:
            raise UsageError(f"{option} row {r} is empty")
        rows.append([_number(e, option, r, c) for c, e in enumerate(entries, start=1)])
        if len(rows[-1]) != len(rows[0]):
            raise UsageError(
                f"{option} rows have different lengths: row 1 has {len(rows[0])} numbers, "
                f"row {r} has {len(rows[-1])}"
            )
    return rows


def _number(entry: str, option: str, row: int, col: int) -> float:
    where = f"{option} row {row}, entry {col}"
    if not entry:
        raise UsageError(f"{where} is empty (two commas in a row?)")
    try:
        value = float(entry)
    except ValueError:
        raise UsageError(f"{where}: {entry!r} is not a number") from None
    if not math.isfinite(value):
        raise UsageError(f"{where}: {entry!r} is not a finite number")
    return value


def parse_mask(text: str, option: str) -> list[list[bool]]:
    """``"1,1,0"`` or ``"1,0;1,1"`` -> booleans (1/true = may attend)."""
    words = {"1": True, "true": True, "0": False, "false": False}
    rows = []
    for r, row in enumerate(text.split(";"), start=1):
        entries = [e.strip().lower() for e in row.split(",")]
        bad = [e for e in entries if e not in words]
        if bad:
            raise UsageError(f"{option} row {r}: {bad[0]!r} is not 1/0 (or true/false)")
        rows.append([words[e] for e in entries])
        if len(rows[-1]) != len(rows[0]):
            raise UsageError(f"{option} rows have different lengths (row {r})")
    return rows


def parse_ints(text: str, option: str, minimum: int = 1) -> list[int]:
    """``"4,16,64"`` -> ``[4, 16, 64]``, each at least ``minimum``."""
    values = []
    for entry in (e.strip() for e in text.split(",")):
        try:
            value = int(entry)
        except ValueError:
            raise UsageError(f"{option}: {entry!r} is not a whole number") from None
        if value < minimum:
            raise UsageError(f"{option}: {value} is below the minimum of {minimum}")
        values.append(value)
    return values
