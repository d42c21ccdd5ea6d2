"""Decoding: batched greedy and beam search against one sentence at a time.

A model at the benchmark size (E=128, D=256, Luong timing) is first trained
briefly on the reverse task, so that it emits <eos> and sentences finish at
different steps, as real translations do. The same sentences are then
decoded in batches of 64 sorted by length, and one by one, alternately, the
median of several repeats each (``timing.compare``):

- ``greedy_batched_vs_single``: one-at-a-time time / batched time (speedup);
- ``beam_batched_vs_single``: the same for beam search with K = 5.

When the README's main job has left a trained run in ``runs/quick`` (``make
run``), the suite also reports what a user sees: ``attnkit translate``'s
throughput in sentences/s on test2016 (1000 sentences, beam 5, the run's other
decode settings), one timing after a warm-up.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from attnkit.nmt.data.batching import Examples, make_batch, sorted_batches
from attnkit.nmt.data.corpus import load_split
from attnkit.nmt.decoding.search import beam_search, greedy_decode
from attnkit.nmt.decoding.translate import translate_lines
from attnkit.nmt.runs.loaded_run import load_run

from .bench_train import attnkit_trainer, reverse_examples
from .report import Result, Table
from .timing import compare

BATCH, BEAM = 64, 5
MAIN_RUN = Path("runs/quick")


def _decode_all(model, examples: Examples, batch_size: int, search) -> list:
    """Decode every example in batches sorted by length; hypotheses in input order."""
    out: list = [None] * len(examples)
    for indices in sorted_batches(examples, batch_size):
        batch = make_batch(examples, indices)
        for i, hyp in zip(indices, search(model, batch.src, batch.src_lengths), strict=True):
            out[i] = hyp
    return out


def run(quick: bool) -> Result:
    train, vocab = reverse_examples(5000)
    trainer = attnkit_trainer("luong", train, vocab, seed=0)
    for _ in range(40 if quick else 300):
        trainer.step(trainer.batches())
    model = trainer.model.eval()
    sentences = 32 if quick else 256
    test, _ = reverse_examples(5000 + sentences)
    test = Examples(test.src[-sentences:], test.tgt[-sentences:])
    table = Table(
        f"Decoding {sentences} reverse-task sentences with the same model on both sides "
        f"({sum(p.numel() for p in model.parameters()):,} parameters; "
        f"speedup = one at a time / batches of {BATCH})",
        ["search", "batched s (median)", "one at a time s (median)", "speedup", "exact match"],
    )
    ratios = {}
    searches = {
        "greedy": lambda m, s, l: greedy_decode(m, s, l),
        f"beam K={BEAM}": lambda m, s, l: beam_search(m, s, l, beam_size=BEAM),
    }
    for (name, search), key in zip(searches.items(), ("greedy", "beam"), strict=True):
        with torch.inference_mode():
            timed = compare(
                lambda search=search: _decode_all(model, test, BATCH, search),
                lambda search=search: _decode_all(model, test, 1, search),
                repeats=3 if quick else 5,
                warmup=1,
            )
            hyps = _decode_all(model, test, BATCH, search)
        exact = sum(h.tokens == t for h, t in zip(hyps, test.tgt, strict=True)) / sentences
        table.add(name, timed.candidate_s, timed.baseline_s, timed.speedup, exact)
        ratios[f"{key}_batched_vs_single"] = timed.speedup
    tables = [table]
    if (MAIN_RUN / "best.json").is_file():
        tables.append(translate_throughput(MAIN_RUN, 100 if quick else None))
    return Result(tables=tables, ratios=ratios)


def translate_throughput(run_dir: Path, limit: int | None) -> Table:
    """Sentences/s of ``translate_lines`` on test2016 (the first ``limit`` lines), beam 5."""
    run = load_run(run_dir)
    lines = load_split(run.config.data, "test").src[:limit]
    translate_lines(run, lines[:20], beam_size=BEAM)  # warm-up
    start = time.perf_counter()
    translate_lines(run, lines, beam_size=BEAM)
    seconds = time.perf_counter() - start
    table = Table(
        f"attnkit translate {run_dir}: test2016, beam {BEAM}, "
        f"decode batch {run.config.decode.batch_size}",
        ["sentences", "seconds", "sentences/s"],
    )
    table.add(len(lines), seconds, len(lines) / seconds)
    return table
