"""Choosing where to read alignments from: the layer, head and timing with the lowest dev AER.

Which Transformer layer's cross-attention aligns best is not the last one in
general: Garg et al. 2019 (sec. 5.3) find the penultimate layer of a 6-layer
decoder best, and Chen et al. 2020 (Shift-Att, sec. 3) pick the layer on
held-out alignments. :func:`choose_layer` does the same: every decoder layer,
its heads' mean and each head alone, and both timings (shift 0/1) are scored
on a *development* gold set, never on the pairs being evaluated, and the
lowest AER wins (ties: the lower layer, the mean before a single head, then
shift 0). Single heads matter for a model trained with guided alignment
(Garg et al. 2019 supervise one head; the others stay free) and for heads that
specialise in alignment by themselves.
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
    """One candidate's development AER: ``layer`` (0-based), ``head`` (0-based, or
    ``"mean"`` over the layer's heads), ``shift`` and the score."""

    layer: int
    head: int | str
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
    """``options`` with the layer, head and shift of the lowest AER on the development pairs.

    Args:
        model, src_tok, tgt_tok: the run.
        dev_src, dev_tgt: development sentence pairs, as words.
        dev_gold: their gold links (sure/possible).
        options: everything else (method, threshold, merge) stays as given.
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
    layout = model.attention_layout
    heads: list[int | str] = ["mean", *range(layout.heads)] if layout.heads > 1 else ["mean"]
    scores = []
    for layer in range(layout.layers):
        for head in heads:
            for shift in shifts:
                tried = replace(options, layer=layer, head=head, shift=shift)
                found = align_words(
                    model, src_tok, tgt_tok, dev_src, dev_tgt, tried,
                    batch_size=batch_size, device=device,
                )  # fmt: skip
                links = [a.links for a in found]
                score = alignment_error_rate(links, dev_gold.sure, dev_gold.possible)
                scores.append(LayerScore(layer, head, shift, score.aer))
    best = min(scores, key=lambda s: (s.aer, s.layer, s.head != "mean", s.shift))
    return replace(options, layer=best.layer, head=best.head, shift=best.shift), scores
