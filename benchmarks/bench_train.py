"""Translator training: attnkit's RNNTranslator against the tutorial-style trainer, at equal work.

Measured in one process, alternating rounds of training steps (E=128, D=256
per direction, batch 64, the same threads), every trainer on the *same*
length-bucketed batches (the same seed draws the same batch sequence):

- ``train_bahdanau_vs_tutorial`` (implementation speed): attnkit's
  previous-state timing + additive score against
  :mod:`benchmarks.tutorial_seq2seq`, the same model weight for weight (a test
  checks equal logits with copied weights); the table prints both sides'
  parameters and FLOPs per real token (``torch.utils.flop_counter``, forward +
  backward) so the equal work can be read off;
- ``train_luong_vs_bahdanau`` (architecture, reported separately): attnkit's
  current-state timing (scaled dot, no input feeding: one RNN pass and one
  batched attention product over the whole target) against its own Bahdanau
  timing -- a different model, so a different amount of work;
- ``train_fraction_of_matmul_peak``: useful FLOP/s of attnkit's Luong step
  (FLOPs scaled by the share of real, non-pad positions in the batch) over the
  fp32 matmul ceiling measured in the same run.

Throughput counts real (non-pad) tokens only. The reverse task repeats the
comparison on synthetic data and checks that the trainers reach a similar loss
after the same number of steps.
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

from attnkit.nmt.data.batching import Batch, Examples, bucket_batches, encode_examples, make_batch
from attnkit.nmt.data.corpus import bundled_multi30k
from attnkit.nmt.data.tokenizer import train_tokenizers
from attnkit.nmt.data.toy import toy_corpus
from attnkit.nmt.models.rnn import RNNConfig, RNNTranslator
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


def optimise(model: torch.nn.Module, loss_of: Callable[[Batch], torch.Tensor]):
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
    step = optimise(model, lambda batch: attnkit_loss(model, batch))
    return Trainer(f"attnkit {kind}", model, step, bucketed(examples, seed, batch_size))


def tutorial_loss(model: TutorialSeq2Seq, batch: Batch) -> torch.Tensor:
    return _cross_entropy(model(batch.src, batch.tgt_in), batch.tgt_out)


def attnkit_loss(model: RNNTranslator, batch: Batch) -> torch.Tensor:
    logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)  # (B, T, V)
    return _cross_entropy(logits, batch.tgt_out)


def tutorial_trainer(examples: Examples, vocab: tuple[int, int], seed: int) -> Trainer:
    """The tutorial loop on attnkit's own batches (bucketed, same seed = same batches)."""
    torch.manual_seed(seed)
    model = TutorialSeq2Seq(*vocab, emb=EMB, hidden=HIDDEN, dropout=DROPOUT).train()
    step = optimise(model, lambda batch: tutorial_loss(model, batch))
    return Trainer("tutorial", model, step, bucketed(examples, seed))


