"""The ``attnkit`` command line: the only place that parses arguments.

Each command group lives in its own module with a ``register(subparsers)``
function that adds its parsers and sets ``func`` to a handler taking the parsed
arguments and returning an exit status: ``lessons`` (explain, saturation),
``plot`` (plot mask, plot weights), ``nmt`` (train, translate, evaluate) and
``bench``. Bad user input raises :class:`UsageError` (or ``ValueError``),
which is printed as one line on stderr with exit status 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .errors import UsageError

__all__ = ["UsageError", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    from . import bench, lessons, nmt, plot

    parser = argparse.ArgumentParser(
        prog="attnkit",
        description="The attention mechanism of neural translation: "
        "explain, plot, train, translate.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in (lessons, plot, nmt, bench):
        group.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # argparse fills a nargs="*" positional only where it first meets it, so
    # `translate RUN --beam 5 "a sentence"` would leave the sentence over;
    # commands that declare `trailing_positionals` collect such leftovers.
    trailing = getattr(args, "trailing_positionals", None)
    if extra and trailing and not any(e.startswith("-") for e in extra):
        setattr(args, trailing, [*getattr(args, trailing), *extra])
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except (UsageError, ValueError, FileNotFoundError) as err:
        print(f"attnkit {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"attnkit {args.command}: interrupted", file=sys.stderr)
        return 130
