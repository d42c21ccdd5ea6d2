"""Resident memory of attnkit training at batch 128 on Multi30k, step by step.

Run in a fresh process (``python -m benchmarks.train_memory STEPS``) so the
figures are this training alone; prints one JSON object with the peak
resident size (``VmHWM``) and the largest resident size in each quarter of the
run. Bucketed batches differ in length, so single steps vary; a per-step leak
shows as quarters that keep rising, a healthy run as flat quarters.
"""

from __future__ import annotations

import argparse
import itertools
import json

BATCH = 128


def status_mb(key: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    raise KeyError(key)


def main(steps: int) -> dict:
    from .bench_train import attnkit_trainer, multi30k_examples

    examples, vocab = multi30k_examples(29000, 8000)
    trainer = attnkit_trainer("luong", examples, vocab, seed=0, batch_size=BATCH)
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # reset the peak: count training, not the tokenizer training before it
    before = status_mb("VmRSS:")
    rss = []
    for _ in range(steps):
        trainer.step(trainer.batches())
        rss.append(status_mb("VmRSS:"))
    return {
        "batch_size": BATCH,
        "steps": steps,
        "rss_before_training_mb": before,
        "peak_mb": status_mb("VmHWM:"),
        "quarter_max_rss_mb": quarter_maxima(rss),
    }


def quarter_maxima(rss: list[float]) -> list[float]:
    """The largest value in each quarter of ``rss`` (four runs of steps whose lengths
    differ by one at most; as many as there are steps when there are fewer than four)."""
    parts = min(4, len(rss))
    bounds = [len(rss) * i // parts for i in range(parts + 1)]
    return [max(rss[start:end]) for start, end in itertools.pairwise(bounds)]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.train_memory", description=__doc__.splitlines()[0]
    )
    parser.add_argument("steps", type=int, help="training steps to watch (the train suite: 227)")
    return parser


if __name__ == "__main__":
    print(json.dumps(main(_parser().parse_args().steps)))
