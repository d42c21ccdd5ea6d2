"""``Attention``: alignment scores -> masked softmax -> weighted sum of values.

The encoder-decoder attention of Bahdanau et al. 2015 (eqs. 5-6) and Luong et
al. 2015 (sec. 3.1, eqs. 7-8), with any score from :mod:`.scores`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .dropout import check_rate, dropout
from .functional import _check_broadcast, masked_softmax, zero_dead_keys
from .masks import check_device, key_mask_for_queries
from .scores import Score

__all__ = ["Attention"]


class Attention(nn.Module):
    """Attention with a pluggable score.

    ``a = masked_softmax(score(q, K), mask)``; ``c = sum_j a_j v_j``
    (Bahdanau et al. 2015, eqs. 5-6). Weights are returned, never stored; they
    are the ones that made the context (``c == a @ V`` in every mode): in
    training mode with ``dropout``, after dropout and its ``1/(1-p)`` rescaling.

    Scores are formed and normalised in float32 for float16/bfloat16 inputs
    (see :class:`~attnkit.attention.scores.Score`; inside autocast the product
    scores come in its dtype and are normalised in float32), and the weights
    are cast to the values' dtype. Masked scores are replaced, and the keys and
    values no query may attend to are zeroed, so a NaN or inf in a masked key
    or value reaches neither the context nor a gradient (``prepared_keys``
    passed in are the caller's: prepare them from keys zeroed there, as the
    RNN decoder does once per source).

    Args:
        score: the alignment score module (see :func:`attnkit.make_score`).
        dropout: dropout on the weights, applied in training mode only.

    Raises:
        TypeError: ``score`` is not a :class:`~attnkit.attention.scores.Score`, or
            ``dropout`` not a number.
        ValueError: ``dropout`` outside [0, 1).
    """

    def __init__(self, score: Score, dropout: float = 0.0) -> None:
        super().__init__()
        if not isinstance(score, Score):
            raise TypeError(f"score must be an attnkit Score module, got {type(score).__name__}")
        self.score = score
        self.dropout = check_rate("dropout", dropout)

    def extra_repr(self) -> str:
        return f"dropout={self.dropout}"

    def forward(
        self,
        query: Tensor,
        keys: Tensor,
        values: Tensor | None = None,
        mask: Tensor | None = None,
        *,
        prepared_keys: Tensor | None = None,
        values_zeroed: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """Context vectors and attention weights.

        Args:
            query: decoder state(s): one step ``(B, Dq)`` or all steps ``(B, Tq, Dq)``.
            keys: encoder states ``(B, Tk, Dk)``.
            values: ``(B, Tk, Dv)``; defaults to ``keys`` (encoder-decoder
                attention reuses the encoder states for both).
            mask: bool, True = may attend: a key mask ``(B, Tk)`` (e.g.
                ``padding_mask(lengths)``) or ``(Tk,)`` for any query shape, or for
                ``(B, Tq, Dq)`` a 3-D mask broadcastable to ``(B, Tq, Tk)``. A 2-D
                mask is always a key mask
                (:func:`~attnkit.attention.masks.key_mask_for_queries`): pass a
                causal mask ``(Tq, Tk)`` as ``mask[None]``.
            prepared_keys: ``score.prepare_keys(keys)``, computed once per source.
            values_zeroed: the caller promises that ``values`` is already 0 at
                every key no query may attend to (zeroed once per source, as
                the RNN decoder does), so each step need not zero it again.
                Without this, those values are zeroed here: a weight of 0 times
                a NaN or inf value there would still make the context NaN.

        Returns:
            ``(context, weights)``: ``(B, Dv)`` and ``(B, Tk)`` for a step query,
            ``(B, Tq, Dv)`` and ``(B, Tq, Tk)`` otherwise, both in the values'
            dtype (inside ``torch.autocast`` the context is the product's, autocast's
            dtype, and the weights stay in the values'). Fully masked rows give zero
            weights and a zero context.

        Raises:
            ValueError: mismatched ranks, batch sizes, lengths or widths,
                ``keys``, ``values`` or ``mask`` on another device than ``query``,
                a mask that does not broadcast, or ``prepared_keys`` of another
                shape than ``score.prepare_keys(keys)``.
            TypeError: a non-bool mask; ``query``, ``keys`` or ``values`` not a
                floating-point tensor; dtypes the score refuses (see
                :meth:`~attnkit.attention.scores.Score.forward`).
        """
        values = keys if values is None else values
        _check_tensors(query=query, keys=keys, values=values, mask=mask)
        for name, t in (("keys", keys), ("values", values), ("mask", mask)):
            if t is not None:
                check_device(name, t, query.device, "query")
        step = query.dim() == 2
        if step:
            if mask is not None:  # checked as the caller gave it: (B, Tk)
                _check_mask(mask, (query.shape[0], keys.shape[-2]))
            query = query.unsqueeze(1)  # (B, 1, Dq)
            mask = None if mask is None else mask.unsqueeze(-2)  # (B, 1, Tk)
        else:
            mask = key_mask_for_queries(mask, query.shape[0], keys.shape[-2])  # (B, 1, Tk)
            if mask is not None:
                _check_mask(mask, (*query.shape[:2], keys.shape[-2]))
        _check_layer_inputs(query, keys, values)
        if mask is not None:  # before the score: a NaN key would reach the gradients
            keys, values = _zero_dead(mask, keys, values, prepared_keys is None, values_zeroed)
        scores = self.score(query, keys, prepared_keys)  # (B, Tq, Tk), float32 for fp16/bf16
        weights = masked_softmax(scores, mask).to(values.dtype)  # (B, Tq, Tk)
        if self.training and self.dropout:
            weights = dropout(weights, self.dropout)  # these weights make the context
        context = weights @ values  # (B, Tq, Dv)
        if step:
            return context.squeeze(1), weights.squeeze(1)
        return context, weights


def _check_tensors(**args: Tensor | None) -> None:
    """Each argument must be a tensor (``mask`` may be None)."""
    for arg, t in args.items():
        if not isinstance(t, Tensor) and not (arg == "mask" and t is None):
            kind = "a bool torch.Tensor or None" if arg == "mask" else "a torch.Tensor"
            raise TypeError(f"{arg} must be {kind}, got {type(t).__name__}")


def _check_mask(mask: Tensor, shape: tuple[int, ...]) -> None:
    """``mask`` must be bool and broadcast to ``shape`` (the scores', or ``(B, Tk)`` for a
    step query)."""
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
    _check_broadcast("mask", mask.shape, shape)


def _zero_dead(
    mask: Tensor, keys: Tensor, values: Tensor, keys_too: bool, values_zeroed: bool
) -> tuple[Tensor, Tensor]:
    """``keys`` (when ``keys_too``: no prepared keys were given) and ``values`` (unless the
    caller zeroed them) with zeros at the keys no query may attend to."""
    if not keys_too and values_zeroed:
        return keys, values
    zeroed_keys, zeroed_values = zero_dead_keys(mask, keys, values, keys_too=keys_too)
    return zeroed_keys, values if values_zeroed else zeroed_values


def _check_layer_inputs(query: Tensor, keys: Tensor, values: Tensor) -> None:
    for arg, t in (("query", query), ("keys", keys), ("values", values)):
        if t.dim() != 3:
            raise ValueError(f"{arg} must be 3-D (B, T, D), got shape {tuple(t.shape)}")
    if not values.is_floating_point():  # the weights would be cast to it: all zeros
        raise TypeError(f"values must be floating point, got dtype {values.dtype}")
    if not query.shape[0] == keys.shape[0] == values.shape[0]:
        raise ValueError(
            f"batch sizes differ: query {tuple(query.shape)}, keys {tuple(keys.shape)}, "
            f"values {tuple(values.shape)}"
        )
    if keys.shape[1] != values.shape[1]:
        raise ValueError(
            f"values has Tk={values.shape[1]} but keys has Tk={keys.shape[1]} "
            f"(keys {tuple(keys.shape)}, values {tuple(values.shape)})"
        )
