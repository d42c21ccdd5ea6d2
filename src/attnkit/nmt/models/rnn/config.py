"""``RNNConfig``: the validated architecture of an RNN translator (``model.arch: rnn``).

Plain pydantic, no torch: run configs validate it without loading the model code.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from ..config_base import ConfigModel

__all__ = ["RNNConfig"]


class RNNConfig(ConfigModel):
    """Architecture of an :class:`RNNTranslator` (``model.arch: rnn``). Unknown keys are errors.

    Attributes:
        arch: ``"rnn"``, the tag that selects this architecture in a run config.
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

    arch: Literal["rnn"] = "rnn"
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
    def _check_combinations(self) -> RNNConfig:
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
