"""Transformer encoder and decoder layers on attnkit's own multi-head attention.

Vaswani et al. 2017, sec. 3.1-3.3. An encoder layer is self-attention then a
position-wise feed-forward network ``FFN(x) = max(0, x W_1 + b_1) W_2 + b_2``
(eq. 2); a decoder layer is causal self-attention, cross-attention to the
encoder states, then the feed-forward network. Every sublayer is wrapped in a
residual connection with dropout and layer normalisation:

* post-LN (the paper's form, sec. 5.4): ``x = LayerNorm(x + Dropout(Sublayer(x)))``;
* pre-LN (Xiong et al. 2020, the default here: trains stably without a long
  warm-up): ``x = x + Dropout(Sublayer(LayerNorm(x)))``, with one final
  ``LayerNorm`` after the stack (kept by the encoder/decoder, not the layer).

Parameter names follow ``torch.nn.TransformerEncoderLayer`` /
``TransformerDecoderLayer`` (``self_attn``, ``multihead_attn``, ``linear1``,
``linear2``, ``norm1..3``) so their weights map one to one.

Masks follow the house convention: True = may attend.

Notation: ``B`` batch, ``S`` source length, ``T`` target length (``Tq`` new
target positions in one call), ``D`` model width, ``F`` feed-forward width,
``H`` heads.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from torch import Tensor, nn
from torch.nn import functional as F

from ....attention import KVCache, MultiHeadAttention, masked_softmax
from ....attention.dropout import Dropout

__all__ = ["DecoderLayer", "EncoderLayer", "LayerWeights"]

LayerWeights = tuple[Tensor | None, Tensor | None]  # (self-attention, cross-attention)


def _residual(
    x: Tensor,
    sublayer: Callable[[Tensor], tuple[Tensor, Tensor | None]],
    norm: nn.LayerNorm,
    dropout: Dropout,
    norm_first: bool,
) -> tuple[Tensor, Tensor | None]:
    """``x + Dropout(f(LayerNorm(x)))`` (pre-LN) or ``LayerNorm(x + Dropout(f(x)))`` (post-LN).

    ``sublayer`` returns ``(output, weights)``; the weights pass through.
    """
    if norm_first:
        out, weights = sublayer(norm(x))
        return x + dropout(out), weights
    out, weights = sublayer(x)
    return norm(x + dropout(out)), weights


class _FeedForward(nn.Module):
    """``max(0, x W_1 + b_1) W_2 + b_2`` (Vaswani et al. 2017, eq. 2), with dropout inside."""

    def __init__(self, d_model: int, ff_dim: int, dropout: float) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, ff_dim)
        self.linear2 = nn.Linear(ff_dim, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> tuple[Tensor, None]:
        return self.linear2(self.dropout(F.relu(self.linear1(x)))), None  # (B, T, D)


class _Layer(nn.Module):
    """The sublayers both layer kinds are built from (see :class:`EncoderLayer`'s Args).

    A subclass with ``cross_attention = True`` also gets the cross-attention
    ``multihead_attn`` and its norm ``norm3``.
    """

    cross_attention = False

    def __init__(
        self,
        d_model: int,
        heads: int,
        ff_dim: int,
        *,
        dropout: float,
        attention_dropout: float,
        norm_first: bool,
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads, dropout=attention_dropout)
        if self.cross_attention:
            self.multihead_attn = MultiHeadAttention(d_model, heads, dropout=attention_dropout)
        self.ff = _FeedForward(d_model, ff_dim, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        if self.cross_attention:
            self.norm3 = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first


class EncoderLayer(_Layer):
    """Self-attention over the source, then the feed-forward network.

    Args:
        d_model: D.
        heads: H; must divide D.
        ff_dim: F.
        dropout: on residual branches and inside the feed-forward network.
        attention_dropout: on the attention weights.
        norm_first: pre-LN (True) or the paper's post-LN (False).
    """

    def forward(
        self, x: Tensor, src_mask: Tensor, *, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Encode ``x`` ``(B, S, D)``; ``src_mask`` ``(B, S)`` bool, True at real tokens.

        Returns:
            ``(x (B, S, D), weights (B, H, S, S) or None)``: per-head self-attention
            weights when ``need_weights``.
        """

        def attend(h: Tensor) -> tuple[Tensor, Tensor | None]:
            return self.self_attn(
                h,
                key_padding_mask=src_mask,
                need_weights=need_weights,
                average_weights=False,
            )

        x, weights = _residual(x, attend, self.norm1, self.dropout, self.norm_first)
        x, _ = _residual(x, self.ff, self.norm2, self.dropout, self.norm_first)
        return x, weights


class DecoderLayer(_Layer):
    """Causal self-attention, cross-attention to the source, then the feed-forward network.

    Args: the same as :class:`EncoderLayer`'s.
    """

    cross_attention = True

    def forward(
        self,
        y: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        *,
        self_cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
        need_weights: tuple[bool, bool] = (False, False),
        alignment_weights: bool = False,
        target_mask: Tensor | None = None,
    ) -> tuple[Tensor, LayerWeights]:
        """Decode target positions ``y`` ``(B, Tq, D)`` against encoder states ``memory``.

        Args:
            y: the target positions of this call, ``(B, Tq, D)``: the whole
                target when teacher forcing, one step (``Tq = 1``) with caches.
            memory: encoder states ``(B, S, D)``; not read when ``cross_cache``
                already holds the projected keys/values. It may hold ``B / k``
                sentences for ``k`` consecutive rows of ``y`` each (the beams
                of beam search), as may ``src_mask`` and ``cross_cache``.
            src_mask: ``(B, S)`` bool, True at real source tokens.
            self_cache: keys/values of the earlier target positions (updated in place).
            cross_cache: the source's projected keys/values.
            need_weights: return per-head (self, cross) attention weights.
            alignment_weights: return as cross weights the per-head cross-attention
                softmax *before* attention dropout, with gradient (guided
                alignment, :func:`alignment_probabilities`); the layer's output
                still goes through the fused kernel.
            target_mask: None: causal self-attention (training and decoding).
                A ``(B, Tq)`` bool mask, True at real target tokens: full-context
                self-attention, every real target position seen from every
                other, no causal mask (Garg et al. 2019, sec. 4.2: the pass that
                guided alignment supervises with ``full_context``). No caches.

        Returns:
            ``(y (B, Tq, D), (self weights (B, H, Tq, T) | None, cross weights
            (B, H, Tq, S) | None))``. Causal masking is bottom-right aligned, so
            the newest query sees every cached position and nothing later.
        """

        def attend_self(h: Tensor) -> tuple[Tensor, Tensor | None]:
            return self.self_attn(
                h,
                key_padding_mask=target_mask,
                is_causal=target_mask is None,
                cache=self_cache,
                need_weights=need_weights[0],
                average_weights=False,
            )

        def attend_source(h: Tensor) -> tuple[Tensor, Tensor | None]:
            # k rows per source sentence (beam search) become k queries of one row:
            # cross-attention has no mask between queries, so nothing else changes.
            sentences, tq = src_mask.shape[0], h.shape[1]
            grouped = h.reshape(sentences, -1, h.shape[-1])  # (B/k, k*Tq, D)
            out, weights = self.multihead_attn(
                grouped,
                memory,
                key_padding_mask=src_mask,
                cache=cross_cache,
                need_weights=need_weights[1] and not alignment_weights,
                average_weights=False,
            )
            if alignment_weights:
                weights = alignment_probabilities(self.multihead_attn, grouped, memory, src_mask)
            if weights is not None:  # (B/k, H, k*Tq, S) -> (B, H, Tq, S)
                weights = weights.unflatten(2, (-1, tq)).transpose(1, 2).flatten(0, 1)
            return out.reshape(h.shape), weights

        y, self_weights = _residual(y, attend_self, self.norm1, self.dropout, self.norm_first)
        y, cross_weights = _residual(y, attend_source, self.norm2, self.dropout, self.norm_first)
        y, _ = _residual(y, self.ff, self.norm3, self.dropout, self.norm_first)
        return y, (self_weights, cross_weights)


def alignment_probabilities(
    attn: MultiHeadAttention, query: Tensor, memory: Tensor, src_mask: Tensor
) -> Tensor:
    """Per-head cross-attention weights ``softmax(Q K^T / sqrt(Dh))`` before attention dropout.

    The same weights ``attn`` computes (Vaswani et al. 2017, eq. 1), recomputed
    from its projections so that guided alignment supervises the softmax rather
    than its dropped-out copy (dropout zeroes weights, whose log is -inf), while
    the layer's output keeps the fused kernel: one extra ``Q K^T`` for one layer.

    Args:
        attn: the layer's cross-attention.
        query: its query input ``(B, T, D)`` (after the pre-LN norm, if any).
        memory: encoder states ``(B, S, D)``.
        src_mask: ``(B, S)`` bool, True at real source tokens.

    Returns:
        ``(B, H, T, S)`` float, rows summing to 1 over the real source tokens.
    """
    b, t, _ = query.shape
    s = memory.shape[1]
    q = attn.q_proj(query).view(b, t, attn.num_heads, attn.head_dim).transpose(1, 2)
    k = attn.k_proj(memory).view(b, s, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
    if attn.num_kv_heads != attn.num_heads:
        k = k.repeat_interleave(attn.num_heads // attn.num_kv_heads, dim=1)  # (B, H, S, Dh)
    scores = q @ k.transpose(-1, -2) / math.sqrt(attn.head_dim)  # (B, H, T, S)
    return masked_softmax(scores, src_mask[:, None, None, :])  # (B, H, T, S)
