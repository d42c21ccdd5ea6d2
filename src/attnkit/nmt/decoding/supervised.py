"""The attention a guided-alignment run was trained on, read again after search.

A run trained with ``train.guided_alignment`` (Garg et al. 2019, sec. 4) taught
one thing to align: the mean of its supervised heads in one decoder layer, at
a timing (``shift`` 1: the step that *reads* target token ``t``; 0: the step
that predicts it) and, with ``full_context``, in a decoder pass without the
causal mask. Search returns another view (the alignment layer's head mean at
the step that predicts each token), which in such a run is mostly the heads
nobody trained. :func:`supervised_weights` force-decodes each finished output
the way the run was trained and returns that head mean instead, one row per
output token, so translate's text, JSON, heatmaps, page and the explorer show
the alignment the run learned (OpenNMT-py's ``report_align`` likewise re-runs
its alignment heads after search).

Row ``t`` (0-based output token ``y_t``) is the forced pass's row ``t + shift``
over the decoder inputs ``<s> y_0 .. y_{n-1}`` (the training input: the output
without ``</s>``); where that row does not exist (``</s>`` with ``shift`` 1,
which training never supervised), the last row is used, the step that
predicted the token.

Notation: ``B`` batch, ``L`` decoder layers, ``H`` heads, ``R`` forced rows,
``T`` output tokens (``</s>`` included when produced), ``S`` source tokens
(with ``</s>``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..data.batching import Examples, make_batch, sorted_batches
from ..models.translator import AttentionLayout, Translator
from ..vocab_ids import EOS
from .inference import inference
from .selection import HeadSelection

__all__ = ["SupervisedHeads", "supervised_weights"]


@dataclass(frozen=True)
class SupervisedHeads:
    """Where and how a guided run's alignment was supervised.

    Attributes:
        layer: the decoder layer, 0-based.
        heads: its supervised heads, 0-based (their mean was trained).
        shift: 1, the row reading the token; 0, the row predicting it.
        full_context: read in the decoder pass without the causal mask.
    """

    layer: int
    heads: tuple[int, ...]
    shift: int
    full_context: bool

    @classmethod
    def of_run(cls, run_config: object, layout: AttentionLayout) -> SupervisedHeads | None:
        """The run's supervised heads, or None for a run trained without guided alignment.

        Raises:
            ValueError: the configured layer or heads are not in this model.
        """
        guided = run_config.train.guided_alignment
        if guided is None:
            return None
        return cls(
            layer=guided.decoder_layer(layout.layers),
            heads=tuple(guided.head_indices(layout.heads)),
            shift=guided.shift,
            full_context=guided.full_context,
        )

    def caption(self) -> str:
        """``layer 1, head 0, shift 1`` (what a picture of these weights shows)."""
        heads = ", ".join(str(h) for h in self.heads)
        noun = "head" if len(self.heads) == 1 else "heads' mean"
        context = ", full context" if self.full_context else ""
        return f"layer {self.layer}, {noun} {heads}, shift {self.shift}{context}"


def supervised_weights(
    model: Translator,
    heads: SupervisedHeads,
    src_ids: Sequence[Sequence[int]],
    output_ids: Sequence[Sequence[int]],
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 32,
) -> list[Tensor]:
    """Each output's supervised attention, read by forced decoding (module docstring).

    Args:
        model: the guided run's translator (run in eval mode without gradients
            here; its mode is restored).
        heads: from :meth:`SupervisedHeads.of_run`.
        src_ids: per sentence, source ids without ``</s>``.
        output_ids: per sentence, the output ids, ``</s>`` included when produced;
            not empty.
        device: the model's device.
        batch_size: sentences per forced pass.

    Returns:
        per sentence, ``(T, S)`` float32 on the CPU: rows are the supervised heads'
        mean attention, each a distribution over the source tokens.

    Raises:
        ValueError: the two lists differ in length, an output is empty, or
            ``full_context`` for a model without decoder self-attention.
    """
    if len(src_ids) != len(output_ids):
        raise ValueError(
            f"src_ids has {len(src_ids)} sentences but output_ids has {len(output_ids)}"
        )
    if not all(output_ids):
        raise ValueError("output_ids holds an empty output: there is no row to read")
    limit = model.max_target_len
    inputs = [_decoder_inputs(out, limit) for out in output_ids]
    examples = Examples([list(s) for s in src_ids], inputs)
    results: list[Tensor] = [torch.empty(0)] * len(src_ids)
    selection = HeadSelection(heads.layer, heads.heads)
    with inference(model):
        for indices in sorted_batches(examples, batch_size):
            batch = make_batch(examples, indices).to(device)
            maps = model.attention_maps(
                batch.src, batch.src_lengths, batch.tgt_in, full_context=heads.full_context
            )
            mean = selection.pick(maps.cross).float().cpu()  # (B, R, S)
            for row, k in enumerate(indices):
                rows = len(inputs[k]) + 1  # <s> and the inputs
                read = [min(t + heads.shift, rows - 1) for t in range(len(output_ids[k]))]
                results[k] = mean[row, read, : len(src_ids[k]) + 1]  # (T, S)
    return results


def _decoder_inputs(output: Sequence[int], limit: int | None) -> list[int]:
    """The tokens after ``<s>`` in training's decoder input for this output: it without
    ``</s>``, cut to the model's position table (``limit`` steps, ``<s>`` included)."""
    words = list(output[:-1]) if output[-1] == EOS else list(output)
    return words if limit is None else words[: limit - 1]
