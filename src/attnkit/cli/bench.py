"""CLI command ``attnkit bench``: run the benchmarks of a source checkout.

The benchmarks are not part of the installed package: they live in the
``benchmarks/`` folder of a clone, beside ``src/``, and run from its root as
``python -m benchmarks.run [--quick] [--json FILE] [--only SUITE ...]``, which
parses its options here. ``attnkit bench`` with the same options is a
shortcut to them and finds them, in this order:

1. a ``benchmarks`` package already imported (``python -m benchmarks.run``, the tests);
2. the ``benchmarks/`` folder of the checkout this attnkit runs from
   (``src/attnkit/cli/bench.py`` -> the clone's root, an editable install),
   loaded by its path as the package ``benchmarks``; ``sys.path`` is left as it is.

Installed without them (from a wheel), ``attnkit bench`` says so in one line
and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from .errors import UsageError
from .outputs import check_output

# src/attnkit/cli/bench.py -> the repository root, where benchmarks/ lives in a checkout
_CHECKOUT = Path(__file__).resolve().parents[3]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="time attnkit against PyTorch kernels and baselines (ratios)",
        description="Time attnkit against its baselines in one process and print ratios. "
        "Needs a source checkout: the benchmarks/ folder is not installed with attnkit.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a short pass (about 11 minutes on 2 cores; --only to pick suites)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the figures here")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="SUITE",
        help="run only these suites (attention, compile, train, decode, transformer, "
        "distributed, contention, data, deploy, precision, step_parts)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    runner = _benchmarks_runner()
    unknown = set(args.only or ()) - set(runner.SUITES)
    if unknown:
        raise UsageError(
            f"--only: unknown suite(s) {', '.join(sorted(unknown))}; "
            f"choose from {', '.join(runner.SUITES)}"
        )
    if args.json is not None:
        _check_writable(args.json)
    return runner.main(args)


def _check_writable(path: Path) -> None:
    """Refuse a ``--json`` file that could not be written, before the benchmarks run.

    Raises:
        UsageError: ``path`` is a folder, or its folder does not exist, or it is one
            :func:`~attnkit.cli.outputs.check_output` refuses (``-``, a file in its path).
    """
    if path.is_dir():
        raise UsageError(f"--json: {path} is a folder; give a file name")
    if not path.parent.is_dir():
        raise UsageError(f"--json: no folder {path.parent} to write {path.name} in")
    check_output("--json", str(path))


def _benchmarks_runner() -> ModuleType:
    """``benchmarks.run``, from the package already imported or the checkout's folder.

    Raises:
        UsageError: neither is there (attnkit installed without its checkout).
    """
    if "benchmarks" not in sys.modules:
        folder = _CHECKOUT / "benchmarks"
        if not (folder / "run.py").is_file():
            raise UsageError(
                "the benchmarks are not installed with attnkit (they live in a clone's "
                "benchmarks/ folder); run `python -m benchmarks.run` from the root of a clone "
                "of attnkit"
            )
        _import_package("benchmarks", folder)
    return importlib.import_module("benchmarks.run")


def _import_package(name: str, folder: Path) -> None:
    """Import the package in ``folder`` as ``name`` by its path (no ``sys.path`` change)."""
    spec = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    try:
        spec.loader.exec_module(package)
    except BaseException:
        del sys.modules[name]
        raise
