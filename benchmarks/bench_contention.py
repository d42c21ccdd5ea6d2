"""Training next to another busy process: fixed threads against ``train.threads: auto``.

The quick preset's model (E=128, D=192, Luong timing, scaled dot, batch 64,
Multi30k) trains in windows of wall time; each window reports source+target
tokens/s. Settings, alternated within each round so that drift hits both:

- ``fixed``: every CPU this process may use (the old default, ``threads: 0``);
- ``auto``: :class:`attnkit.nmt.training.threads.ThreadGovernor`, created at the start
  of the window as a training run creates it, re-measuring every 2 s;

each first on an idle machine, then while a child process spins on one core
(``while True: pass``), as a browser tab, an editor's indexer or a second
experiment would. Ratios:

- ``contention_auto_busy_vs_idle``: auto under load / fixed idle (target >= 0.45);
- ``contention_fixed_busy_vs_idle``: the same for fixed threads (the collapse);
- ``contention_auto_idle_vs_fixed_idle``: what auto costs when idle (target >= 0.95).

Medians over rounds. Needs at least 2 threads (2 CPUs, ``OMP_NUM_THREADS`` unset or
>= 2); with fewer its table says why nothing was measured.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager, nullcontext

import torch

from attnkit.nmt.models.rnn import RNNConfig, RNNTranslator
from attnkit.nmt.training.threads import ThreadGovernor, default_threads

from .bench_train import (
    Trainer,
    attnkit_loss,
    bucketed,
    multi30k_examples,
    optimise,
)
from .report import Result, Table

SETTINGS = ("fixed", "auto")


def quick_preset_trainer(quick: bool) -> Trainer:
    examples, vocab = multi30k_examples(1500 if quick else 29000, 1000 if quick else 4000)
    torch.manual_seed(0)
    config = RNNConfig(
        embed_dim=128, hidden_size=192, dropout=0.1, score="scaled_dot", query_timing="current"
    )
    model = RNNTranslator(config, *vocab).train()
    step = optimise(model, lambda batch: attnkit_loss(model, batch))
    return Trainer("quick preset", model, step, bucketed(examples, seed=0))


@contextmanager
def busy_core():
    """A child process that keeps one core busy until the block ends."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # let it start spinning
        yield
    finally:
        child.kill()
        child.wait()


def window(trainer: Trainer, setting: str, seconds: float) -> float:
    """Train for ``seconds`` of wall time under ``setting``; source+target tokens/s."""
    governor = ThreadGovernor(0 if setting == "fixed" else "auto")
    tokens, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        batch = trainer.batches()
        trainer.step(batch)
        governor.tick()
        tokens += batch.num_target_tokens + int(batch.src_lengths.sum())
    return tokens / (time.perf_counter() - start)


def measure(trainer: Trainer, rounds: int, seconds: float) -> dict[tuple[str, str], float]:
    rates: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        order = SETTINGS if r % 2 == 0 else SETTINGS[::-1]
        for load in ("idle", "busy"):
            with busy_core() if load == "busy" else nullcontext():
                for setting in order:
                    rates.setdefault((setting, load), []).append(window(trainer, setting, seconds))
    return {key: statistics.median(values) for key, values in rates.items()}


def _skipped() -> Table:
    """Why nothing was measured: one thread (``OMP_NUM_THREADS=1``) or one CPU."""
    table = Table("contention", ["status"])
    set_by = os.environ.get("OMP_NUM_THREADS")
    why = f"OMP_NUM_THREADS={set_by}" if set_by else "its CPUs and torch's thread count"
    table.add(
        f"not measured: needs 2 threads to compare fixed with auto, and {why} gives "
        f"{default_threads()}; run it with OMP_NUM_THREADS unset on 2 or more cores"
    )
    return table


def run(quick: bool) -> Result:
    threads = torch.get_num_threads()
    if default_threads() < 2:
        return Result(tables=[_skipped()], ratios={})
    trainer = quick_preset_trainer(quick)
    trainer.run(3)  # warm-up
    try:
        rates = measure(trainer, rounds=1 if quick else 3, seconds=4.0 if quick else 15.0)
    finally:
        torch.set_num_threads(threads)
    idle = rates["fixed", "idle"]
    table = Table(
        f"Training throughput with one of {default_threads()} cores kept busy by another process "
        "(quick preset model; src+tgt tokens/s, median of rounds; share = / fixed idle)",
        ["threads setting", "machine", "src+tgt tok/s", "share of fixed idle"],
    )
    for (setting, load), rate in sorted(rates.items(), key=lambda kv: (kv[0][1] != "idle", kv[0])):
        table.add(setting, load, rate, rate / idle)
    return Result(
        tables=[table],
        ratios={
            "contention_auto_busy_vs_idle": rates["auto", "busy"] / idle,
            "contention_fixed_busy_vs_idle": rates["fixed", "busy"] / idle,
            "contention_auto_idle_vs_fixed_idle": rates["auto", "idle"] / idle,
        },
    )
