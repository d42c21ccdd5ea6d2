"""Diagnosing a trained run's attention on a corpus: translate, then measure (``attnkit inspect``).

The sources are prepared as every command prepares them
(:func:`attnkit.nmt.decoding.translate.prepare_sources`: cleaned, tokenized,
truncated with a warning) and translated with the run's search settings; the
outputs are
then force-decoded in padded, length-sorted batches (the forced pass gives the
weights of step-by-step decoding, and the padding lets the padding-mass check
see real padded batches), and :func:`attnkit.nmt.analysis.diagnostics.summarize`
reduces the weights and texts to corpus figures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..data.batching import Examples, make_batch, sorted_batches
from ..data.text import is_blank
from ..decoding.inference import inference
from ..decoding.search import Hypothesis, decode_examples
from ..decoding.settings import SearchSettings
from ..decoding.translate import prepare_sources
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


def inspect_run(
    run: LoadedRun,
    sources: Sequence[str],
    references: Sequence[str],
    settings: SearchSettings | None = None,
    *,
    warn: Callable[[str], None] | None = None,
) -> Inspection:
    """Translate ``sources`` and measure the attention that produced the outputs.

    Args:
        run: a loaded run (:func:`attnkit.nmt.runs.loaded_run.load_run`).
        sources: source sentences; a blank one gets ``""`` and no attention figures.
        references: one reference per source.
        settings: search settings (default: the run's ``decode`` section).
        warn: hears of sources truncated to the model's input limit.

    Returns:
        the :class:`Inspection`.

    Raises:
        ValueError: ``sources`` and ``references`` differ in length or are empty, or
            every source is blank.
    """
    if len(sources) != len(references) or not sources:
        raise ValueError(
            f"sources has {len(sources)} lines and references {len(references)}; they must "
            "match and not be empty"
        )
    if all(is_blank(s) for s in sources):
        raise ValueError(f"sources has {len(sources)} lines, all blank: nothing to inspect")
    settings = settings or SearchSettings.from_config(run.config.decode)
    prepared = prepare_sources(run, sources, warn=warn)
    hyps = decode_examples(run.model, Examples(prepared.ids), settings, device=run.device)
    texts = [""] * len(sources)  # a blank source gets "", as translate gives it
    for i, h in zip(prepared.wanted, hyps, strict=True):
        texts[i] = run.tgt_tok.decode(h.tokens)
    batches = _forced_batches(run, prepared.ids, hyps, settings.batch_size)
    summary, cover = summarize(batches, texts, references)
    bleu = sacre_bleu(texts, references, tgt_lang=run.config.data.tgt_lang)
    return Inspection(summary, cover, bleu, chrf(texts, references), texts)


def _forced_batches(
    run: LoadedRun, sources: list[list[int]], hyps: list[Hypothesis], batch_size: int
):
    """``(weights (B, T, S), src_lengths (B,), tgt_lengths (B,), tgt_ended (B,))`` of each
    forced batch: the steps the search took, no more.

    A hypothesis cut at its length limit took no ``</s>`` step: its forced target
    leaves out its last token, whose step then comes last (a ``</s>`` step past
    the limit could need a position beyond a Transformer's ``max_positions``).
    """
    ended = torch.tensor([h.ended for h in hyps])  # (N,)
    examples = Examples(sources, [h.tokens if h.ended else h.tokens[:-1] for h in hyps])
    with inference(run.model):
        for indices in sorted_batches(examples, batch_size):
            batch = make_batch(examples, indices).to(run.device)
            _, weights = run.model(batch.src, batch.src_lengths, batch.tgt_in)  # (B, T, S)
            tgt_lengths = (batch.tgt_out != PAD).sum(dim=1)  # (B,), one per search step
            yield (
                weights.float().cpu(),
                batch.src_lengths.cpu(),
                tgt_lengths.cpu(),
                ended[batch.indices.cpu()],
            )
