"""Translator training: attnkit's RNNTranslator against the tutorial-style trainer.

Measured in one process, alternating rounds of training steps, at equal model
size (E=128, D=256 per direction, batch 64) on the same token ids:

- ``train_bahdanau_vs_tutorial``: previous-state timing + additive score (the
  tutorial's own architecture), attnkit tokens/s / tutorial tokens/s;
- ``train_luong_vs_tutorial``: current-state timing, scaled dot score, no input
  feeding (whole-target RNN pass, one batched attention product);
- ``train_fraction_of_matmul_peak``: FLOPs of attnkit's Luong training step
  (counted by ``torch.utils.flop_counter``, forward + backward) per second,
  over the fp32 matmul ceiling measured in the same run.

attnkit batches by length (its trainer's batching); the tutorial draws
random-order batches, as tutorials do. Throughput counts real (non-pad)
tokens only. The reverse task repeats the comparison on synthetic data and
checks that both reach a similar loss after the same number of steps.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from attnkit.nmt.batching import Batch, Examples, bucket_batches, encode_examples, make_batch
from attnkit.nmt.corpus import bundled_multi30k
from attnkit.nmt.rnn import RNNConfig, RNNTranslator
from attnkit.nmt.tokenizer import train_tokenizers
from attnkit.nmt.toy import toy_corpus
from attnkit.nmt.vocab_ids import PAD

from .report import Result, Table
from .tutorial_seq2seq import TutorialSeq2Seq

EMB, HIDDEN, BATCH, DROPOUT = 128, 256, 64, 0.1
ATTNKIT_SETTINGS = {
    "bahdanau": dict(query_timing="previous", score="additive"),
    "luong": dict(query_timing="current", score="scaled_dot", input_feeding=False),
}


@dataclass
class Trainer:
    """One model, its optimizer, and an endless stream of its own batches."""

    name: str
    model: torch.nn.Module
    step: Callable[[Batch], float]
    batches: Callable[[], Batch]

    def run(self, steps: int) -> tuple[float, int, int, float]:
        """Train ``steps`` steps; (seconds, target tokens, source+target tokens, last loss)."""
        tgt_tokens = all_tokens = 0
        loss = float("nan")
        start = time.perf_counter()
        for _ in range(steps):
            batch = self.batches()
            loss = self.step(batch)
            tgt_tokens += batch.num_target_tokens
            all_tokens += batch.num_target_tokens + int(batch.src_lengths.sum())
        return time.perf_counter() - start, tgt_tokens, all_tokens, loss


def _stream(examples: Examples, batch_lists: Callable[[], list[list[int]]]):
    batches: list[list[int]] = []

    def next_batch() -> Batch:
        if not batches:
            batches.extend(batch_lists())
        return make_batch(examples, batches.pop())

    return next_batch


def bucketed(examples: Examples, seed: int, batch_size: int = BATCH):
    generator = torch.Generator().manual_seed(seed)
    return _stream(examples, lambda: bucket_batches(examples, batch_size, generator=generator))


def random_order(examples: Examples, seed: int):
    generator = torch.Generator().manual_seed(seed)

    def epoch() -> list[list[int]]:
        order = torch.randperm(len(examples), generator=generator).tolist()
        return [order[i : i + BATCH] for i in range(0, len(order), BATCH)]

    return _stream(examples, epoch)


def _optimise(model: torch.nn.Module, loss_of: Callable[[Batch], torch.Tensor]):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(batch: Batch) -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return float(loss.detach())

    return step


def _cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=PAD)


def attnkit_model(kind: str, src_vocab: int, tgt_vocab: int) -> RNNTranslator:
    config = RNNConfig(embed_dim=EMB, hidden_size=HIDDEN, dropout=DROPOUT, **ATTNKIT_SETTINGS[kind])
    return RNNTranslator(config, src_vocab, tgt_vocab)


def attnkit_trainer(
    kind: str, examples: Examples, vocab: tuple[int, int], seed: int, batch_size: int = BATCH
) -> Trainer:
    torch.manual_seed(seed)
    model = attnkit_model(kind, *vocab).train()

    def loss_of(batch: Batch) -> torch.Tensor:
        logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)  # (B, T, V)
        return _cross_entropy(logits, batch.tgt_out)

    batches = bucketed(examples, seed, batch_size)
    return Trainer(f"attnkit {kind}", model, _optimise(model, loss_of), batches)


def tutorial_trainer(examples: Examples, vocab: tuple[int, int], seed: int) -> Trainer:
    torch.manual_seed(seed)
    model = TutorialSeq2Seq(*vocab, emb=EMB, hidden=HIDDEN, dropout=DROPOUT).train()

    def loss_of(batch: Batch) -> torch.Tensor:
        return _cross_entropy(model(batch.src, batch.tgt_in), batch.tgt_out)

    return Trainer("tutorial", model, _optimise(model, loss_of), random_order(examples, seed))


def throughput(trainers: list[Trainer], rounds: int, steps: int) -> dict[str, dict[str, float]]:
    """Alternate ``rounds`` of ``steps`` steps per trainer; median tokens/s per trainer."""
    for trainer in trainers:
        trainer.run(2)  # warm-up
    tgt_rates: dict[str, list[float]] = {t.name: [] for t in trainers}
    all_rates: dict[str, list[float]] = {t.name: [] for t in trainers}
    step_s: dict[str, list[float]] = {t.name: [] for t in trainers}
    for r in range(rounds):
        for trainer in trainers if r % 2 == 0 else reversed(trainers):
            seconds, tgt, both, _ = trainer.run(steps)
            tgt_rates[trainer.name].append(tgt / seconds)
            all_rates[trainer.name].append(both / seconds)
            step_s[trainer.name].append(seconds / steps)
    return {
        name: {
            "tgt_tok_s": statistics.median(tgt_rates[name]),
            "all_tok_s": statistics.median(all_rates[name]),
            "step_s": statistics.median(step_s[name]),
        }
        for name in tgt_rates
    }


def matmul_ceiling(n: int = 2048, repeats: int = 5) -> float:
    """Best-of-repeats fp32 GFLOP/s of an n x n matmul on this machine."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_seconds(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def training_flops(model: RNNTranslator, batch: Batch) -> int:
    """FLOPs of one forward + backward pass on ``batch`` (matmuls, RNN gates included)."""
    with FlopCounterMode(display=False) as counter:
        logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
        _cross_entropy(logits, batch.tgt_out).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def multi30k_examples(pairs: int, vocab_size: int) -> tuple[Examples, tuple[int, int]]:
    corpus = bundled_multi30k("train")
    src, tgt = corpus.src[:pairs], corpus.tgt[:pairs]
    src_tok, tgt_tok = train_tokenizers(
        src, tgt, kind="sentencepiece", vocab_size=vocab_size, joint=True, threads=2
    )
    examples, _ = encode_examples(src, tgt, src_tok, tgt_tok, max_src_len=50, max_tgt_len=50)
    return examples, (src_tok.vocab_size, tgt_tok.vocab_size)


