"""Resident memory of attnkit training at batch 128 on Multi30k, step by step.

Run in a fresh process (``python -m benchmarks.train_memory STEPS``) so the
figures are this training alone; prints one JSON object with the peak
resident size (``VmHWM``) and the largest resident size in each quarter of the
run. Bucketed batches differ in length, so single steps vary; a per-step leak
shows as quarters that keep rising, a healthy run as flat quarters.
"""

from __future__ import annotations

import json
import sys

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
    quarter = max(steps // 4, 1)
    return {
        "batch_size": BATCH,
        "steps": steps,
        "rss_before_training_mb": before,
        "peak_mb": status_mb("VmHWM:"),
        "quarter_max_rss_mb": [max(rss[i : i + quarter]) for i in range(0, steps, quarter)],
    }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]))))
