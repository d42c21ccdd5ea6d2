"""Every attention view of one translation: cross-, encoder self- and decoder self-attention.

Search returns one alignment view per translation (the architecture's default:
the RNN's single attention, the Transformer's last decoder layer averaged over
heads). For the other layers and heads, :func:`attention_views` re-runs the
translation by forced decoding (:meth:`~attnkit.nmt.models.translator.Translator.attention_maps`:
teacher forcing on the output it produced), which gives the same weights as
the incremental decoding that produced it;
:class:`~attnkit.nmt.decoding.selection.HeadSelection` selects a layer and a
head (or an average) from the result, and :func:`write_heatmaps` draws them.

Notation: ``L`` layers, ``H`` heads, ``S`` source tokens (with ``</s>``),
``T`` output steps (with ``</s>`` when the translation ended).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from ...attention import causal_mask
from ...plot import TITLE_MAX, heatmap, heatmap_grid
from ..models.translator import Translator
from ..vocab_ids import BOS, EOS, SPECIAL_TOKENS
from .inference import inference
from .selection import ALL, HeadSelection

__all__ = ["AttentionViews", "attention_views", "pick", "write_heatmaps"]


@dataclass
class AttentionViews:
    """One sentence's attention weights, every layer and head, on the CPU as float32.

    Attributes:
        cross: ``(L, H, T, S)``: output step ``t`` attending to source token ``s``.
        encoder: ``(Le, H, S, S)`` source self-attention, or None (RNN).
        decoder: ``(L, H, T, T)`` causal self-attention over the decoder inputs
            ``<s> y_1 .. y_{T-1}`` (0 above the diagonal), or None (RNN).
        alignment_layer: the layer of ``cross`` whose head average search
            returned (the default cross-attention layer to show).
    """

    cross: Tensor
    encoder: Tensor | None
    decoder: Tensor | None
    alignment_layer: int = -1


def attention_views(
    model: Translator, src_ids: list[int], output_ids: list[int], device: torch.device | str
) -> AttentionViews:
    """Forced decoding of ``output_ids`` after ``src_ids``: all attention weights.

    Args:
        model: the translator that produced the output (run in eval mode without
            gradients here; its mode is restored afterwards).
        src_ids: source token ids without ``</s>`` (it is appended, as in batching).
        output_ids: the output steps, ``</s>`` included when the translation ended.
        device: the model's device.

    Returns:
        :class:`AttentionViews` for ``S = len(src_ids) + 1``, ``T = len(output_ids)``.

    Raises:
        ValueError: ``output_ids`` is empty, or ids outside the vocabularies.
    """
    if not output_ids:
        raise ValueError("output_ids is empty: there is no output step to show")
    src = torch.tensor([[*src_ids, EOS]], device=device)  # (1, S)
    tgt_in = torch.tensor([[BOS, *output_ids[:-1]]], device=device)  # (1, T)
    with inference(model):
        maps = model.attention_maps(src, torch.tensor([src.shape[1]], device=device), tgt_in)

    def cpu(x: Tensor | None) -> Tensor | None:
        return None if x is None else x[0].float().cpu()  # drop the batch dim

    layer = model.attention_layout.alignment_layer
    return AttentionViews(cpu(maps.cross), cpu(maps.encoder), cpu(maps.decoder), layer)


def pick(weights: Tensor, layer: int | None, head: int | None) -> Tensor:
    """One layer's weights, one head or the head average: ``(L, H, R, C)`` -> ``(R, C)``.

    :meth:`HeadSelection.pick` with the last layer as the default.

    Args:
        weights: ``(L, H, R, C)`` from :class:`AttentionViews`.
        layer: layer index (negative counts from the last); None = the last.
        head: head index (negative counts from the last); None = the mean over heads.

    Raises:
        ValueError: ``layer`` or ``head`` out of range (the message gives the range).
    """
    return HeadSelection(layer, head).pick(weights)


def write_heatmaps(
    views: AttentionViews,
    src_pieces: list[str],
    tgt_pieces: list[str],
    stem: Path,
    *,
    layer: int | Literal["mean"] | None = None,
    head: int | Literal["mean", "all"] | None = None,
    title: str | None = None,
    cross: Tensor | None = None,
    cross_from: str = "search",
) -> list[Path]:
    """Draw a translation's attention: ``STEM.png`` and, with self-attention, two more.

    ``STEM.png`` is the cross-attention (target x source); for architectures
    with self-attention ``STEM.encoder.png`` (source x source) and
    ``STEM.decoder.png`` (decoder inputs x decoder inputs, the future hatched
    as masked). Each shows ``layer`` and ``head`` as a
    :class:`~attnkit.nmt.decoding.selection.HeadSelection` picks them (unset:
    the views' alignment layer for cross-attention, the last layer for
    self-attention, heads averaged), or with ``head="all"`` every head of the
    layer side by side.

    Args:
        views: from :func:`attention_views`.
        src_pieces: ``S`` source labels (with ``</s>``).
        tgt_pieces: ``T`` output labels (with ``</s>`` when the translation ended).
        stem: the path without extension, e.g. ``heatmaps/sentence_001``.
        layer: layer index, ``"mean"``, or None.
        head: head index, ``"mean"``, ``"all"``, or None.
        title: text above each picture; under it the panel's caption (which view,
            layer and heads), broken after commas into lines that the picture
            does not cut (:data:`attnkit.plot.TITLE_MAX`).
        cross: the cross-attention to draw instead of picking one from ``views``
            (the translation's own weights when no layer/head was asked for).
        cross_from: what ``cross`` is, for the title (``Translation.weights_from``:
            ``"search"``, or a guided run's supervised heads).

    Returns:
        the written files.

    Raises:
        ValueError: ``layer`` or ``head`` out of range.
    """
    inputs = [SPECIAL_TOKENS[BOS], *tgt_pieces[:-1]]  # what the decoder read at each step
    panels = [
        ("", "cross-attention", views.cross, tgt_pieces, src_pieces, "source (keys)",
         "target (queries)"),
    ]  # fmt: skip
    if views.encoder is not None:
        panels.append(
            (".encoder", "encoder self-attention", views.encoder, src_pieces, src_pieces,
             "source (keys)", "source (queries)")
        )  # fmt: skip
    if views.decoder is not None:
        panels.append(
            (".decoder", "decoder causal self-attention", views.decoder, inputs, inputs,
             "target so far (keys)", "target (queries)")
        )  # fmt: skip
    selection = HeadSelection(layer, head)
    written = []
    for suffix, name, weights, rows, cols, xlabel, ylabel in panels:
        path = stem.with_name(stem.name + suffix + ".png")
        mask = causal_mask(len(rows)) if suffix == ".decoder" else None
        own = suffix == "" and cross is not None
        default = views.alignment_layer if suffix == "" else -1
        own_view = "the model's alignment view" + (
            "" if cross_from == "search" else f", {cross_from}"
        )
        which = own_view if own else selection.caption(len(weights), default)
        labels = dict(xlabel=xlabel, ylabel=ylabel, mask=mask, path=path)
        full = _wrapped(f"{name}, {which}")
        full = full if title is None else f"{title}\n{full}"
        if head == ALL:
            heatmap_grid(selection.layer_of(weights, default), rows, cols, title=full, **labels)
        else:
            shown = cross if own else selection.pick(weights, default)
            heatmap(shown, rows, cols, title=full, **labels)
        written.append(path)
    return written


def _wrapped(caption: str) -> str:
    """``caption`` broken after commas into lines of at most ``TITLE_MAX`` characters (where
    a part allows): the picture cuts a longer line, and a caption's end names what it shows
    (``supervised heads: layer 0, heads' mean 0, 1, 2, 3, shift 0, full context``)."""
    lines = [""]
    for part in caption.split(", "):
        if not lines[-1]:
            lines[-1] = part
        elif len(lines[-1]) + 2 + len(part) < TITLE_MAX:  # room for a comma after it
            lines[-1] = f"{lines[-1]}, {part}"
        else:
            lines[-1] += ","
            lines.append(part)
    return "\n".join(lines)