def reverse_examples(pairs: int) -> tuple[Examples, tuple[int, int]]:
    corpus = toy_corpus("reverse", pairs, num_symbols=20, min_len=3, max_len=12, seed=0)
    words = sorted({w for line in corpus.src for w in line.split()})
    index = {w: i + 4 for i, w in enumerate(words)}  # ids 0-3 are the specials

    def ids(lines: list[str]) -> list[list[int]]:
        return [[index[w] for w in line.split()] for line in lines]

    vocab = len(words) + 4
    return Examples(ids(corpus.src), ids(corpus.tgt)), (vocab, vocab)


def compare_trainers(data_name: str, examples, vocab, rounds: int, steps: int, table: Table):
    trainers = [
        attnkit_trainer("bahdanau", examples, vocab, seed=0),
        attnkit_trainer("luong", examples, vocab, seed=0),
        tutorial_trainer(examples, vocab, seed=0),
    ]
    rates = throughput(trainers, rounds, steps)
    base = rates["tutorial"]
    for name, rate in rates.items():
        table.add(
            data_name,
            name,
            rate["step_s"] * 1e3,
            rate["tgt_tok_s"],
            rate["all_tok_s"],
            rate["all_tok_s"] / base["all_tok_s"],
        )
    return rates, trainers


def loss_after(steps: int, examples: Examples, vocab, table: Table) -> None:
    """Train fresh models for the same number of steps and report the final loss."""
    for trainer in (
        attnkit_trainer("bahdanau", examples, vocab, seed=1),
        attnkit_trainer("luong", examples, vocab, seed=1),
        tutorial_trainer(examples, vocab, seed=1),
    ):
        losses = [trainer.step(trainer.batches()) for _ in range(steps)]
        table.add(trainer.name, steps, statistics.mean(losses[-10:]))