def throughput(trainers: list[Trainer], rounds: int, steps: int) -> dict[str, dict[str, float]]:
    """Alternate ``rounds`` of ``steps`` steps per trainer; each trainer's median round.

    The rates and the step time all come from one round, the median by time
    (the lower middle one for an even count), so they agree with each other.
    ``tgt_tok_step`` is the mean number of target tokens a timed step trained on,
    over every round: equal for trainers that draw the same batches.
    """
    for trainer in trainers:
        trainer.run(2)  # warm-up
    timed: dict[str, list[tuple[float, int, int]]] = {t.name: [] for t in trainers}
    for r in range(rounds):
        for trainer in trainers if r % 2 == 0 else reversed(trainers):
            seconds, tgt, both, _ = trainer.run(steps)
            timed[trainer.name].append((seconds, tgt, both))
    result = {}
    for name, runs in timed.items():
        seconds, tgt, both = sorted(runs)[(len(runs) - 1) // 2]
        result[name] = {
            "tgt_tok_s": tgt / seconds,
            "all_tok_s": both / seconds,
            "step_s": seconds / steps,
            "tgt_tok_step": sum(run[1] for run in runs) / (rounds * steps),
        }
    return result


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


def training_flops(trainer: Trainer, batch: Batch) -> int:
    """FLOPs of one forward + backward pass on ``batch`` (matmuls, RNN gates included)."""
    loss_of = tutorial_loss if isinstance(trainer.model, TutorialSeq2Seq) else attnkit_loss
    with FlopCounterMode(display=False) as counter:
        loss_of(trainer.model, batch).backward()
    trainer.model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def real_share(batch: Batch) -> float:
    """Real (non-pad) source+target positions over all positions of the padded batch."""
    real = batch.num_target_tokens + int(batch.src_lengths.sum())
    return real / (batch.src.numel() + batch.tgt_out.numel())


def work(trainer: Trainer, sample: list[Batch]) -> tuple[int, float]:
    """(parameters, MFLOP per real target token, fwd+bwd) of a trainer on sample batches."""
    params = sum(p.numel() for p in trainer.model.parameters())
    flops = sum(training_flops(trainer, b) for b in sample)
    return params, flops / sum(b.num_target_tokens for b in sample) / 1e6


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


def compare_trainers(data_name: str, examples, rounds: int, steps: int, trainers, table: Table):
    """Alternate the trainers on the same batches; one row each, ratio against the last one."""
    sample = [bucketed(examples, seed=0)() for _ in range(3)]
    sizes = {t.name: work(t, sample) for t in trainers}
    rates = throughput(trainers, rounds, steps)
    base = rates[trainers[-1].name]
    for name, rate in rates.items():
        params, mflop = sizes[name]
        table.add(
            data_name,
            name,
            params,
            mflop,
            rate["step_s"] * 1e3,
            rate["tgt_tok_s"],
            rate["all_tok_s"],
            rate["all_tok_s"] / base["all_tok_s"],
        )
    return rates


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


COLUMNS = [
    "data",
    "trainer",
    "params",
    "MFLOP/tgt token",
    "ms/step",
    "tgt tok/s",
    "src+tgt tok/s",
    "ratio",
]


def _pairs(examples, vocab):
    """(implementation pair, architecture pair) of fresh trainers; the baseline goes last."""
    implementation = [
        attnkit_trainer("bahdanau", examples, vocab, seed=0),
        tutorial_trainer(examples, vocab, seed=0),
    ]
    architecture = [
        attnkit_trainer("luong", examples, vocab, seed=0),
        attnkit_trainer("bahdanau", examples, vocab, seed=0),
    ]
    return implementation, architecture


def run(quick: bool) -> Result:
    torch.manual_seed(0)
    rounds, steps = (2, 2) if quick else (5, 10)
    speed = Table(
        "Implementation speed at equal work: the same model (Bahdanau timing, additive score; "
        "E=128, D=256, batch 64) on the same bucketed batches; ratio = attnkit/tutorial in "
        "source+target tokens/s",
        COLUMNS,
    )
    arch = Table(
        "Architecture, not implementation: attnkit Luong timing (one RNN pass + one batched "
        "attention) against attnkit Bahdanau timing (a step loop), same batches; ratio = "
        "Luong/Bahdanau",
        COLUMNS,
    )
    m30k, m30k_vocab = multi30k_examples(1500 if quick else 29000, 1000 if quick else 8000)
    rev, rev_vocab = reverse_examples(5000)
    found = {}
    for data_name, examples, vocab in (
        ("multi30k de-en", m30k, m30k_vocab),
        ("reverse", rev, rev_vocab),
    ):
        implementation, architecture = _pairs(examples, vocab)
        found[data_name, "impl"] = compare_trainers(
            data_name, examples, rounds, steps, implementation, speed
        )
        found[data_name, "arch"] = compare_trainers(
            data_name, examples, rounds, steps, architecture, arch
        )

    ceiling = matmul_ceiling()
    luong = attnkit_trainer("luong", m30k, m30k_vocab, seed=0)
    sample = [luong.batches() for _ in range(5)]  # the batches the throughput was measured on
    flops = statistics.mean(training_flops(luong, b) * real_share(b) for b in sample)
    tokens = statistics.mean(b.num_target_tokens for b in sample)
    achieved = flops / tokens * found["multi30k de-en", "arch"]["attnkit luong"]["tgt_tok_s"] / 1e9
    peak = Table(
        "attnkit Luong training against the matmul ceiling (Multi30k; useful FLOPs = counted "
        "FLOPs x share of real, non-pad positions)",
        [
            "useful FLOPs per target token (fwd+bwd)",
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

    def ratio(data_name: str, kind: str, name: str, base: str) -> float:
        rates = found[data_name, kind]
        return rates[name]["all_tok_s"] / rates[base]["all_tok_s"]

    return Result(
        # one epoch at batch 128; too long for --quick
        tables=[speed, arch, peak, losses] + ([] if quick else [memory(227)]),
        ratios={
            "train_bahdanau_vs_tutorial": ratio(
                "multi30k de-en", "impl", "attnkit bahdanau", "tutorial"
            ),
            "train_reverse_bahdanau_vs_tutorial": ratio(
                "reverse", "impl", "attnkit bahdanau", "tutorial"
            ),
            "train_luong_vs_bahdanau": ratio(
                "multi30k de-en", "arch", "attnkit luong", "attnkit bahdanau"
            ),
            "train_fraction_of_matmul_peak": achieved / ceiling,
        },
    )
