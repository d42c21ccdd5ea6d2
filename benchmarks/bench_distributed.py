"""Data-parallel training throughput: 2 processes × 1 thread against 1 process × 2 threads.

The same work on each side: attnkit's Luong RNNTranslator (E=128, D=256 per
direction, as in :mod:`.bench_train`), the same global batches of 64
Multi30k sentence pairs in the same order, fp32 on the CPU. Each side runs in
fresh processes (``python -m benchmarks.bench_distributed worker``), sides
alternating over repeats; a rank times its steps after a warm-up, between two
barriers. The data-parallel side does what ``attnkit train`` under torchrun
does per step (:mod:`attnkit.nmt.training.distributed`): its share ``batch[r::2]``,
the loss weighted to the global batch's mean, DDP's gradient all-reduce, the
loss all-reduce and the stop agreement. Tokens are real (non-pad) target tokens.

Ratios:

- ``distributed_2x1_vs_threads_1x2``: tokens/s of 2 processes × 1 thread over
  1 process × 2 threads (above 1: processes use the two cores better);
- ``distributed_scaling_efficiency``: tokens/s of 2 processes × 1 thread over
  twice the tokens/s of 1 process × 1 thread (1.0 = perfect scaling).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import attnkit
from attnkit.nmt.data.batching import Examples, bucket_batches, make_batch
from attnkit.nmt.training.distributed import Group, join
from attnkit.nmt.vocab_ids import PAD

from .bench_train import BATCH, EMB, HIDDEN, attnkit_model, multi30k_examples
from .report import Result, Table

SIDES = {"1 process × 1 thread": (1, 1), "1 process × 2 threads": (1, 2)}
SIDES["2 processes × 1 thread"] = (2, 1)


def run(quick: bool) -> Result:
    steps, warmup, repeats = (8, 2, 1) if quick else (30, 4, 3)
    examples, vocab = multi30k_examples(2000 if quick else 6000, 4000)
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "examples.json"
        data.write_text(json.dumps({"src": examples.src, "tgt": examples.tgt, "vocab": vocab}))
        rates: dict[str, list[float]] = {side: [] for side in SIDES}
        for r in range(repeats):
            for side in SIDES if r % 2 == 0 else reversed(SIDES):
                rates[side].append(_measure(data, *SIDES[side], steps, warmup))
    median = {side: statistics.median(values) for side, values in rates.items()}
    table = Table(
        f"data-parallel training, Luong RNN E={EMB} D={HIDDEN}, global batch {BATCH} "
        f"Multi30k pairs, {steps} steps after {warmup}, median of {repeats}",
        ["side", "processes × threads", "tgt tok/s"],
    )
    for side, (world, threads) in SIDES.items():
        table.add(side, f"{world} × {threads}", median[side])
    two = median["2 processes × 1 thread"]
    ratios = {
        "distributed_2x1_vs_threads_1x2": two / median["1 process × 2 threads"],
        "distributed_scaling_efficiency": two / (2 * median["1 process × 1 thread"]),
    }
    return Result([table], ratios)


def _measure(data: Path, world: int, threads: int, steps: int, warmup: int) -> float:
    """Target tokens/s of one side, from its rank 0's report."""
    root = Path(attnkit.__file__).resolve().parents[1]  # src/
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root.parent)])}
    env.update(OMP_NUM_THREADS=str(threads), GLOO_SOCKET_IFNAME="lo")
    if world > 1:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(world))
    command = [sys.executable, "-m", "benchmarks.bench_distributed", "worker", str(data)]
    command += [str(threads), str(steps), str(warmup)]
    ranks = [
        subprocess.Popen(
            command,
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(world)},
            cwd=root.parent,
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]
    outputs = [rank.communicate(timeout=600)[0] for rank in ranks]
    if any(rank.returncode for rank in ranks):
        raise RuntimeError(f"a benchmark worker failed: {[rank.returncode for rank in ranks]}")
    report = json.loads(outputs[0].strip().splitlines()[-1])
    return report["tokens"] / report["seconds"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(data: Path, threads: int, steps: int, warmup: int) -> None:
    """One rank: train ``warmup + steps`` global batches; rank 0 prints seconds and tokens."""
    torch.set_num_threads(threads)
    raw = json.loads(data.read_text())
    examples = Examples(raw["src"], raw["tgt"])
    with join(torch.device("cpu")) as group:
        torch.manual_seed(0)
        model = attnkit_model("luong", *raw["vocab"]).train()
        step = _stepper(group, model, examples)
        batches = bucket_batches(examples, BATCH, generator=torch.Generator().manual_seed(0))
        for indices in batches[:warmup]:
            step(indices)
        group.barrier()
        start, tokens = time.perf_counter(), 0
        for indices in batches[warmup : warmup + steps]:
            tokens += step(indices)
        group.barrier()
        if group.is_main:
            print(json.dumps({"seconds": time.perf_counter() - start, "tokens": tokens}))


def _stepper(group: Group, model: torch.nn.Module, examples: Examples):
    forward = group.wrap(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(indices: list[int]) -> int:
        """One optimizer step on this rank's share; the global batch's target tokens."""
        total = sum(len(examples.tgt[i]) + 1 for i in indices)
        batch = make_batch(examples, group.share(indices))
        logits, _ = forward(batch.src, batch.src_lengths, batch.tgt_in)  # (B/W, T, V)
        loss = F.cross_entropy(
            logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD, reduction="sum"
        )
        loss = loss * (group.world_size / total)
        optimizer.zero_grad(set_to_none=True)
        group.mean(loss.item())  # the reported loss, as attnkit train all-reduces it
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        group.any(False, False)  # the stop agreement after each step
        return total

    return step


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    path, threads, steps, warmup = sys.argv[2:6]
    worker(Path(path), int(threads), int(steps), int(warmup))
