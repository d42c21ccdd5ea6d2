"""CLI command group for :mod:`attnkit.lessons`: ``attnkit explain`` and ``attnkit saturation``.

``attnkit explain --query 2,0,1 --keys "1,0,0;0,1,0;0,0,1" [--format text|markdown|json]``
``attnkit saturation [--dims 4,16,64] [--format text|json] [--plot FILE]``

Vectors and matrices are typed as in :mod:`attnkit.cli.parsing`; negative
entries may be typed as they are (``--query -1.5,2``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from .errors import UsageError
from .parsing import parse_ints, parse_mask, parse_matrix
from .plot import report

# explain()'s arguments that this command takes as options of the same name
_EXPLAIN_OPTIONS = ("query", "keys", "values", "mask", "precision")
# the lessons' symbols as a stdout without them (an ASCII locale) gets them; the saturation
# table's scaled column keeps its width, since var(q.k / sqrt(d_k)) = var(q.k) / d_k
_ASCII_PHRASES = {"var(q·k/√d_k)": " var(q.k)/d_k"}
_ASCII_SYMBOLS = str.maketrans({"·": ".", "×": "*", "−": "-", "Σ": "sum", "√": "sqrt"})


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``explain`` and ``saturation``."""
    _add_explain(subparsers)
    _add_saturation(subparsers)


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
    p.add_argument(
        "--format",
        choices=("text", "markdown", "json"),
        default="text",
        help="how the example is written (default: text)",
    )
    p.add_argument(
        "--precision",
        type=_decimals,
        metavar="DECIMALS",
        help="decimals shown (default 3; JSON keeps full precision unless given); explain "
        "computes in float64",
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
    p.add_argument(
        "--format", choices=("text", "json"), default="text", help="output (default: text)"
    )
    p.add_argument("--plot", metavar="FILE", help="also draw the curves (.png, .svg or .pdf)")
    p.set_defaults(func=_run_saturation)


def _run_explain(args: argparse.Namespace) -> int:
    try:
        return _explain(args)
    except ValueError as err:
        raise UsageError(_as_option(str(err))) from err


def _as_option(message: str) -> str:
    """``mask has shape ...`` as ``--mask has shape ...``: the user typed an option."""
    first = message.split(" ", 1)[0]
    return f"--{message}" if first in _EXPLAIN_OPTIONS else message


def _explain(args: argparse.Namespace) -> int:
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
        write(trace.to_markdown(_precision(args.precision)))
    else:
        write(trace.to_text(_precision(args.precision)))
    return 0


def _run_saturation(args: argparse.Namespace) -> int:
    from .. import plot
    from ..lessons import saturation

    if args.plot:
        plot.check_path(args.plot)  # before the table, which takes a while
    dims = parse_ints(args.dims, "--dims")
    result = saturation(dims, trials=args.trials, num_keys=args.num_keys, seed=args.seed)
    if args.format == "json":
        print(dumps(result.to_dict()))
    else:
        write(result.to_text())
    if args.plot:
        report(plot.saturation_plot(result, path=args.plot), args.plot)
    return 0


def write(text: str) -> None:
    """``text`` on stdout, its symbols (``q·k``, ``2×1``, ``Σ_j``) in ASCII (``q.k``, ``2*1``,
    ``sum_j``) where stdout's encoding lacks them (``LC_ALL=C``, ``PYTHONIOENCODING=ascii``)."""
    try:
        text.encode(getattr(sys.stdout, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        for phrase, ascii_phrase in _ASCII_PHRASES.items():
            text = text.replace(phrase, ascii_phrase)
        text = text.translate(_ASCII_SYMBOLS)
    sys.stdout.write(text)


def dumps(data: dict) -> str:
    """Indented JSON with each innermost list (a vector or a matrix row) on one line."""
    text = json.dumps(data, indent=2)

    # JSON strings cannot hold raw newlines, so this only removes layout whitespace.
    def one_line(match: re.Match) -> str:
        return "[" + re.sub(r"\n\s*", " ", match.group(0)[1:-1]).strip() + "]"

    return re.sub(r"\[[^\[\]{}]*\]", one_line, text)


def _decimals(text: str) -> int:
    """``--precision``'s count of decimals; the number format of the translation commands'
    ``--precision`` (fp32, bf16) is named as the mix-up it is."""
    if text.strip().lower() in ("fp32", "bf16", "auto"):
        raise argparse.ArgumentTypeError(
            f"explain's --precision is the number of decimals shown, got {text!r}; the worked "
            "example is computed in float64 (fp32 and bf16 are for translate, evaluate, ...)"
        )
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a whole number of decimals, got {text!r}"
        ) from None


def _precision(precision: int | None) -> int:
    return 3 if precision is None else precision
