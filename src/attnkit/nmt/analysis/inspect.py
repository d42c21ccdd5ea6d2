"""Diagnosing a trained run's attention on a corpus: translate, then measure (``attnkit inspect``).

The sources are translated with the run's search settings; the outputs are
then force-decoded in padded, length-sorted batches (the forced pass gives the
weights of step-by-step decoding, and the padding lets the padding-mass check
see real padded batches), and :func:`attnkit.nmt.analysis.diagnostics.summarize`
reduces the weights and texts to corpus figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..data.batching import Examples, make_batch, sorted_batches
from ..decoding.translate import decode_ids, input_limit
from ..runs.loaded_run import LoadedRun
from ..vocab_ids import PAD
from .diagnostics import Summary, summarize
from .metrics import Score, chrf, sacre_bleu

__all__ = ["Inspection", "inspect_run"]


@dataclass
class Inspection:
    """What :func:`inspect_run` found.

    Attributes:
        summary: the corpus figures.
        coverage: every source word's coverage ``(N,)`` float (``</s>`` left out).
        bleu: sacreBLEU of the outputs against the references.
        chrf: chrF of the same.
        hypotheses: the outputs, one per source.
    """

    summary: Summary
    coverage: Tensor
    bleu: Score
    chrf: Score
    hypotheses: list[str]


@torch.no_grad()
def inspect_run(
    run: LoadedRun,
    sources: Sequence[str],
    references: Sequence[str],
    *,
    decode: DecodeConfig | None = None,
) -> Inspection:
    """Translate ``sources`` and measure the attention that produced the outputs.

    Args:
        run: a loaded run (:func:`attnkit.nmt.runs.loaded_run.load_run`).
        sources: source sentences (blank ones are translated to ``""``).
        references: one reference per source.
        decode: search settings (default: the run's ``decode`` section).

    Returns:
        the :class:`Inspection`.

    Raises:
        ValueError: ``sources`` and ``references`` differ in length or are empty.
    """
    if len(sources) != len(references) or not sources:
        raise ValueError(
            f"sources has {len(sources)} lines and references {len(references)}; they must "
            "match and not be empty"
        )
    decode = decode or run.config.decode
    limit = input_limit(run.config)
    src_ids = [run.src_tok.encode(line.strip())[:limit] for line in sources]
    hyps = decode_ids(run, src_ids, decode)
    texts = [run.tgt_tok.decode(h.tokens) for h in hyps]
    forced = Examples(src_ids, [h.tokens for h in hyps])
    summary, cover = summarize(_forced_batches(run, forced, decode.batch_size), texts, references)
    return Inspection(summary, cover, sacre_bleu(texts, references), chrf(texts, references), texts)


def _forced_batches(run: LoadedRun, examples: Examples, batch_size: int):
    """``(weights (B, T, S), src_lengths (B,), tgt_lengths (B,))`` of each forced batch."""
    was_training = run.model.training
    run.model.eval()
    try:
        for indices in sorted_batches(examples, batch_size):
            batch = make_batch(examples, indices).to(run.device)
            _, weights = run.model(batch.src, batch.src_lengths, batch.tgt_in)  # (B, T, S)
            tgt_lengths = (batch.tgt_out != PAD).sum(dim=1)  # (B,), </s> step included
            yield weights.float().cpu(), batch.src_lengths.cpu(), tgt_lengths.cpu()
    finally:
        run.model.train(was_training)
