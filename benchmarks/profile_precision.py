"""The operators of one preset model's training step, fp32 and bf16, by their own CPU time.

From the root of a clone::

    OMP_NUM_THREADS=2 python -m benchmarks.profile_precision [transformer|multi30k|quick] [--shapes]

The model and batches are ``bench_precision``'s (synthetic, 13-19 tokens a
sentence); a step is its ``stepper``: the loss under the precision's autocast,
backward, clipping, Adam. After three warm steps, eight are profiled with
``torch.profiler`` in each precision; the table gives ms per step for the
whole step, for the matrix products (``mm``, ``addmm``, ``bmm``, ``baddbmm``)
and for the top operators, with calls per step. ``--shapes`` splits each
operator by its input shapes, to tell (say) the loss's casts from the
attention's.
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from attnkit.nmt.precision import resolve_precision

from .bench_precision import batches, models, stepper

PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
STEPS, TOP = 8, 20


def profile_steps(step, shapes: bool):
    for _ in range(3):
        step()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes) as prof:
        for _ in range(STEPS):
            step()
    return prof.key_averages(group_by_input_shape=shapes)


def report(precision: str, events, shapes: bool) -> None:
    per_step = [(e, e.self_cpu_time_total / 1e3 / STEPS) for e in events]
    total = sum(ms for _, ms in per_step)
    products = sum(ms for e, ms in per_step if e.key in PRODUCTS)
    print(f"## {precision}: {total:.0f} ms a step, matrix products {products:.0f} ms")
    for e, ms in sorted(per_step, key=lambda pair: -pair[1])[:TOP]:
        where = f"  {str(e.input_shapes)[:70]}" if shapes else ""
        print(f"{e.key:45s} {ms:7.1f} ms {e.count // STEPS:5d} calls{where}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_precision", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "preset",
        nargs="?",
        default="transformer",
        choices=("transformer", "multi30k", "quick", "quick_narrow"),
    )
    parser.add_argument("--shapes", action="store_true", help="split operators by input shapes")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _, model, vocab, sentences = models()[args.preset]
    data = batches(vocab, sentences)
    for precision in ("bf16", "fp32"):
        resolved = resolve_precision(precision, torch.device("cpu"))
        report(precision, profile_steps(stepper(model, resolved, data), args.shapes), args.shapes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
