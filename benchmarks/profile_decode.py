"""Where attnkit's search spends its time on a trained run, and what dynamic int8 would earn.

From the root of a clone (one thread)::

    OMP_NUM_THREADS=1 python -m benchmarks.profile_decode RUN [--beam 5] [--sentences 200] \
        [--early-stopping] [--precision bf16]
    OMP_NUM_THREADS=1 python -m benchmarks.profile_decode RUN --int8
    OMP_NUM_THREADS=1 python -m benchmarks.profile_decode RUN --bound

The first form translates the first ``--sentences`` sentences of the run's test
split under ``torch.profiler`` (after 20 to warm up; in bf16 inside the autocast
that ``attnkit translate --precision bf16`` enters) and prints the operators by
their own CPU time, with the total. ``--int8`` instead times the same sentences,
greedy and at ``--beam``, alternating the run's fp32 model with a copy whose
feed-forward layers are quantized by ``torch.ao.quantization.quantize_dynamic``
(int8 weights, activations quantized on the fly); three rounds, median
sentences/s and sacreBLEU of each. (The attention projections are left in fp32:
``MultiHeadAttention`` reads their weights' dtype, which a quantized layer does
not have; the tied output layer is a plain ``F.linear``.)

``--bound`` asks how far bf16 can speed the search up at all: it profiles the
same sentences in fp32 and in bf16 and prints, for each, the wall time and the
own time of the matrix products (``mm``, ``addmm``, ``bmm``, ``baddbmm``, the
fused attention kernel) and of the rest. Even bf16 products that took no time
would leave bf16's rest (the search's bookkeeping, the vocabulary-wide
log-softmax and top-k, casts): fp32's wall time over that rest is the largest
bf16/fp32 speed-up that faster products alone could give (Amdahl's law).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

WARMUP = 20
ROUNDS = 3


def _setup(run_dir: str, sentences: int, precision: str = "fp32"):
    from attnkit.nmt.data.corpus import load_split
    from attnkit.nmt.runs.loaded_run import load_run

    torch.set_num_threads(1)
    run = load_run(run_dir, precision=precision)
    test = load_split(run.config.data, "test")
    return run, test.src[:sentences], test.tgt[:sentences]


def _profiled_search(
    run_dir: str, beam: int, sentences: int, precision: str, early_stopping: bool = False
):
    """Profile one search over the sentences (after WARMUP of them): (profiler, wall seconds).

    The wall time is the search's alone: the clock runs inside the profiler, whose
    start (about a second the first time in a process) and event collection at
    exit would otherwise count, and only for whichever precision went first.
    """
    from attnkit.nmt.decoding.settings import SearchSettings
    from attnkit.nmt.decoding.translate import translate_lines

    run, lines, _ = _setup(run_dir, sentences, precision)
    settings = SearchSettings.from_config(
        run.config.decode, beam_size=beam, early_stopping=early_stopping
    )
    with run.precision.autocast():
        translate_lines(run, lines[:WARMUP], settings)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            translate_lines(run, lines, settings)
            wall = time.perf_counter() - start
    return prof, wall


def profile_search(
    run_dir: str, beam: int, sentences: int, early_stopping: bool = False, precision: str = "fp32"
) -> str:
    """The operator table of one search over the sentences."""
    prof, _ = _profiled_search(run_dir, beam, sentences, precision, early_stopping)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)


PRODUCTS = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
)


def products_bound(run_dir: str, beam: int, sentences: int) -> str:
    """Wall and matrix-product time of fp32 and bf16 search, and what faster products could give."""
    out, walls = [], {}
    for precision in ("fp32", "bf16"):
        prof, wall = _profiled_search(run_dir, beam, sentences, precision)
        events = prof.key_averages()
        products = sum(e.self_cpu_time_total for e in events if e.key in PRODUCTS) / 1e6
        walls[precision] = (wall, products)
        out.append(
            f"{precision}: wall {wall:.2f} s = matrix products {products:.2f} s "
            f"({products / wall:.0%}) + the rest {wall - products:.2f} s"
        )
    fp32_wall, (bf16_wall, bf16_products) = walls["fp32"][0], walls["bf16"]
    out.append(
        f"bf16/fp32 speed: {fp32_wall / bf16_wall:.2f} measured; "
        f"{fp32_wall / (bf16_wall - bf16_products):.2f} if bf16's products took no time"
    )
    return "\n".join(out)


def feed_forward_int8(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` whose feed-forward linear layers hold int8 weights."""
    names = {
        name
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in ("linear1", "linear2")
    }
    return torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), names, dtype=torch.qint8)


def compare_int8(run_dir: str, beam: int, sentences: int) -> str:
    """Sentences/s and BLEU of fp32 and feed-forward int8, alternated."""
    from attnkit.nmt.analysis.metrics import sacre_bleu
    from attnkit.nmt.decoding.translate import translate_lines

    run, lines, refs = _setup(run_dir, sentences)
    models = {"fp32": run.model, "int8 feed-forward": feed_forward_int8(run.model)}
    out = []
    for size in (1, beam):
        rates: dict[str, list[float]] = {name: [] for name in models}
        bleu = {}
        for _ in range(ROUNDS):
            for name, model in models.items():
                run.model = model
                start = time.perf_counter()
                found = translate_lines(run, lines, beam_size=size)
                rates[name].append(len(lines) / (time.perf_counter() - start))
                bleu[name] = sacre_bleu([t.text for t in found], refs).score
        base = statistics.median(rates["fp32"])
        for name in models:
            rate = statistics.median(rates[name])
            out.append(
                f"beam {size} {name:<18} {rate:6.1f} sentences/s  x{rate / base:.2f}  "
                f"BLEU {bleu[name]:.2f}"
            )
    return "\n".join(out)


def _check_modes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--int8`` and ``--bound`` are comparisons of their own (fp32 against int8; fp32
    against bf16, exact stopping): an option they would ignore is a usage error."""
    modes = [m for m in ("int8", "bound") if getattr(args, m)]
    if len(modes) > 1:
        parser.error("give --int8 or --bound, not both")
    ignored = [
        flag
        for flag, given in (
            ("--precision bf16", args.precision != "fp32"),
            ("--early-stopping", args.early_stopping),
        )
        if given
    ]
    if modes and ignored:
        parser.error(
            f"--{modes[0]} runs its own comparison; {' and '.join(ignored)} would be ignored"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run folder (the --int8 comparison: a Transformer's)")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--int8", action="store_true", help="fp32 against feed-forward int8")
    parser.add_argument("--early-stopping", action="store_true", help="decode.early_stopping")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--bound", action="store_true", help="bf16's largest speed-up (Amdahl)")
    args = parser.parse_args(argv)
    _check_modes(parser, args)
    if args.bound:
        print(products_bound(args.run, args.beam, args.sentences))
    elif args.int8:
        print(compare_int8(args.run, args.beam, args.sentences))
    else:
        print(
            profile_search(args.run, args.beam, args.sentences, args.early_stopping, args.precision)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
