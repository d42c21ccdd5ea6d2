"""``TransformerConfig``: the validated architecture of a Transformer translator
(``model.arch: transformer``).

Plain pydantic, no torch: run configs validate it without loading the model code.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from ..config_base import ConfigModel

__all__ = ["MAX_POSITIONS", "TransformerConfig"]

# The longest sequence a Transformer may be configured for: one head's attention weights
# over 65,536 positions are 16 GiB; a config.yaml saying max_positions: 1000000000 asked
# for 64 GB of sinusoid table and failed deep in torch's allocator.
MAX_POSITIONS = 65_536


class TransformerConfig(ConfigModel):
    """Architecture of a :class:`TransformerTranslator` (``model.arch: transformer``).

    Attributes:
        arch: ``"transformer"``, the tag that selects this architecture.
        d_model: D, the width of embeddings and of every layer's output.
        heads: H, attention heads per layer; must divide D.
        encoder_layers: encoder layers.
        decoder_layers: L, decoder layers.
        ff_dim: inner width of the position-wise feed-forward networks.
        dropout: on embeddings, residual branches and inside the feed-forward network.
        attention_dropout: on the attention weights.
        norm_first: pre-LN (True, stable without long warm-up) or the paper's post-LN.
        positions: ``sinusoidal`` (sec. 3.5) or ``learned``.
        max_positions: longest source or target sequence, in tokens (incl. ``</s>``); 2
            (one token and ``</s>``) to :data:`MAX_POSITIONS` (65,536).
        share_embeddings: one matrix for source embeddings, target embeddings and
            the output layer; needs a joint vocabulary (``tokenizer.joint: true``).
            When False, the target embeddings still serve as the output layer.
        alignment_layer: the decoder layer whose head-averaged cross-attention is
            the alignment view (negative counts from the last, -1 = last).
    """

    arch: Literal["transformer"] = "transformer"
    d_model: PositiveInt = 256
    heads: PositiveInt = 4
    encoder_layers: PositiveInt = 3
    decoder_layers: PositiveInt = 3
    ff_dim: PositiveInt = 1024
    dropout: float = Field(0.1, ge=0.0, lt=1.0)
    attention_dropout: float = Field(0.1, ge=0.0, lt=1.0)
    norm_first: bool = True
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"
    # one token and </s> (or <s>): with 1, the training limits became 0 tokens (data.max_*_len,
    # which must be > 0), and the run folder's config.yaml no longer loaded. At most
    # MAX_POSITIONS: the sinusoid tables are built whole, and no checkpoint shows their size
    max_positions: int = Field(512, ge=2, le=MAX_POSITIONS)
    share_embeddings: bool = True
    alignment_layer: int = -1

    @model_validator(mode="after")
    def _check_sizes(self) -> TransformerConfig:
        if self.d_model % self.heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by heads={self.heads}")
        if not -self.decoder_layers <= self.alignment_layer < self.decoder_layers:
            raise ValueError(
                f"alignment_layer={self.alignment_layer} is not a decoder layer "
                f"(decoder_layers={self.decoder_layers})"
            )
        return self
