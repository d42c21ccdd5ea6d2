"""Bidirectional RNN encoder over sentences of any length (Bahdanau et al. 2015, 3.2, A.2.1).

Each source token gets an annotation ``h_j = [->h_j; <-h_j]``: the states of a
forward and a backward RNN at position ``j``, concatenated. With ``D`` units
per direction (Bahdanau et al. use the same ``n`` for each encoder direction
and for the decoder, A.2.2) the annotations are ``2D`` wide.

Each sentence runs for its own length (:func:`.autocast_rnn.run_rnn`: a GRU
keeps its state past the length, an LSTM runs over a packed sequence), so the
backward RNN starts at each sentence's own last token and no state ever sees a
``<pad>``: a sentence encodes to the same states alone or inside a padded
batch, in any order.

Notation: ``B`` batch, ``S`` source length, ``E`` embedding size, ``D`` hidden
units per direction, ``V`` source vocabulary size.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
from torch import Tensor, nn

from ....attention.dropout import Dropout
from ...vocab_ids import PAD
from ..translator import check_source
from .autocast_rnn import run_rnn

__all__ = ["EncodedSource", "RNNEncoder"]

RNN_TYPES: dict[str, type[nn.RNNBase]] = {"gru": nn.GRU, "lstm": nn.LSTM}


class EncodedSource(NamedTuple):
    """What :class:`RNNEncoder` returns.

    Attributes:
        states: annotations ``h_j``, ``(B, S, 2D)``, float; zeros at padded positions.
        final_hidden: ``[->h_{S_b}; <-h_1]`` of the top layer, ``(B, 2D)``: the
            last state of each direction for each sentence's real length.
        final_cell: the same for the LSTM cell, ``(B, 2D)``; None for a GRU.
    """

    states: Tensor
    final_hidden: Tensor
    final_cell: Tensor | None


class RNNEncoder(nn.Module):
    """Embedding, dropout and a bidirectional GRU/LSTM run for each sentence's own length.

    Args:
        vocab_size: V, number of source symbols (row ``PAD`` = 0 is kept at zero).
        embed_dim: E.
        hidden_size: D, units per direction; the annotations are ``2D`` wide.
        num_layers: stacked bidirectional layers.
        rnn: ``"gru"`` or ``"lstm"``.
        dropout: on the embeddings and between stacked layers.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        hidden_size: int,
        num_layers: int = 1,
        rnn: Literal["gru", "lstm"] = "gru",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        self.dropout = Dropout(dropout)
        self.rnn = RNN_TYPES[rnn](
            embed_dim,
            hidden_size,
            num_layers=num_layers,
            batch_first=True,
            bidirectional=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.hidden_size = hidden_size
        self.num_layers = num_layers

    @property
    def output_size(self) -> int:
        """Width of the annotations, ``2D``."""
        return 2 * self.hidden_size

    def forward(self, src: Tensor, src_lengths: Tensor) -> EncodedSource:
        """Encode a padded batch of source sentences.

        Args:
            src: token ids ``(B, S)``, long, padded with ``PAD`` after each sentence.
            src_lengths: real lengths ``(B,)``, integer, each in ``[1, S]``, any order.

        Returns:
            :class:`EncodedSource` with states ``(B, S, 2D)`` and the final
            states ``(B, 2D)``.

        Raises:
            ValueError: wrong ranks or dtypes, a batch-size mismatch, or a length
                outside ``[1, S]`` (see :func:`check_source`).
        """
        check_source(src, src_lengths)
        batch = src.shape[0]
        embedded = self.dropout(self.embedding(src))  # (B, S, E)
        states, final = run_rnn(self.rnn, embedded, lengths=src_lengths)
        # states: (B, S, 2D), zeros past each length. PyTorch returns the final
        # states (h_n, and c_n for an LSTM) in the original batch order.
        hidden, cell = final if isinstance(final, tuple) else (final, None)
        return EncodedSource(states, self._top_layer(hidden, batch), self._top_layer(cell, batch))

    def _top_layer(self, final: Tensor | None, batch: int) -> Tensor | None:
        """``(L*2, B, D)`` -> the top layer's ``[forward; backward]``, ``(B, 2D)``."""
        if final is None:
            return None
        top = final.view(self.num_layers, 2, batch, self.hidden_size)[-1]  # (2, B, D)
        return torch.cat([top[0], top[1]], dim=-1)  # (B, 2D)