def memory(steps: int) -> Table:
    """Peak and per-quarter resident memory of training at batch 128 (a fresh process)."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.train_memory", str(steps)],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    table = Table(
        f"Training memory, attnkit Luong, batch {figures['batch_size']}, Multi30k "
        f"({figures['steps']} steps, fresh process)",
        ["RSS before training MiB", "peak RSS MiB", "max RSS per quarter of the run MiB"],
    )
    quarters = ", ".join(f"{q:.0f}" for q in figures["quarter_max_rss_mb"])
    table.add(figures["rss_before_training_mb"], figures["peak_mb"], quarters)
    return table


def run(quick: bool) -> Result:
    torch.manual_seed(0)
    rounds, steps = (2, 2) if quick else (5, 10)
    speed = Table(
        "Training throughput at equal size (E=128, D=256, batch 64; ratio = attnkit/tutorial "
        "in source+target tokens/s)",
        ["data", "trainer", "ms/step", "tgt tok/s", "src+tgt tok/s", "ratio"],
    )
    m30k, m30k_vocab = multi30k_examples(1500 if quick else 29000, 1000 if quick else 8000)
    rates, trainers = compare_trainers("multi30k de-en", m30k, m30k_vocab, rounds, steps, speed)
    rev, rev_vocab = reverse_examples(5000)
    rev_rates, _ = compare_trainers("reverse", rev, rev_vocab, rounds, steps, speed)

    ceiling = matmul_ceiling()
    luong = attnkit_model("luong", *m30k_vocab).train()
    stream = bucketed(m30k, seed=0)  # the batches the throughput was measured on
    sample = [stream() for _ in range(5)]
    flops = statistics.mean(training_flops(luong, b) for b in sample)
    tokens = statistics.mean(b.num_target_tokens for b in sample)
    achieved = flops / tokens * rates["attnkit luong"]["tgt_tok_s"] / 1e9
    peak = Table(
        "attnkit Luong training against the matmul ceiling (Multi30k)",
        [
            "FLOPs per target token (fwd+bwd)",
            "achieved GFLOP/s",
            "matmul ceiling GFLOP/s",
            "fraction",
        ],
    )
    peak.add(flops / tokens, achieved, ceiling, achieved / ceiling)

    losses = Table(
        "Loss after the same number of steps (reverse task, seed 1)",
        ["trainer", "steps", "mean loss, last 10 steps"],
    )
    loss_after(15 if quick else 300, rev, rev_vocab, losses)

    tutorial = rates["tutorial"]["all_tok_s"]
    return Result(
        # one epoch at batch 128; too long for --quick
        tables=[speed, peak, losses] + ([] if quick else [memory(227)]),
        ratios={
            "train_bahdanau_vs_tutorial": rates["attnkit bahdanau"]["all_tok_s"] / tutorial,
            "train_luong_vs_tutorial": rates["attnkit luong"]["all_tok_s"] / tutorial,
            "train_reverse_bahdanau_vs_tutorial": rev_rates["attnkit bahdanau"]["all_tok_s"]
            / rev_rates["tutorial"]["all_tok_s"],
            "train_reverse_luong_vs_tutorial": rev_rates["attnkit luong"]["all_tok_s"]
            / rev_rates["tutorial"]["all_tok_s"],
            "train_fraction_of_matmul_peak": achieved / ceiling,
        },
    )
