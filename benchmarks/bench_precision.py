"""Training steps in bf16 mixed precision against fp32: the same model, batches and threads.

``python -m benchmarks.bench_precision`` (or ``attnkit bench --only precision``).
For each model -- the Transformer preset's (configs/transformer.yaml: D=256,
H=4, 3+3 layers, F=1024, V=8000, 128 sentences a batch) and the quick RNN's
(configs/quick.yaml: E=160, D=256, scaled dot, Luong timing, V=4000, 128 a
batch), the multi30k RNN's (configs/multi30k.yaml: E=256, D=384, V=8000, 96 a
batch), and the quick preset until 2026-12-06 (E=128, D=192, 64 a batch; its
milliseconds per sentence beside today's say what the wider preset costs) --
one set of weights is trained step by step in fp32 and in bf16,
alternated after a warm-up (:func:`benchmarks.timing.compare`), on the same
synthetic batches (16 +- 3 tokens a sentence, like Multi30k). A step is what
``train_step`` does: :func:`attnkit.nmt.training.objective.token_loss` under
:meth:`attnkit.nmt.precision.Precision.autocast`, backward, clipping, Adam.
Both sides are one model, so parameters and tokens per batch are equal; they
are printed beside the ratio, with the CPU's name and its bf16 flags.

``python -m benchmarks.bench_precision --translate RUN [RUN ...]`` adds translation
speed: each run's test split (test2016 for Multi30k), beam 5, sentences/s of fp32
and bf16 decoding, alternated in fresh processes (``bench_deploy``'s worker: load,
warm up on 20 sentences, translate every line), medians of 3.

On a CPU without ``avx512_bf16``/``amx_bf16`` bf16 is emulated, 3 to 50 times
slower, and ``train.precision: auto`` picks fp32: the suite then prints one row
saying bf16 is not supported here and times nothing (an hour of emulated steps
would measure only the emulation); ``--emulated`` times it anyway.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from attnkit.nmt.config import TrainConfig
from attnkit.nmt.data.batching import Examples, make_batch
from attnkit.nmt.models.rnn import RNNConfig, RNNTranslator
from attnkit.nmt.models.transformer import TransformerConfig, TransformerTranslator
from attnkit.nmt.precision import cpu_bf16_flag, resolve_precision
from attnkit.nmt.training.objective import token_loss
from attnkit.nmt.training.optimizer import adam
from attnkit.nmt.vocab_ids import NUM_SPECIAL

from .bench_deploy import _measure
from .report import Result, Table
from .timing import compare

CPU = torch.device("cpu")


def models() -> dict[str, tuple[str, torch.nn.Module, int, int]]:
    """preset key -> (label, model in training mode, vocabulary, sentences a batch)."""
    torch.manual_seed(0)
    transformer = TransformerConfig(
        d_model=256, heads=4, encoder_layers=3, decoder_layers=3, ff_dim=1024,
        dropout=0.2, attention_dropout=0.1, norm_first=True, share_embeddings=True,
    )  # fmt: skip

    def rnn(embed: int, hidden: int, dropout: float, vocab: int) -> RNNTranslator:
        config = RNNConfig(embed_dim=embed, hidden_size=hidden, dropout=dropout,
                           score="scaled_dot", query_timing="current")  # fmt: skip
        return RNNTranslator(config, vocab, vocab)

    return {
        "transformer": ("transformer (configs/transformer.yaml)",
                        TransformerTranslator(transformer, 8000, 8000), 8000, 128),
        "multi30k": ("rnn (configs/multi30k.yaml)", rnn(256, 384, 0.3, 8000), 8000, 96),
        "quick": ("rnn (configs/quick.yaml)", rnn(160, 256, 0.1, 4000), 4000, 128),
        # the quick preset until 2026-12-06, to weigh the two per sentence
        "quick_narrow": ("rnn (quick until 2026-12-06: E=128, D=192, 64 a batch)",
                         rnn(128, 192, 0.1, 4000), 4000, 64),
    }  # fmt: skip


def batches(vocab: int, sentences: int, count: int = 4):
    """``count`` synthetic batches of ``sentences`` pairs, 13-19 tokens a sentence, seeded."""
    g = torch.Generator().manual_seed(1)

    def sentence() -> list[int]:
        length = int(torch.randint(13, 20, (1,), generator=g))
        return torch.randint(NUM_SPECIAL, vocab, (length,), generator=g).tolist()

    out = []
    for _ in range(count):
        pairs = Examples(
            [sentence() for _ in range(sentences)], [sentence() for _ in range(sentences)]
        )
        out.append(make_batch(pairs, list(range(sentences))))
    return out


def stepper(model: torch.nn.Module, precision, data):
    """One training step per call, cycling through ``data``."""
    optimizer = adam(model.parameters(), TrainConfig(lr=1e-4))  # the trainer's optimiser
    state = {"i": 0}

    def step() -> None:
        batch = data[state["i"] % len(data)]
        state["i"] += 1
        with precision.autocast():
            loss = token_loss(model, batch, 0.1, 1.0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def unsupported() -> Table | None:
    """The one-row table a CPU without avx512_bf16/amx_bf16 gets; None where bf16 is fast."""
    if cpu_bf16_flag() is not None:
        return None
    table = Table(
        f"bf16 mixed precision: not supported on this CPU ({cpu_name()})",
        ["bf16 flag", "auto picks", "measured"],
    )
    why = resolve_precision("auto", CPU).reason
    table.add("none (no avx512_bf16/amx_bf16)", why, "nothing: bf16 is emulated here (--emulated)")
    return table


def run(quick: bool, emulated: bool = False) -> Result:
    """The bf16/fp32 table; on a CPU that emulates bf16, :func:`unsupported`'s unless
    ``emulated``."""
    if not emulated and (note := unsupported()) is not None:
        return Result([note], {})
    flag = cpu_bf16_flag()
    auto = resolve_precision("auto", CPU)
    fp32, bf16 = resolve_precision("fp32", CPU), resolve_precision("bf16", CPU)
    table = Table(
        f"Training step, bf16 autocast vs fp32, {torch.get_num_threads()} thread(s); "
        f"{cpu_name()}; bf16 flag: {flag or 'none (no avx512_bf16/amx_bf16)'}; "
        f"auto picks {auto.reason}",
        [
            "model",
            "parameters",
            "tokens/batch",
            "fp32 ms/step",
            "bf16 ms/step",
            "fp32 ms/sentence",
            "bf16 ms/sentence",
            "bf16/fp32",
        ],
    )
    ratios = {}
    for preset, (name, model, vocab, sentences) in models().items():
        data = batches(vocab, sentences)
        tokens = sum(b.num_target_tokens + int(b.src_lengths.sum()) for b in data) // len(data)
        timing = compare(
            stepper(model, bf16, data),
            stepper(model, fp32, data),
            repeats=3 if quick else 7,
            warmup=1 if quick else 2,
        )
        params = sum(p.numel() for p in model.parameters())
        fp32_ms, bf16_ms = timing.baseline_s * 1e3, timing.candidate_s * 1e3
        table.add(name, params, tokens, fp32_ms, bf16_ms, fp32_ms / sentences,
                  bf16_ms / sentences, timing.ratio)  # fmt: skip
        ratios[f"precision_bf16_over_fp32_time_{preset}"] = timing.ratio
    return Result([table], ratios)


def translate_rates(runs: list[Path], beam: int = 5, repeats: int = 3) -> Table:
    """Sentences/s of fp32 and bf16 decoding of each run's test split, alternated."""
    from attnkit.nmt.config import RunConfig
    from attnkit.nmt.data.corpus import load_split
    from attnkit.nmt.data.text import is_blank

    threads = torch.get_num_threads()
    table = Table(
        f"Translation, beam {beam}, {threads} thread(s), medians of {repeats} alternated "
        f"fresh processes; {cpu_name()}",
        ["run", "sentences", "fp32 sentences/s", "bf16 sentences/s", "bf16/fp32 (speed)"],
    )
    for run_dir in runs:
        config = RunConfig.load(run_dir / "config.yaml")
        lines = [s for s in load_split(config.data, "test").src if not is_blank(s)]
        lines_file = run_dir / ".bench_precision_lines.json"
        lines_file.write_text(json.dumps(lines))
        rates: dict[str, list[float]] = {"fp32": [], "bf16": []}
        try:
            for _ in range(repeats):
                for kind, found in rates.items():
                    measured = _measure("attnkit", kind, run_dir, None, lines_file, beam, threads)
                    found.append(measured["sentences_per_s"])
        finally:
            lines_file.unlink(missing_ok=True)
        fp32, bf16 = (statistics.median(rates[k]) for k in ("fp32", "bf16"))
        table.add(run_dir.name, len(lines), round(fp32, 1), round(bf16, 1), round(bf16 / fp32, 2))
    return table


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_precision",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument(
        "--emulated",
        action="store_true",
        help="time bf16 even on a CPU without avx512_bf16/amx_bf16 (emulated: many times slower)",
    )
    parser.add_argument(
        "--translate",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="time fp32 and bf16 translation of these runs' test splits instead",
    )
    args = parser.parse_args(argv)
    if args.translate:
        missing = [str(r) for r in args.translate if not (r / "config.yaml").is_file()]
        if missing:
            parser.error(f"--translate: not a run folder (no config.yaml): {', '.join(missing)}")
        print(translate_rates(args.translate).to_markdown())
        return 0
    for table in run(args.quick, emulated=args.emulated).tables:
        print(table.to_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
