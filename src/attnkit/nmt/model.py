"""``Seq2Seq``: the RNN encoder-decoder with attention, and its validated config.

Bahdanau, Cho & Bengio 2015 (query timing ``"previous"``) and Luong, Pham &
Manning 2015 (query timing ``"current"``, with or without input feeding), with
any of the dot / scaled dot / general / concat / additive scores. See
:mod:`attnkit.nmt.encoder` and :mod:`attnkit.nmt.decoder` for the equations.

Notation: ``B`` batch, ``S`` source length, ``T`` target length, ``V`` target
vocabulary size, ``D`` hidden size.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator
from torch import Tensor, nn

from .decoder import AttentionDecoder, DecoderState, EncoderOutput
from .encoder import RNNEncoder, check_source, describe_tensor
from .vocab_ids import NUM_SPECIAL

__all__ = ["DecoderState", "EncoderOutput", "ModelConfig", "Seq2Seq"]


class ModelConfig(BaseModel):
    """Architecture of a :class:`Seq2Seq` translator. Unknown keys are errors.

    Attributes:
        embed_dim: E, source and target embedding size.
        hidden_size: D, the decoder's hidden size and the encoder's size per
            direction (the encoder states are ``2D`` wide, as in Bahdanau et
            al. 2015, A.2.1-A.2.2).
        encoder_layers: stacked bidirectional encoder layers.
        decoder_layers: stacked decoder layers; the query is the top layer.
        rnn: ``"gru"`` or ``"lstm"``, for both encoder and decoder.
        dropout: in [0, 1): embeddings, output vectors, between stacked layers.
        score: alignment score, ``dot | scaled_dot | general | concat | additive``.
        attention_hidden: A, the hidden width of concat/additive (default D);
            an error for the other scores, which have no such layer.
        query_timing: ``"previous"`` (Bahdanau: attend with ``s_{t-1}`` and
            feed ``c_t`` into the RNN) or ``"current"`` (Luong: attend with
            ``h_t`` after the RNN step, ``h~_t = tanh(W_c [c_t; h_t])``).
        input_feeding: feed ``h~_{t-1}`` into the next RNN step (Luong et al.
            2015, sec. 3.3); requires ``query_timing="current"``.
        tie_output_embeddings: use the target embedding matrix as the output
            layer (the output vector is then E wide).
    """

    model_config = ConfigDict(extra="forbid")

    embed_dim: PositiveInt = 256
    hidden_size: PositiveInt = 512
    encoder_layers: PositiveInt = 1
    decoder_layers: PositiveInt = 1
    rnn: Literal["gru", "lstm"] = "gru"
    dropout: float = Field(0.2, ge=0.0, lt=1.0)
    score: Literal["dot", "scaled_dot", "general", "concat", "additive"] = "additive"
    attention_hidden: PositiveInt | None = None
    query_timing: Literal["previous", "current"] = "previous"
    input_feeding: bool = False
    tie_output_embeddings: bool = False

    @model_validator(mode="after")
    def _check_combinations(self) -> ModelConfig:
        if self.input_feeding and self.query_timing != "current":
            raise ValueError(
                "input_feeding=True needs query_timing='current' (Luong et al. 2015, "
                "sec. 3.3); with query_timing='previous' the context is already fed "
                "into the RNN"
            )
        if self.attention_hidden is not None and self.score not in ("concat", "additive"):
            raise ValueError(
                f"attention_hidden is only used by the concat and additive scores, "
                f"got score={self.score!r} with attention_hidden={self.attention_hidden}"
            )
        return self


class Seq2Seq(nn.Module):
    """Encoder-decoder translator with attention.

    Args:
        config: the architecture.
        src_vocab_size: source vocabulary size, including the special tokens.
        tgt_vocab_size: V, target vocabulary size, including the special tokens.

    Raises:
        ValueError: a vocabulary smaller than the special tokens plus one symbol.
    """

    def __init__(self, config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> None:
        super().__init__()
        for arg, size in (("src_vocab_size", src_vocab_size), ("tgt_vocab_size", tgt_vocab_size)):
            if not isinstance(size, int) or size <= NUM_SPECIAL:
                raise ValueError(
                    f"{arg} must be an int > {NUM_SPECIAL} (the special tokens plus at "
                    f"least one symbol), got {size!r}"
                )
        self.config = config
        self.src_vocab_size = src_vocab_size
        self.tgt_vocab_size = tgt_vocab_size
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

    def encode(self, src: Tensor, src_lengths: Tensor) -> EncoderOutput:
        """Encode a source batch and do the decoder's per-source work once.

        Args:
            src: ``(B, S)`` long, padded with PAD.
            src_lengths: ``(B,)`` integer, each in ``[1, S]``, any order.

        Returns:
            :class:`EncoderOutput`: states ``(B, S, 2D)``, keys, prepared keys,
            mask ``(B, S)`` (True = real token), lengths, initial decoder state.

        Raises:
            ValueError: bad shapes or dtypes, lengths outside ``[1, S]``, or token
                ids outside the source vocabulary.
        """
        check_source(src, src_lengths)
        _check_ids("src", src, self.src_vocab_size)
        return self.decoder.prepare(self.encoder(src, src_lengths), src_lengths)

    def forward(
        self,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        *,
        teacher_forcing: float = 1.0,
    ) -> tuple[Tensor, Tensor]:
        """Teacher-forced decoding of the target: logits and attention weights.

        Args:
            src: ``(B, S)`` long, padded with PAD.
            src_lengths: ``(B,)`` integer, any order.
            tgt_in: ``[BOS, y_1 .. y_{T-1}]`` ``(B, T)`` long, padded with PAD.
            teacher_forcing: probability in [0, 1] of feeding the gold token at
                each step; below 1 the model's own argmax is fed otherwise, on
                the (slower) step-by-step path.

        Returns:
            ``(logits (B, T, V), weights (B, T, S))``, float. Positions past a
            target's end hold values the loss should ignore (PAD targets).

        Raises:
            ValueError: bad shapes or dtypes, mismatched batch sizes, token ids
                outside the vocabularies, or ``teacher_forcing`` outside [0, 1].
        """
        if not 0.0 <= teacher_forcing <= 1.0:
            raise ValueError(f"teacher_forcing must be in [0, 1], got {teacher_forcing}")
        enc = self.encode(src, src_lengths)  # checks src and src_lengths first
        if not isinstance(tgt_in, Tensor) or tgt_in.dim() != 2 or tgt_in.is_floating_point():
            raise ValueError(
                f"tgt_in must be a 2-D integer tensor (B, T), got {describe_tensor(tgt_in)}"
            )
        if tgt_in.shape[0] != src.shape[0] or tgt_in.shape[1] == 0:
            raise ValueError(
                f"tgt_in must be (B={src.shape[0]}, T>=1) to match src {tuple(src.shape)}, "
                f"got {tuple(tgt_in.shape)}"
            )
        _check_ids("tgt_in", tgt_in, self.tgt_vocab_size)
        return self.decoder(tgt_in, enc, teacher_forcing=teacher_forcing)

    def step(
        self, prev_tokens: Tensor, state: DecoderState, enc: EncoderOutput
    ) -> tuple[Tensor, Tensor, DecoderState]:
        """One decoder step (for greedy and beam search).

        Args:
            prev_tokens: ``y_{t-1}`` ``(B,)`` long; BOS at the first step.
            state: ``enc.initial_state`` at the first step, then the returned state.
            enc: from :meth:`encode` (possibly expanded with ``index_select``).

        Returns:
            ``(logits (B, V), weights (B, S), new_state)``; logits are
            unnormalised (apply ``log_softmax`` for scores).

        Raises:
            ValueError: ``prev_tokens`` is not ``(B,)`` integer with the batch of ``enc``.
        """
        batch = enc.batch_size
        if (
            not isinstance(prev_tokens, Tensor)
            or prev_tokens.shape != (batch,)
            or prev_tokens.is_floating_point()
        ):
            raise ValueError(
                f"prev_tokens must be a 1-D integer tensor (B={batch},) matching enc, "
                f"got {describe_tensor(prev_tokens)}"
            )
        if state.hidden.shape[1] != batch:
            raise ValueError(
                f"state has B={state.hidden.shape[1]} but enc has B={batch}; "
                "reorder both with index_select"
            )
        return self.decoder.step(prev_tokens, state, enc)


def _check_ids(arg: str, ids: Tensor, vocab_size: int) -> None:
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"{arg} holds token ids in [{low}, {high}] but the vocabulary has {vocab_size} "
            f"symbols (ids 0..{vocab_size - 1})"
        )
