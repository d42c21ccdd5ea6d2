"""Where a training step of attnkit's Bahdanau trainer spends its time, beside the tutorial's.

From the root of a clone (one thread, the reverse task)::

    OMP_NUM_THREADS=1 python -m benchmarks.profile_train_step [STEPS]

prints the warm time per step of both trainers of ``bench_train`` (the same
model on the same batches), alternated, then a ``cProfile`` of ``STEPS``
attnkit steps (default 20) sorted by own time.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

import torch

from .bench_train import attnkit_trainer, reverse_examples, tutorial_trainer


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    steps = int(args[0]) if args else 20
    torch.set_num_threads(1)
    examples, vocab = reverse_examples(5000)
    ours = attnkit_trainer("bahdanau", examples, vocab, seed=0)
    tutorial = tutorial_trainer(examples, vocab, seed=0)
    for trainer in (ours, tutorial):
        trainer.run(3)  # warm-up
    for trainer in (ours, tutorial, ours, tutorial):
        start = time.perf_counter()
        trainer.run(steps)
        print(f"{trainer.name}: {(time.perf_counter() - start) / steps * 1e3:.1f} ms/step")
    profile = cProfile.Profile()
    profile.enable()
    ours.run(steps)
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
