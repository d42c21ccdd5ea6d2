"""Where a training step of attnkit's Bahdanau trainer spends its time, beside the tutorial's.

From the root of a clone (one thread)::

    OMP_NUM_THREADS=1 python -m benchmarks.profile_train_step [reverse|multi30k] [STEPS]

Both trainers of ``bench_train`` (the same model on the same batches) run
``STEPS`` warm steps (default 10) under ``torch.profiler``. For each, the table
gives the time per step, the part of it spent inside matrix products
(``mm``, ``addmm``, ``bmm``, their own time), and the other operators. Both
sides multiply the same matrices, so the last line bounds what any
reorganisation of attnkit's step can earn at equal work: the tutorial's step
time over attnkit's matrix-product time, the ratio attnkit would reach if
everything else in its step took no time at all. The top operators of
attnkit's step follow.
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from .bench_train import (
    Trainer,
    attnkit_trainer,
    multi30k_examples,
    reverse_examples,
    tutorial_trainer,
)

PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def profiled(trainer: Trainer, steps: int):
    """Warm ``trainer`` up, then profile ``steps`` of its steps on fixed batches."""
    batches = [trainer.batches() for _ in range(steps + 3)]
    for batch in batches[:3]:
        trainer.step(batch)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for batch in batches[3:]:
            trainer.step(batch)
    return prof.key_averages()


def split_ms(events, steps: int) -> tuple[float, float]:
    """``(ms per step in all operators, ms per step in matrix products)``, own time."""
    total = sum(e.self_cpu_time_total for e in events) / 1e3 / steps
    products = sum(e.self_cpu_time_total for e in events if e.key in PRODUCTS) / 1e3 / steps
    return total, products


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_train_step", description=__doc__.splitlines()[0]
    )
    parser.add_argument("data", nargs="?", default="reverse", choices=("reverse", "multi30k"))
    parser.add_argument("steps", type=int, nargs="?", default=10, help="profiled steps")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    data, steps = args.data, args.steps
    torch.set_num_threads(1)
    examples, vocab = reverse_examples(5000) if data == "reverse" else multi30k_examples(3000, 4000)
    trainers = [
        attnkit_trainer("bahdanau", examples, vocab, 0),
        tutorial_trainer(examples, vocab, 0),
    ]
    events = {t.name: profiled(t, steps) for t in trainers}
    print(f"{data}, one thread, {steps} profiled steps")
    print("| trainer | ms/step | in matrix products | other operators |\n|---|---|---|---|")
    split = {name: split_ms(ev, steps) for name, ev in events.items()}
    for name, (total, products) in split.items():
        print(f"| {name} | {total:.1f} | {products:.1f} | {total - products:.1f} |")
    ours, theirs = split["attnkit bahdanau"], split["tutorial"]
    print(f"\nattnkit/tutorial now: {theirs[0] / ours[0]:.2f}; at zero non-product time: "
          f"{theirs[0] / ours[1]:.2f}\n")  # fmt: skip
    print(events["attnkit bahdanau"].table(sort_by="self_cpu_time_total", row_limit=15))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
