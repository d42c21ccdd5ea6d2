"""Which layer and head of attention to show: one selector for translate, plots, the
explorer and word alignment.

A :class:`HeadSelection` names a layer (an index, negative from the last, or
``"mean"`` over layers) and a head (an index, ``"mean"`` over heads, a tuple
of indices: their mean, as a guided-alignment run supervised them, or
``"all"``: every head side by side in a picture, their mean where one matrix
is needed). Left unset, the layer is the model's alignment layer for
cross-attention (:attr:`AttentionLayout.alignment_layer
<attnkit.nmt.models.translator.AttentionLayout>`: the Transformer's
``alignment_layer``, the RNN's only layer) and the last layer for
self-attention, and the heads are averaged: the view search itself returns.

Notation: ``L`` layers, ``H`` heads, ``R`` rows (queries), ``C`` columns (keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import Tensor

from ..models.translator import AttentionLayout

__all__ = ["ALL", "MEAN", "HeadSelection"]

MEAN = "mean"
ALL = "all"


@dataclass(frozen=True)
class HeadSelection:
    """A layer and a head of attention; ``None`` = the default (see the module docstring).

    Attributes:
        layer: layer index (negative counts from the last), ``"mean"``, or None.
        head: head index (negative counts from the last), a tuple of them (their
            mean), ``"mean"``, ``"all"``, or None.
    """

    layer: int | Literal["mean"] | None = None
    head: int | tuple[int, ...] | Literal["mean", "all"] | None = None

    @property
    def is_default(self) -> bool:
        """Whether neither a layer nor a head was chosen (search's own view applies)."""
        return self.layer is None and self.head is None

    def check(self, layout: AttentionLayout, *, encoder: bool = True) -> None:
        """Fail before any work when the layer or head does not exist in this model.

        ``encoder``: the layer is also shown for the encoder's self-attention
        (when the model has some), so it must exist there too.

        Raises:
            ValueError: the layer is out of range for the decoder (or the encoder),
                or the head for a layer (the message gives the range).
        """
        sizes = [layout.layers]
        if encoder and layout.encoder_layers:
            sizes.append(layout.encoder_layers)
        for layers in sizes:
            self.layer_index(layers, default=layers - 1)
            self._head_index(layout.heads)

    def layer_index(self, layers: int, default: int) -> int | Literal["mean"]:
        """The chosen layer of ``layers`` (``default`` when unset), or ``"mean"``.

        Raises:
            ValueError: the layer is out of range.
        """
        layer = default if self.layer is None else self.layer
        if layer == MEAN:
            return MEAN
        if not -layers <= layer < layers:
            raise ValueError(
                f"layer {layer} does not exist: the model has {layers} (0..{layers - 1})"
            )
        return layer

    def pick(self, weights: Tensor, default_layer: int = -1) -> Tensor:
        """One layer (or the layer mean) and one head (or the head mean): ``(..., L, H, R, C)``
        -> ``(..., R, C)``; ``"all"`` heads give their mean here.

        Args:
            weights: ``(..., L, H, R, C)``, e.g. a view ``(L, H, T, S)`` or a batch
                ``(B, L, H, T, S)``.
            default_layer: the layer when none was chosen.

        Raises:
            ValueError: ``weights`` has fewer than 4 dims, or the layer or head is out of range.
        """
        if weights.dim() < 4:
            raise ValueError(f"weights must be (..., L, H, R, C), got shape {tuple(weights.shape)}")
        layer = self.layer_index(weights.shape[-4], default_layer)
        chosen = weights.mean(dim=-4) if layer == MEAN else weights.select(-4, layer)
        head = self._head_index(weights.shape[-3])
        if isinstance(head, tuple):
            return chosen[..., list(head), :, :].mean(dim=-3)
        return chosen.mean(dim=-3) if head is None else chosen.select(-3, head)

    def layer_of(self, weights: Tensor, default_layer: int = -1) -> Tensor:
        """The chosen layer of ``(L, H, R, C)`` with every head: ``(H, R, C)``.

        Raises:
            ValueError: the layer is out of range.
        """
        layer = self.layer_index(weights.shape[0], default_layer)
        return weights.mean(dim=0) if layer == MEAN else weights[layer]

    def caption(self, layers: int, default_layer: int = -1) -> str:
        """``layer L, head H`` / ``heads averaged`` / ``all heads`` for a picture's title."""
        layer = self.layer_index(layers, default_layer)
        which = "layers averaged" if layer == MEAN else f"layer {layer % layers}"
        if isinstance(self.head, tuple):
            return f"{which}, heads {', '.join(map(str, self.head))} averaged"
        heads = {ALL: "all heads", MEAN: "heads averaged", None: "heads averaged"}
        return f"{which}, {heads.get(self.head, f'head {self.head}')}"

    def _head_index(self, heads: int) -> int | tuple[int, ...] | None:
        """The chosen head(s), or None for the mean (``"mean"``, ``"all"`` or unset)."""
        if self.head in (None, MEAN, ALL):
            return None
        chosen = self.head if isinstance(self.head, tuple) else (self.head,)
        for head in chosen:
            if not -heads <= head < heads:
                raise ValueError(
                    f"head {head} does not exist: the layer has {heads} (0..{heads - 1})"
                )
        return self.head
