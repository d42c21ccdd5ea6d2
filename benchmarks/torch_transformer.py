"""The peer for the Transformer benchmarks: the same translator on ``torch.nn.Transformer``.

Same sizes and parameters as attnkit's
:class:`~attnkit.nmt.models.transformer.TransformerTranslator` with
``share_embeddings: true`` and pre-LN: one embedding matrix (source, target
and output layer), sinusoidal positions, ``sqrt(D)`` scaling, an output bias,
and ``nn.Transformer(norm_first=True)`` (whose final encoder/decoder LayerNorms
match attnkit's). ``nn.Transformer`` takes one dropout rate for everything; its
attention layers are then set to ``config.attention_dropout``, as attnkit's are,
so both sides drop the same things. Masks use PyTorch's polarity (True = ignore).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from attnkit.nmt.models.transformer import TransformerConfig
from attnkit.nmt.models.transformer.embedding import sinusoids
from attnkit.nmt.vocab_ids import PAD

__all__ = ["TorchTransformerTranslator"]


class TorchTransformerTranslator(nn.Module):
    """``torch.nn.Transformer`` with tied embeddings; ``forward`` -> logits ``(B, T, V)``."""

    def __init__(self, config: TransformerConfig, vocab_size: int) -> None:
        super().__init__()
        d = config.d_model
        self.embedding = nn.Embedding(vocab_size, d, padding_idx=PAD)
        nn.init.normal_(self.embedding.weight, std=d**-0.5)
        self.register_buffer("table", sinusoids(config.max_positions, d), persistent=False)
        self.dropout = nn.Dropout(config.dropout)
        self.transformer = nn.Transformer(
            d,
            config.heads,
            config.encoder_layers,
            config.decoder_layers,
            config.ff_dim,
            config.dropout,
            batch_first=True,
            norm_first=config.norm_first,
        )
        for module in self.transformer.modules():  # attnkit's rate on the attention weights
            if isinstance(module, nn.MultiheadAttention):
                module.dropout = config.attention_dropout
        self.output_bias = nn.Parameter(torch.zeros(vocab_size))
        self.scale = math.sqrt(d)

    def _embed(self, tokens: Tensor) -> Tensor:
        return self.dropout(self.embedding(tokens) * self.scale + self.table[: tokens.shape[1]])

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        ignore = src == PAD  # (B, S), True = padding (PyTorch's polarity)
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1])  # (T, T)
        out = self.transformer(
            self._embed(src),
            self._embed(tgt_in),
            tgt_mask=causal,
            tgt_is_causal=True,
            src_key_padding_mask=ignore,
            memory_key_padding_mask=ignore,
        )  # (B, T, D)
        return F.linear(out, self.embedding.weight, self.output_bias)  # (B, T, V)
