"""``RNNTranslator``: the RNN encoder-decoder with attention, and its validated config.

Bahdanau, Cho & Bengio 2015 (query timing ``"previous"``) and Luong, Pham &
Manning 2015 (query timing ``"current"``, with or without input feeding), with
any of the dot / scaled dot / general / concat / additive scores. See
:mod:`attnkit.nmt.models.rnn.encoder` and :mod:`attnkit.nmt.models.rnn.decoder` for the equations.

Notation: ``B`` batch, ``S`` source length, ``T`` target length, ``V`` target
vocabulary size, ``D`` hidden size.
"""

from __future__ import annotations

from torch import Tensor

from ..translator import AttentionLayout, AttentionMaps, Translator
from .config import RNNConfig
from .decoder import AttentionDecoder, RNNMemory, RNNState
from .encoder import RNNEncoder

__all__ = ["RNNConfig", "RNNMemory", "RNNState", "RNNTranslator"]


class RNNTranslator(Translator):
    """Bidirectional RNN encoder and an attention decoder (see :mod:`.decoder`).

    Implements the :class:`~attnkit.nmt.models.translator.Translator` interface: its
    memory is an :class:`RNNMemory` (encoder states, projected keys, mask,
    ``s_0``) and its decoder state an :class:`RNNState`.

    Beam search keeps one memory row per sentence for its beams
    (``beams_share_memory``): the decoder attends with each sentence's ``k``
    beam states at once (:meth:`AttentionDecoder._attend`).

    Args:
        config: the architecture.
        src_vocab_size: source vocabulary size, including the special tokens.
        tgt_vocab_size: V, target vocabulary size, including the special tokens.

    Raises:
        ValueError: a vocabulary smaller than the special tokens plus one symbol.
    """

    beams_share_memory = True  # k decoder rows read one memory row

    def __init__(self, config: RNNConfig, src_vocab_size: int, tgt_vocab_size: int) -> None:
        super().__init__(src_vocab_size, tgt_vocab_size)
        self.config = config
        self.encoder = RNNEncoder(
            src_vocab_size,
            config.embed_dim,
            config.hidden_size,
            num_layers=config.encoder_layers,
            rnn=config.rnn,
            dropout=config.dropout,
        )
        self.decoder = AttentionDecoder(
            tgt_vocab_size,
            config.embed_dim,
            config.hidden_size,
            self.encoder.output_size,
            num_layers=config.decoder_layers,
            rnn=config.rnn,
            dropout=config.dropout,
            score=config.score,
            attention_hidden=config.attention_hidden,
            query_timing=config.query_timing,
            input_feeding=config.input_feeding,
            tie_output_embeddings=config.tie_output_embeddings,
        )

    @property
    def attention_layout(self) -> AttentionLayout:
        """One attention (layer 1, head 1), no self-attention."""
        return AttentionLayout(layers=1, heads=1)

    def _encode(self, src: Tensor, src_lengths: Tensor) -> RNNMemory:
        return self.decoder.prepare(self.encoder(src, src_lengths), src_lengths)

    @property
    def output_layer(self) -> tuple[Tensor, Tensor]:
        """The decoder's ``(W_s (V, Do), b (V,))`` (Luong eq. 6)."""
        return self.decoder.output_layer

    def project(self, vectors: Tensor) -> Tensor:
        """Logits ``(..., V)`` of output vectors ``(..., Do)``: the decoder's :meth:`logits`."""
        return self.decoder.logits(vectors)

    def initial_state(self, memory: RNNMemory) -> RNNState:
        """``s_0``, computed from the encoder's final states in :meth:`encode`."""
        return memory.initial

    def _step(
        self, prev_tokens: Tensor, state: RNNState, memory: RNNMemory
    ) -> tuple[Tensor, Tensor, RNNState]:
        if state.hidden.shape[1] != prev_tokens.shape[0]:
            raise ValueError(
                f"state has B={state.hidden.shape[1]} rows but prev_tokens has "
                f"{prev_tokens.shape[0]} (memory: {memory.batch_size} sentences); "
                "reorder both with index_select"
            )
        return self.decoder.step(prev_tokens, state, memory)

    def _teacher_forced(
        self, tgt_in: Tensor, memory: RNNMemory, need_weights: bool
    ) -> tuple[Tensor, Tensor]:
        return self.decoder(tgt_in, memory)  # the weights come for free

    def _supervised(
        self, tgt_in: Tensor, memory: RNNMemory, layer: int, full_context: bool = False
    ) -> tuple[Tensor, Tensor]:
        # full_context is never True here: Translator refuses it without decoder self-attention
        vectors, weights = self.decoder(tgt_in, memory)  # (B, T, Do), (B, T, S), with gradient
        return vectors, weights[:, None]  # one layer, one head: (B, 1, T, S)

    def _attention_maps(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, full_context: bool = False
    ) -> AttentionMaps:
        _, weights = self.decoder(tgt_in, self._encode(src, src_lengths))  # (B, T, S)
        return AttentionMaps(cross=weights[:, None, None])  # (B, L=1, H=1, T, S)
