"""Timing and memory helpers shared by the benchmarks.

Two candidates are timed alternately in the same process after a warm-up, so
that drift in machine load hits both; medians over repeats are reported.
Peak memory on the CPU is measured in a fresh subprocess from the growth of
its resident set's high-water mark.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Comparison:
    """Median seconds per call of a candidate and its baseline."""

    candidate_s: float
    baseline_s: float

    @property
    def ratio(self) -> float:
        """candidate time / baseline time: below 1 means the candidate is faster."""
        return self.candidate_s / self.baseline_s

    @property
    def speedup(self) -> float:
        """baseline time / candidate time: above 1 means the candidate is faster."""
        return self.baseline_s / self.candidate_s


def time_once(fn: Callable[[], object], inner: int = 1) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner


def compare(
    candidate: Callable[[], object],
    baseline: Callable[[], object],
    *,
    repeats: int = 7,
    warmup: int = 2,
    inner: int = 1,
) -> Comparison:
    """Time ``candidate`` and ``baseline`` alternately; return their medians."""
    for _ in range(warmup):
        candidate()
        baseline()
    cand, base = [], []
    for i in range(repeats):
        # alternate which goes first, so neither always runs on a warmer cache
        order = ((cand, candidate), (base, baseline))
        for times, fn in order if i % 2 == 0 else reversed(order):
            times.append(time_once(fn, inner))
    return Comparison(statistics.median(cand), statistics.median(base))


def peak_memory_mb(setup: str, statement: str) -> float:
    """Extra peak resident memory (MiB) of running ``statement`` once after ``setup``.

    Both are Python source run in a fresh interpreter with this process's
    thread count. The kernel's high-water mark (``VmHWM``) is reset to the
    current resident size after ``setup`` (``/proc/self/clear_refs``; a forked
    child would otherwise inherit the parent's peak), so the figure is the
    growth caused by ``statement`` alone.
    """
    import torch

    code = "\n".join(
        [
            "import json, torch",
            "def status(key):",
            "    for line in open('/proc/self/status'):",
            "        if line.startswith(key):",
            "            return int(line.split()[1])",
            f"torch.set_num_threads({torch.get_num_threads()})",
            setup,
            "open('/proc/self/clear_refs', 'w').write('5')",
            "before = status('VmRSS:')",
            statement,
            "print(json.dumps((status('VmHWM:') - before) / 1024))",
        ]
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1]))
