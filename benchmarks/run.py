"""Run the benchmarks, print their tables, and optionally write the figures as JSON.

From the root of a clone: ``python -m benchmarks.run [--quick] [--json FILE]
[--only SUITE ...]``, or ``attnkit bench`` with the same options (see
:mod:`attnkit.cli.bench`, which parses them). The benchmarks are not installed
with the package.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from attnkit.atomic import atomic_write_bytes

from . import (
    bench_attention,
    bench_compile,
    bench_contention,
    bench_data,
    bench_decode,
    bench_deploy,
    bench_distributed,
    bench_precision,
    bench_step_parts,
    bench_train,
    bench_transformer,
)
from .report import Result, Table

SUITES = {
    "attention": bench_attention,
    "compile": bench_compile,
    "train": bench_train,
    "decode": bench_decode,
    "transformer": bench_transformer,
    "distributed": bench_distributed,
    "contention": bench_contention,
    "data": bench_data,
    "deploy": bench_deploy,
    "precision": bench_precision,
    "step_parts": bench_step_parts,
}


def machine() -> dict[str, object]:
    cpu = platform.processor() or "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    flags: list[str] = []
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = line.split(":", 1)[1].split()
    isa = [f for f in ("avx512f", "avx2", "fma", "avx") if f in flags]
    return {
        "cpu": cpu,
        "isa": isa,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
    }


def run(quick: bool, only: Sequence[str] | None = None) -> dict:
    info = machine()
    print(f"## attnkit benchmarks ({'quick' if quick else 'full'})\n")
    print(", ".join(f"{k}: {v}" for k, v in info.items()))
    tables, ratios = [], {}
    for name, suite in SUITES.items():
        if only and name not in only:
            continue
        result: Result = suite.run(quick)
        for table in result.tables:
            print("\n" + table.to_markdown(), flush=True)
            tables.append(table.to_dict())
        ratios.update(result.ratios)
    summary = Table("ratios", ["key", "value"])
    for key, value in ratios.items():
        summary.add(key, value)
    print("\n" + summary.to_markdown())
    return {"machine": info, "quick": quick, "tables": tables, "ratios": ratios}


def main(args: argparse.Namespace) -> int:
    figures = run(args.quick, args.only)
    if args.json:
        atomic_write_bytes(args.json, (json.dumps(figures, indent=2) + "\n").encode())
    return 0


if __name__ == "__main__":  # python -m benchmarks.run: the options are attnkit bench's
    from attnkit.cli import main as cli_main

    raise SystemExit(cli_main(["bench", *sys.argv[1:]]))
