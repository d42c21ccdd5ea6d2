"""``TransformerTranslator``: the Transformer encoder-decoder (Vaswani et al. 2017) and its config.

The encoder is ``N`` layers of self-attention + feed-forward over the source;
the decoder ``N`` layers of causal self-attention, cross-attention to the
encoder states and feed-forward (:mod:`.layers`), all on
:class:`attnkit.MultiHeadAttention` with the house mask convention (True = may
attend). Embeddings are scaled by ``sqrt(D)`` and added to sinusoidal or
learned positions (:mod:`.embedding`); with a joint vocabulary one matrix
serves the source embedding, the target embedding and the output layer
(Press & Wolf 2017; Vaswani et al. 2017, sec. 3.4).

Incremental decoding (the :class:`~attnkit.nmt.models.translator.Translator` interface):
:meth:`TransformerTranslator.encode` runs the encoder and projects every
decoder layer's cross-attention keys and values once per source sentence
(:class:`TransformerMemory`); each :meth:`~TransformerTranslator.step` embeds
one target token, appends its keys/values to each layer's self-attention
:class:`~attnkit.KVCache` (:class:`TransformerState`) and attends over the
cached prefix, so step ``t`` costs O(t), not a recomputation of the prefix.

The alignment view (what :meth:`step` and ``forward`` return as weights) is the
cross-attention of decoder layer ``alignment_layer`` (default: the last),
averaged over heads; :meth:`attention_maps` returns every layer and head.

Notation: ``B`` batch, ``S`` source length, ``T`` target length, ``D`` model
width, ``H`` heads, ``Dh = D / H``, ``L`` decoder layers, ``V`` target vocabulary.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from ....attention import KVCache, padding_mask
from ....attention.dropout import Dropout
from ....attention.functional import zero_dead_keys
from ...vocab_ids import PAD
from ..translator import AttentionLayout, AttentionMaps, Translator
from .config import TransformerConfig
from .embedding import Positions
from .layers import DecoderLayer, EncoderLayer

__all__ = [
    "TransformerConfig",
    "TransformerMemory",
    "TransformerState",
    "TransformerTranslator",
]


class TransformerMemory(NamedTuple):
    """The encoded source and each decoder layer's projected cross-attention keys/values.

    Attributes:
        states: encoder output ``(B, S, D)``, float.
        mask: ``(B, S)`` bool, True at real source tokens.
        lengths: source lengths ``(B,)``, long.
        cross_keys: per decoder layer, ``(B, H, S, Dh)``.
        cross_values: per decoder layer, ``(B, H, S, Dh)``.
    """

    states: Tensor
    mask: Tensor
    lengths: Tensor
    cross_keys: tuple[Tensor, ...]
    cross_values: tuple[Tensor, ...]

    def index_select(self, index: Tensor) -> TransformerMemory:
        """Pick, repeat or reorder sentences: ``index`` ``(B',)`` long -> batch ``B'``."""
        return TransformerMemory(
            self.states.index_select(0, index),
            self.mask.index_select(0, index),
            self.lengths.index_select(0, index),
            tuple(k.index_select(0, index) for k in self.cross_keys),
            tuple(v.index_select(0, index) for v in self.cross_values),
        )

    def cross_caches(self) -> list[KVCache]:
        """Fresh cross-attention caches over the projected keys/values (nothing re-projected,
        padding already zeroed by ``mask``, which later steps pass again)."""
        return [
            KVCache(k, v, 0, cross=True, zeroed=True, kept=self.mask)
            for k, v in zip(self.cross_keys, self.cross_values, strict=True)
        ]


class TransformerState(NamedTuple):
    """The decoder's self-attention caches after ``steps`` target tokens.

    Attributes:
        caches: one :class:`~attnkit.KVCache` per decoder layer, keys/values
            ``(B, H, steps, Dh)``.
        steps: target tokens fed so far (the position of the next one).
    """

    caches: tuple[KVCache, ...]
    steps: int

    def index_select(self, index: Tensor) -> TransformerState:
        """Pick, repeat or reorder rows (beam search): ``index`` ``(B',)`` long."""
        return TransformerState(tuple(c.index_select(index) for c in self.caches), self.steps)


class TransformerTranslator(Translator):
    """The Transformer translator (see the module docstring).

    Args:
        config: the architecture.
        src_vocab_size: source vocabulary size, including the special tokens.
        tgt_vocab_size: V, target vocabulary size, including the special tokens.

    Raises:
        ValueError: a vocabulary smaller than the special tokens plus one symbol,
            or ``share_embeddings`` with vocabularies of different sizes.
    """

    beams_share_memory = True  # cross-attention reads one memory row for k decoder rows

    def __init__(self, config: TransformerConfig, src_vocab_size: int, tgt_vocab_size: int) -> None:
        super().__init__(src_vocab_size, tgt_vocab_size)
        if config.share_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(
                f"model.share_embeddings needs one joint vocabulary, got "
                f"src_vocab_size={src_vocab_size} and tgt_vocab_size={tgt_vocab_size}; "
                "set tokenizer.joint: true or model.share_embeddings: false"
            )
        self.config = config
        self.max_target_len = config.max_positions  # step t reads position t
        self.max_source_len = config.max_positions  # the source's positions, </s> included
        d = config.d_model
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, d, padding_idx=PAD)
        self.src_embedding = (
            None if config.share_embeddings else nn.Embedding(src_vocab_size, d, padding_idx=PAD)
        )
        self.src_positions = Positions(d, config.max_positions, config.positions)
        self.tgt_positions = Positions(d, config.max_positions, config.positions)
        self.embed_dropout = Dropout(config.dropout)
        sizes = dict(
            d_model=d,
            heads=config.heads,
            ff_dim=config.ff_dim,
            dropout=config.dropout,
            attention_dropout=config.attention_dropout,
            norm_first=config.norm_first,
        )
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(**sizes) for _ in range(config.encoder_layers)
        )
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(**sizes) for _ in range(config.decoder_layers)
        )
        # Pre-LN leaves the residual stream unnormalised: one LayerNorm closes each stack.
        self.encoder_norm = nn.LayerNorm(d) if config.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d) if config.norm_first else nn.Identity()
        self.output_bias = nn.Parameter(torch.zeros(tgt_vocab_size))
        self._reset_parameters()
        self.alignment_layer = config.alignment_layer % config.decoder_layers
        self.register_load_state_dict_post_hook(_place_position_tables)

    @property
    def attention_layout(self) -> AttentionLayout:
        """Every decoder layer's cross- and self-attention, every encoder layer's self-attention."""
        return AttentionLayout(
            layers=self.config.decoder_layers,
            heads=self.config.heads,
            encoder_layers=self.config.encoder_layers,
            decoder_self_attention=True,
            alignment_layer=self.alignment_layer,
        )

    def _reset_parameters(self) -> None:
        # Xavier-uniform matrices as torch.nn.Transformer; embeddings N(0, D^-1/2), so
        # that sqrt(D) * E has unit scale and E also suits the tied output layer.
        for name, param in self.named_parameters():
            if "embedding" in name:
                nn.init.normal_(param, std=self.config.d_model**-0.5)
                nn.init.zeros_(param[PAD])
            elif param.dim() > 1 and "positions" not in name:
                nn.init.xavier_uniform_(param)

    # ------------------------------------------------------------ embeddings
    def _embed(self, table: nn.Embedding, positions: nn.Module, tokens: Tensor, start: int):
        scaled = table(tokens) * self.config.d_model**0.5  # (B, T, D)
        where = positions(start, tokens.shape[1]).to(scaled.dtype)  # (T, D)
        return self.embed_dropout(scaled + where)  # (B, T, D)

    @property
    def output_layer(self) -> tuple[Tensor, Tensor]:
        """Tied to the target embeddings: ``(E (V, D), b (V,))``, logits ``o E^T + b``."""
        return self.tgt_embedding.weight, self.output_bias

    # ------------------------------------------------------------ encoder
    def _run_encoder(self, src: Tensor, src_lengths: Tensor, need_weights: bool = False):
        """Encoder states ``(B, S, D)``, mask ``(B, S)`` and per-layer weights (or Nones)."""
        mask = padding_mask(src_lengths.to(src.device), src.shape[1])  # (B, S)
        table = self.tgt_embedding if self.src_embedding is None else self.src_embedding
        x = self._embed(table, self.src_positions, src, 0)  # (B, S, D)
        weights = []
        for layer in self.encoder_layers:
            x, w = layer(x, mask, need_weights=need_weights)  # w: (B, H, S, S) or None
            weights.append(w)
        return self.encoder_norm(x), mask, weights

    def _encode(self, src: Tensor, src_lengths: Tensor) -> TransformerMemory:
        states, mask, _ = self._run_encoder(src, src_lengths)
        return self._memory(states, mask, src_lengths)

    def _memory(self, states: Tensor, mask: Tensor, src_lengths: Tensor) -> TransformerMemory:
        """Project each decoder layer's cross-attention keys and values once, their padded
        positions zeroed once (so no decoding step repeats that pass; see ``KVCache.zeroed``)."""
        keys, values = [], []
        for layer in self.decoder_layers:
            attn = layer.multihead_attn
            shape = (*states.shape[:2], attn.num_kv_heads, attn.head_dim)  # (B, S, H, Dh)
            k = attn.k_proj(states).view(shape).transpose(1, 2)  # (B, H, S, Dh)
            v = attn.v_proj(states).view(shape).transpose(1, 2)  # (B, H, S, Dh)
            k, v = zero_dead_keys(mask[:, None, None, :], k, v)  # mask (B, S): True = real
            keys.append(k)
            values.append(v)
        lengths = src_lengths.to(device=states.device, dtype=torch.long)
        return TransformerMemory(states, mask, lengths, tuple(keys), tuple(values))

    # ------------------------------------------------------------ decoder
    def initial_state(self, memory: TransformerMemory) -> TransformerState:
        """Empty self-attention caches, position 0."""
        return TransformerState(tuple(KVCache() for _ in self.decoder_layers), 0)

    def _run_decoder(
        self,
        tgt: Tensor,
        memory: TransformerMemory,
        start: int,
        caches: tuple[tuple[KVCache, KVCache], ...] | None,
        need_weights: tuple[bool, bool] | None,
        supervised: int | None = None,
        *,
        full_context: bool = False,
        depth: int | None = None,
    ) -> tuple[Tensor, list[Tensor | None], list[Tensor | None]]:
        """Decoder output ``(B, Tq, D)`` and per-layer (self, cross) per-head weights.

        ``need_weights=None`` asks for the alignment layer's cross-attention only;
        ``supervised`` makes that layer return its pre-dropout cross-attention
        (guided alignment, :func:`.layers.alignment_probabilities`).
        ``full_context`` drops the causal mask: every real target position sees
        the whole target (PAD positions are masked as keys); no caches.
        ``depth`` runs only the first ``depth`` layers (the output is then that
        layer's, before the final norm).
        """
        y = self._embed(self.tgt_embedding, self.tgt_positions, tgt, start)  # (B, Tq, D)
        if caches is None:  # the whole target at once: reuse the projected source all the same
            caches = tuple((None, cross) for cross in memory.cross_caches())
        target_mask = tgt != PAD if full_context else None  # (B, T) or None: causal
        self_weights, cross_weights = [], []
        for i, layer in enumerate(self.decoder_layers[:depth]):
            want = need_weights or (False, i == self.alignment_layer)
            self_cache, cross_cache = caches[i]
            y, (sw, cw) = layer(
                y,
                memory.states,
                memory.mask,
                self_cache=self_cache,
                cross_cache=cross_cache,
                need_weights=want,
                alignment_weights=i == supervised,
                target_mask=target_mask,
            )
            self_weights.append(sw)  # (B, H, Tq, T) or None
            cross_weights.append(cw)  # (B, H, Tq, S) or None
        return y, self_weights, cross_weights

    def _step(
        self, prev_tokens: Tensor, state: TransformerState, memory: TransformerMemory
    ) -> tuple[Tensor, Tensor, TransformerState]:
        # New cache objects: the caller's state stays valid (beam search may reuse it).
        caches = tuple(KVCache(c.key, c.value, c.steps, c.cross) for c in state.caches)
        pairs = tuple(zip(caches, memory.cross_caches(), strict=True))
        y, _, cross = self._run_decoder(prev_tokens[:, None], memory, state.steps, pairs, None)
        logits = self.project(self.decoder_norm(y[:, 0]))  # (B, V)
        weights = cross[self.alignment_layer][:, :, 0].mean(dim=1)  # (B, S)
        return logits, weights, TransformerState(caches, state.steps + 1)

    def _teacher_forced(
        self, tgt_in: Tensor, memory: TransformerMemory, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        want = None if need_weights else (False, False)
        y, _, cross = self._run_decoder(tgt_in, memory, 0, None, want)
        weights = cross[self.alignment_layer]
        vectors = self.decoder_norm(y)  # (B, T, D)
        return vectors, None if weights is None else weights.mean(dim=1)  # (B, T, S)

    def _supervised(
        self, tgt_in: Tensor, memory: TransformerMemory, layer: int, full_context: bool = False
    ) -> tuple[Tensor, Tensor]:
        quiet = (False, False)
        if not full_context:  # one pass: the supervised layer is the causal pass's own
            y, _, cross = self._run_decoder(tgt_in, memory, 0, None, quiet, layer)
            return self.decoder_norm(y), cross[layer]  # (B, T, D), (B, H, T, S)
        y, _, _ = self._run_decoder(tgt_in, memory, 0, None, quiet)
        _, _, cross = self._run_decoder(
            tgt_in, memory, 0, None, quiet, layer, full_context=True, depth=layer + 1
        )  # the second pass stops at the supervised layer
        return self.decoder_norm(y), cross[layer]

    def _attention_maps(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, full_context: bool = False
    ) -> AttentionMaps:
        states, mask, encoder = self._run_encoder(src, src_lengths, need_weights=True)
        memory = self._memory(states, mask, src_lengths)
        _, self_w, cross_w = self._run_decoder(
            tgt_in, memory, 0, None, (True, True), full_context=full_context
        )
        return AttentionMaps(
            cross=torch.stack(cross_w, dim=1),  # (B, L, H, T, S)
            encoder=torch.stack(encoder, dim=1),  # (B, Le, H, S, S)
            decoder=torch.stack(self_w, dim=1),  # (B, L, H, T, T)
        )


def _place_position_tables(model: TransformerTranslator, _incompatible) -> None:
    """After ``load_state_dict``: sinusoid tables still on ``meta`` are built where the
    weights now are (``load_state_dict(..., assign=True)`` into a model built on the
    ``meta`` device gives it every tensor but these, which no checkpoint holds)."""
    device = model.tgt_embedding.weight.device
    for positions in (model.src_positions, model.tgt_positions):
        positions.place(device)
