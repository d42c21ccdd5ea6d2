"""Choosing where to read alignments from: the decoder layer and timing with the lowest dev AER.

Which Transformer layer's cross-attention aligns best is not the last one in
general: Garg et al. 2019 (sec. 5.3) find the penultimate layer of a 6-layer
decoder best, and Chen et al. 2020 (Shift-Att, sec. 3) pick the layer on
held-out alignments. :func:`choose_layer` does the same: every decoder layer
and both timings (shift 0/1) are scored on a *development* gold set, never on
the pairs being evaluated, and the lowest AER wins (ties: the lower layer,
then shift 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from ..data.tokenizer import Tokenizer
from ..models.translator import Translator
from .align import AlignOptions, GoldAlignment, align_words
from .metrics import alignment_error_rate

__all__ = ["LayerScore", "choose_layer"]


@dataclass(frozen=True)
class LayerScore:
    """One candidate's development AER: ``layer`` (0-based), ``shift`` and the score."""

    layer: int
    shift: int
    aer: float


def choose_layer(
    model: Translator,
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    dev_src: Sequence[Sequence[str]],
    dev_tgt: Sequence[Sequence[str]],
    dev_gold: GoldAlignment,
    options: AlignOptions = AlignOptions(),  # noqa: B008 (frozen, so safe as a default)
    *,
    shifts: Sequence[int] = (0, 1),
    batch_size: int = 32,
    device: torch.device | str = "cpu",
) -> tuple[AlignOptions, list[LayerScore]]:
    """``options`` with the layer and shift of the lowest AER on the development pairs.

    Args:
        model, src_tok, tgt_tok: the run.
        dev_src, dev_tgt: development sentence pairs, as words.
        dev_gold: their gold links (sure/possible).
        options: everything else (head, method, merge) stays as given.
        shifts: the timings tried.
        batch_size, device: as :func:`~attnkit.nmt.analysis.align.align_words`.

    Returns:
        ``(best options, every candidate's score)``, candidates in the order tried.

    Raises:
        ValueError: the development set is empty or its gold has another length.
    """
    if not dev_src or len(dev_gold.sure) != len(dev_src):
        raise ValueError(
            f"the development set has {len(dev_src)} pairs and {len(dev_gold.sure)} gold "
            "lines; it needs at least one pair and one gold line per pair"
        )
    scores = []
    for layer in range(model.attention_layout.layers):
        for shift in shifts:
            tried = replace(options, layer=layer, shift=shift)
            found = align_words(
                model, src_tok, tgt_tok, dev_src, dev_tgt, tried,
                batch_size=batch_size, device=device,
            )  # fmt: skip
            score = alignment_error_rate([a.links for a in found], dev_gold.sure, dev_gold.possible)
            scores.append(LayerScore(layer, shift, score.aer))
    best = min(scores, key=lambda s: (s.aer, s.layer, s.shift))
    return replace(options, layer=best.layer, shift=best.shift), scores
