"""Time to quality of the toy Transformer presets on one CPU thread.

``python -m benchmarks.toy_transformer [reverse|copy] [--out DIR]`` trains
``configs/<task>_transformer.yaml`` with ``--train.threads 1`` and prints the
training's wall and CPU time and the test split's exact match (every output
token right) and sacreBLEU with greedy search. Wall time counts other
processes on a shared machine; CPU time is this process's own.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", nargs="?", default="reverse", choices=("reverse", "copy"))
    parser.add_argument("--out", help="run folder (default: a temporary one)")
    args = parser.parse_args(argv)

    from attnkit.cli import main as attnkit
    from attnkit.nmt.analysis.evaluate import evaluate_run
    from attnkit.nmt.runs.loaded_run import load_run

    out = Path(args.out or tempfile.mkdtemp()) / f"{args.task}_transformer"
    config = CONFIGS / f"{args.task}_transformer.yaml"
    wall, cpu = time.perf_counter(), _cpu_seconds()
    argv = ["train", str(config), "--out", str(out), "--overwrite", "--train.threads", "1"]
    status = attnkit([*argv, "--no-progress"])
    wall, cpu = time.perf_counter() - wall, _cpu_seconds() - cpu
    if status:
        return status
    result = evaluate_run(load_run(out), "test", beam_size=1)
    pairs = list(zip(result.hypotheses, result.references, strict=True))
    exact = sum(h == r for h, r in pairs) / len(pairs)
    print(
        f"{args.task}_transformer: training {wall:.0f} s wall, {cpu:.0f} s CPU (1 thread); "
        f"test exact match {100 * exact:.1f}% of {len(pairs)}, sacreBLEU {result.bleu.score:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
