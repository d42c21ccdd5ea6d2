"""The Transformer translator: training against torch.nn.Transformer, cached decoding, FLOP/s.

- ``transformer_train_vs_torch``: training throughput (target tokens/s) of
  attnkit's :class:`TransformerTranslator` / the same model on
  ``torch.nn.Transformer`` (:mod:`.torch_transformer`): identical sizes and
  parameter counts (printed), the same bucketed Multi30k batches, threads and
  optimiser; rounds alternate and medians are reported. Target >= 0.9.
- ``transformer_cached_decode_speedup``: greedy decoding of 50 output tokens
  with the per-layer KV caches (each step O(t)) against recomputing the whole
  prefix with the teacher-forced pass at every step; same model, same
  sentences. Target >= 3.
- ``transformer_train_flops_fraction``: useful training FLOP/s (FLOPs of one
  forward + backward pass counted by ``torch.utils.flop_counter``, scaled by
  the share of real, non-pad positions) over this machine's fp32 matmul
  ceiling measured in the same run.
"""

from __future__ import annotations

import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from attnkit.nmt.data.batching import Batch, Examples, make_batch, sorted_batches
from attnkit.nmt.models.transformer import TransformerConfig, TransformerTranslator
from attnkit.nmt.vocab_ids import BOS, EOS

from .bench_train import (
    Trainer,
    _cross_entropy,
    bucketed,
    matmul_ceiling,
    multi30k_examples,
    optimise,
    real_share,
    throughput,
)
from .report import Result, Table
from .torch_transformer import TorchTransformerTranslator

CONFIG = TransformerConfig(
    d_model=256, heads=4, encoder_layers=3, decoder_layers=3, ff_dim=1024, dropout=0.1,
    attention_dropout=0.0, share_embeddings=True,
)  # fmt: skip
BATCH, DECODE_STEPS, DECODE_SENTENCES = 64, 50, 32


def _trainers(examples: Examples, vocab: int) -> list[Trainer]:
    torch.manual_seed(0)
    ours = TransformerTranslator(CONFIG, vocab, vocab).train()
    torch.manual_seed(0)
    peer = TorchTransformerTranslator(CONFIG, vocab).train()

    def ours_loss(batch: Batch) -> torch.Tensor:
        logits, _ = ours(batch.src, batch.src_lengths, batch.tgt_in, need_weights=False)
        return _cross_entropy(logits, batch.tgt_out)

    def peer_loss(batch: Batch) -> torch.Tensor:
        return _cross_entropy(peer(batch.src, batch.src_lengths, batch.tgt_in), batch.tgt_out)

    return [
        Trainer(name, model, optimise(model, loss), bucketed(examples, 0, BATCH))
        for name, model, loss in (
            ("attnkit", ours, ours_loss),
            ("torch.nn.Transformer", peer, peer_loss),
        )
    ]


def _parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.inference_mode()
def _greedy(model: TransformerTranslator, batch: Batch, cached: bool) -> float:
    """Seconds to emit exactly DECODE_STEPS tokens (``</s>`` ruled out) for the batch."""
    start = time.perf_counter()
    tokens = torch.full_like(batch.src_lengths, BOS)[:, None]  # (B, 1)
    if cached:
        memory = model.encode(batch.src, batch.src_lengths)
        state = model.initial_state(memory)
    for _ in range(DECODE_STEPS):
        if cached:
            logits, _, state = model.step(tokens[:, -1], state, memory)  # (B, V)
        else:
            full, _ = model(batch.src, batch.src_lengths, tokens, need_weights=False)
            logits = full[:, -1]  # (B, V): the whole prefix recomputed
        logits[:, EOS] = -torch.inf
        tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)  # (B, t+1)
    return time.perf_counter() - start


def _useful_flop_s(model: TransformerTranslator, sample: list[Batch], tgt_tok_s: float) -> float:
    """Useful FLOP/s at ``tgt_tok_s``: counted FLOPs per real target token of ``sample``
    (batches of the stream the throughput was timed on, each count scaled by its share of
    real positions) times the target tokens a second, as bench_train counts its own."""
    flops = 0.0
    for batch in sample:
        with FlopCounterMode(display=False) as counter:
            logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in, need_weights=False)
            _cross_entropy(logits, batch.tgt_out).backward()
        model.zero_grad(set_to_none=True)
        flops += counter.get_total_flops() * real_share(batch)
    return flops / sum(b.num_target_tokens for b in sample) * tgt_tok_s


def run(quick: bool) -> Result:
    examples, (vocab, _) = multi30k_examples(3000 if quick else 8000, 4000)
    trainers = _trainers(examples, vocab)
    rates = throughput(trainers, rounds=2 if quick else 6, steps=3 if quick else 10)
    ours, peer = (rates[t.name] for t in trainers)
    train = Table(
        f"Transformer training on Multi30k, batches of {BATCH} sentences, bucketed "
        f"(D={CONFIG.d_model}, H={CONFIG.heads}, {CONFIG.encoder_layers}+"
        f"{CONFIG.decoder_layers} layers, F={CONFIG.ff_dim}, V={vocab})",
        ["implementation", "parameters", "target tok/step", "ms/step", "target tok/s", "ratio"],
    )
    for trainer in trainers:
        rate = rates[trainer.name]
        ratio = rate["tgt_tok_s"] / peer["tgt_tok_s"]
        train.add(trainer.name, f"{_parameters(trainer.model):,}", rate["tgt_tok_step"],
                  rate["step_s"] * 1e3, rate["tgt_tok_s"], ratio)  # fmt: skip

    model = trainers[0].model.eval()
    batch = make_batch(examples, sorted_batches(examples, DECODE_SENTENCES)[3])
    _greedy(model, batch, True)  # warm-up
    pairs = [(_greedy(model, batch, True), _greedy(model, batch, False)) for _ in range(3)]
    cached = sorted(c for c, _ in pairs)[1]
    recomputed = sorted(r for _, r in pairs)[1]
    decode = Table(
        f"Greedy decoding of {DECODE_STEPS} tokens for {DECODE_SENTENCES} sentences, "
        f"both ways with the same model ({_parameters(model):,} parameters; "
        "speedup = recompute / cached)",
        ["decoding", "seconds", "speedup"],
    )
    decode.add("KV caches, one position per step", cached, recomputed / cached)
    decode.add("recompute the prefix every step", recomputed, 1.0)

    model.train()
    ceiling = matmul_ceiling() * 1e9
    sample = [trainers[0].batches() for _ in range(5)]  # the bucketed batches timed
    useful = _useful_flop_s(model, sample, ours["tgt_tok_s"])
    flops = Table(
        "Transformer training FLOP/s (real tokens only) vs the fp32 matmul ceiling",
        ["useful GFLOP/s", "matmul ceiling GFLOP/s", "fraction"],
    )
    flops.add(useful / 1e9, ceiling / 1e9, useful / ceiling)
    return Result(
        [train, decode, flops],
        {
            "transformer_train_vs_torch": ours["tgt_tok_s"] / peer["tgt_tok_s"],
            "transformer_cached_decode_speedup": recomputed / cached,
            "transformer_train_flops_fraction": useful / ceiling,
        },
    )
