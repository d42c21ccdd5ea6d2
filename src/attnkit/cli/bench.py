"""CLI command ``attnkit bench``: run the benchmarks in ``benchmarks/`` of a checkout."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from .errors import UsageError

# src/attnkit/cli/bench.py -> the repository root, where benchmarks/ lives
_CHECKOUT = Path(__file__).resolve().parents[3]


def _benchmarks_runner():
    """Import ``benchmarks.run`` from the source checkout this package lives in."""
    if not (_CHECKOUT / "benchmarks" / "run.py").exists():
        raise UsageError(
            "attnkit bench runs the benchmarks/ folder of a source checkout; "
            f"none found at {_CHECKOUT} (install attnkit with `pip install -e .` from a clone)"
        )
    if str(_CHECKOUT) not in sys.path:
        sys.path.insert(0, str(_CHECKOUT))
    return importlib.import_module("benchmarks.run")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="time attnkit against PyTorch kernels and baselines (ratios)",
        description="Time attnkit against its baselines in one process and print ratios.",
    )
    parser.add_argument("--quick", action="store_true", help="a short pass (about a minute)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the figures here")
    parser.add_argument("--only", nargs="+", metavar="SUITE", help="run only these suites")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    runner = _benchmarks_runner()
    unknown = set(args.only or ()) - set(runner.SUITES)
    if unknown:
        raise UsageError(
            f"--only: unknown suite(s) {', '.join(sorted(unknown))}; "
            f"choose from {', '.join(runner.SUITES)}"
        )
    return runner.main(args)
