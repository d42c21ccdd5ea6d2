"""The attention decoder: Bahdanau-style and Luong-style in one configurable module.

Two axes from the literature choose where attention sits in the decoder step:

* query timing ``"previous"`` (Bahdanau et al. 2015, eqs. 4-6, A.2.2): the
  query is the previous decoder state ``s_{t-1}``; the context ``c_t`` is
  computed before the RNN step and fed into it,
  ``s_t = RNN([E y_{t-1}; c_t], s_{t-1})``, and the output vector is
  ``o_t = tanh(W_o [s_t; c_t; E y_{t-1}])`` (the paper's deep output with
  ``tanh`` in place of the maxout layer; with ``s_t`` as in its eq. 4,
  ``p(y_t) = g(y_{t-1}, s_t, c_t)``, and as dl4mt and Nematus compute it,
  where A.2.2 writes ``s_{t-1}``).
* query timing ``"current"`` (Luong et al. 2015, sec. 3.1, eqs. 5-6): the RNN
  steps first, ``h_t = RNN(x_t, h_{t-1})``, then ``h_t`` attends and the
  attentional hidden state is ``o_t = h~_t = tanh(W_c [c_t; h_t])``.
  With input feeding (sec. 3.3) ``x_t = [E y_{t-1}; h~_{t-1}]`` (``h~_0 = 0``),
  otherwise ``x_t = E y_{t-1}``.

Either way ``p(y_t) = softmax(W_s o_t + b)`` (Luong eq. 6). Input feeding is
rejected with the previous timing by :class:`~attnkit.nmt.models.rnn.model.RNNConfig`
(the RNN member of :data:`~attnkit.nmt.models.registry.ModelConfig`): that decoder
already feeds its context into the RNN.

Speed: per-source work (the padding mask, the key projection
``score.prepare_keys``) is done once in :meth:`AttentionDecoder.prepare`. The
teacher-forced pass embeds the whole target once and projects to the
vocabulary once after the loop; with the current timing and no input feeding
there is no loop at all: the RNN runs over the whole target in one fused call
and one batched product attends for every target position. With the previous
timing, a one-layer GRU and the additive (or concat) score, the loop is
:func:`~attnkit.nmt.models.rnn.fused_loop.bahdanau_gru_loop`: the same arithmetic with
a hand-written backward that batches every weight gradient over all steps.

Notation: ``B`` batch, ``S`` source length, ``T`` target length, ``E``
embedding size, ``D`` decoder hidden size, ``Dv = 2D_enc`` encoder state
width, ``Dk`` key width, ``Do`` output-vector width, ``L`` decoder layers,
``V`` target vocabulary size.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ....attention import Attention, make_score, padding_mask
from ....attention.dropout import Dropout
from ....attention.scores import AdditiveScore
from ...vocab_ids import PAD
from .autocast_rnn import run_rnn
from .encoder import RNN_TYPES, EncodedSource
from .fused_loop import bahdanau_gru_loop

__all__ = ["AttentionDecoder", "RNNState", "RNNMemory"]


class RNNState(NamedTuple):
    """The recurrent state carried from one decoder step to the next.

    Attributes:
        hidden: ``(L, B, D)``, float; ``hidden[-1]`` is the top layer's state.
        cell: LSTM cell ``(L, B, D)``; None for a GRU.
        feed: ``h~_{t-1}`` for input feeding ``(B, Do)``; None without it.
    """

    hidden: Tensor
    cell: Tensor | None = None
    feed: Tensor | None = None

    def index_select(self, index: Tensor) -> RNNState:
        """Pick/repeat batch rows (beam search): ``index`` ``(B',)`` long -> batch ``B'``."""
        return RNNState(
            self.hidden.index_select(1, index),
            None if self.cell is None else self.cell.index_select(1, index),
            None if self.feed is None else self.feed.index_select(0, index),
        )

    def rnn_state(self) -> Tensor | tuple[Tensor, Tensor]:
        """The ``hx`` argument of ``nn.GRU`` / ``nn.LSTM``."""
        return self.hidden if self.cell is None else (self.hidden, self.cell)


class RNNMemory(NamedTuple):
    """Everything the decoder needs from one source batch, computed once per sentence.

    Attributes:
        states: encoder annotations, the attention values ``(B, S, Dv)``, float; 0 at
            padding (zeroed once in ``prepare``).
        keys: attention keys ``(B, S, Dk)``: ``states``, or for the (scaled) dot score
            ``states`` projected once to the decoder width ``D``.
        prepared_keys: ``score.prepare_keys(keys)`` (e.g. ``U_a h_j`` of
            Bahdanau et al. 2015, A.1.2), ``(B, S, *)``.
        mask: ``(B, S)`` bool, True at real source tokens.
        lengths: source lengths ``(B,)``, long.
        initial: the decoder state ``s_0`` from the bridge.
    """

    states: Tensor
    keys: Tensor
    prepared_keys: Tensor
    mask: Tensor
    lengths: Tensor
    initial: RNNState

    def index_select(self, index: Tensor) -> RNNMemory:
        """Pick, repeat or reorder sentences: ``index`` ``(B',)`` long -> batch ``B'``.

        Repeating each sentence ``K`` times (``index = arange(B).repeat_interleave(K)``)
        is not needed for beam search, whose ``K`` rows of a sentence read one
        copy (:meth:`AttentionDecoder._attend`).
        """
        return RNNMemory(
            self.states.index_select(0, index),
            self.keys.index_select(0, index),
            self.prepared_keys.index_select(0, index),
            self.mask.index_select(0, index),
            self.lengths.index_select(0, index),
            self.initial.index_select(index),
        )

    @property
    def batch_size(self) -> int:
        """B, the number of source sentences (or beam rows)."""
        return self.states.shape[0]


class AttentionDecoder(nn.Module):
    """RNN decoder with attention over the encoder states (see the module docstring).

    Bridge (Bahdanau et al. 2015, A.2.2, which uses ``s_0 = tanh(W_s <-h_1)``):
    here both final encoder states enter, ``s_0 = tanh(W_s [->h_S; <-h_1] + b)``,
    one ``D``-slice per decoder layer; an LSTM's initial cell comes the same way
    from the final encoder cells through its own Linear.

    Dot and scaled dot scores: they need ``Dk == D``, so when ``Dv != D``
    (always here, since the bidirectional encoder gives ``Dv = 2D``) the
    encoder states are projected once per sentence, ``k_j = W_k h_j`` (no
    bias), and the values stay the unprojected ``h_j``. The dot score is then
    ``s^T W_k h_j``, the same function as Luong's general score (a test checks
    they agree with copied weights); Luong's parameter-free dot presumes equal
    widths. ``scaled_dot`` divides that by ``sqrt(D)`` (Vaswani et al. 2017,
    eq. 1), which keeps the softmax from saturating early in training. The
    other scores take ``Dv``-wide keys directly.

    Tied output embeddings: the logits use the target embedding matrix,
    ``W_s = E`` (Press & Wolf 2017), so ``Do = E``. No weight is shared between
    two parameters (the output layer is a bias plus ``F.linear`` with the
    embedding weight), so ``state_dict()`` holds no aliased tensors and saves to
    safetensors as is.

    Args:
        vocab_size: V.
        embed_dim: E.
        hidden_size: D.
        memory_size: Dv, the width of the encoder states.
        num_layers: L.
        rnn: ``"gru"`` or ``"lstm"``.
        dropout: on embeddings, output vectors, and between stacked layers.
        score: ``"dot"``, ``"scaled_dot"``, ``"general"``, ``"concat"`` or ``"additive"``.
        attention_hidden: A for concat/additive (defaults to D).
        query_timing: ``"previous"`` (Bahdanau) or ``"current"`` (Luong).
        input_feeding: feed ``h~_{t-1}`` into the RNN (current timing only).
        tie_output_embeddings: use the embedding matrix as the output layer.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        hidden_size: int,
        memory_size: int,
        *,
        num_layers: int = 1,
        rnn: Literal["gru", "lstm"] = "gru",
        dropout: float = 0.0,
        score: str = "additive",
        attention_hidden: int | None = None,
        query_timing: Literal["previous", "current"] = "previous",
        input_feeding: bool = False,
        tie_output_embeddings: bool = False,
    ) -> None:
        super().__init__()
        if input_feeding and query_timing != "current":
            raise ValueError("input_feeding=True needs query_timing='current'")
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.query_timing = query_timing
        self.input_feeding = input_feeding
        self.output_size = embed_dim if tie_output_embeddings else hidden_size  # Do

        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        self.dropout = Dropout(dropout)
        needs_key_proj = score in ("dot", "scaled_dot") and memory_size != hidden_size
        self.key_proj = nn.Linear(memory_size, hidden_size, bias=False) if needs_key_proj else None
        key_size = hidden_size if needs_key_proj else memory_size
        self.attention = Attention(make_score(score, hidden_size, key_size, attention_hidden))

        self.bridge = nn.Linear(memory_size, num_layers * hidden_size)
        self.cell_bridge = (
            nn.Linear(memory_size, num_layers * hidden_size) if rnn == "lstm" else None
        )
        if query_timing == "previous":
            rnn_input = embed_dim + memory_size  # [E y_{t-1}; c_t]
            combine_input = hidden_size + memory_size + embed_dim  # [s_t; c_t; E y_{t-1}]
        else:
            rnn_input = embed_dim + (self.output_size if input_feeding else 0)
            combine_input = memory_size + hidden_size  # [c_t; h_t]
        self.rnn = RNN_TYPES[rnn](
            rnn_input,
            hidden_size,
            num_layers=num_layers,
            batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.combine = nn.Linear(combine_input, self.output_size)  # W_o or W_c
        if tie_output_embeddings:
            self.output = None
            self.output_bias = nn.Parameter(torch.zeros(vocab_size))
        else:
            self.output = nn.Linear(self.output_size, vocab_size)  # W_s

    # ----------------------------------------------------------- per source
    def prepare(self, encoded: EncodedSource, src_lengths: Tensor) -> RNNMemory:
        """Per-source work, once per sentence: mask, keys, prepared keys, ``s_0``.

        Args:
            encoded: the encoder's states ``(B, S, Dv)`` and final states ``(B, Dv)``.
            src_lengths: ``(B,)`` real source lengths.
        """
        raw = encoded.states  # (B, S, Dv)
        mask = padding_mask(src_lengths.to(raw.device), raw.shape[1])  # (B, S)
        # zero the padding's states once here, not at every decoder step (_attend)
        states = torch.where(mask[..., None], raw, 0.0)  # (B, S, Dv)
        keys = states if self.key_proj is None else self.key_proj(states)  # (B, S, Dk)
        prepared = self.attention.score.prepare_keys(keys)  # (B, S, *)
        lengths = src_lengths.to(device=states.device, dtype=torch.long)
        initial = self._initial_state(encoded)
        return RNNMemory(states, keys, prepared, mask, lengths, initial)

    def _initial_state(self, encoded: EncodedSource) -> RNNState:
        hidden = self._bridge(self.bridge, encoded.final_hidden)
        cell = None
        if self.cell_bridge is not None:
            cell = self._bridge(self.cell_bridge, encoded.final_cell)
        feed = None
        if self.input_feeding:
            feed = encoded.states.new_zeros(encoded.states.shape[0], self.output_size)  # h~_0
        return RNNState(hidden, cell, feed)

    def _bridge(self, layer: nn.Linear, final: Tensor) -> Tensor:
        batch = final.shape[0]
        flat = torch.tanh(layer(final))  # (B, L*D)
        return flat.view(batch, self.num_layers, self.hidden_size).transpose(0, 1).contiguous()

    # ----------------------------------------------------------- decoding
    def forward(self, tgt_in: Tensor, memory: RNNMemory) -> tuple[Tensor, Tensor]:
        """Teacher-forced decoding of a whole target: the output layer's input (dropout
        applied) ``(B, T, Do)`` -- :meth:`logits` of it are the logits -- and weights ``(B, T, S)``.

        Args:
            tgt_in: ``[BOS, y_1 .. y_{T-1}]`` ``(B, T)`` long, padded with PAD.
            memory: from :meth:`prepare`.
        """
        embedded = self.dropout(self.embedding(tgt_in))  # (B, T, E)
        if self.query_timing == "current" and not self.input_feeding:
            out, weights = self._parallel(embedded, memory)
        else:
            out, weights = self._loop(embedded, memory)
        return self.dropout(out), weights

    def step(
        self, prev_tokens: Tensor, state: RNNState, memory: RNNMemory
    ) -> tuple[Tensor, Tensor, RNNState]:
        """One decoder step: logits ``(B, V)``, weights ``(B, S)``, the next state.

        Args:
            prev_tokens: ``y_{t-1}`` ``(B,)`` long (BOS at the first step).
            state: the state after step ``t-1`` (``memory.initial`` at first).
            memory: from :meth:`prepare`.
        """
        embedded = self.dropout(self.embedding(prev_tokens))  # (B, E)
        out, context, weights, state = self._recur(embedded, state, memory)
        vector = state.feed if self.input_feeding else self._combine(out, context, embedded)
        return self.logits(self.dropout(vector)), weights, state

    def _parallel(self, embedded: Tensor, memory: RNNMemory) -> tuple[Tensor, Tensor]:
        """Current timing, no input feeding: all target positions at once (Luong eq. 5)."""
        out, _ = run_rnn(self.rnn, embedded, memory.initial.rnn_state())  # (B, T, D)
        context, weights = self._attend(out, memory)  # (B, T, Dv), (B, T, S)
        return self._combine(out, context, embedded), weights  # (B, T, Do)

    def _loop(self, embedded: Tensor, memory: RNNMemory) -> tuple[Tensor, Tensor]:
        """Teacher-forced step loop; the output vectors are batched after it where possible."""
        if self._fusable(embedded):
            score = self.attention.score
            states, contexts, weights = bahdanau_gru_loop(
                embedded, memory.initial.hidden[0], memory.prepared_keys, memory.states,
                memory.mask, score.query_proj.weight, score.v.weight[0], self.rnn,
            )  # fmt: skip
            return self._combine(states, contexts, embedded), weights
        state = memory.initial
        outs, contexts, weights, feeds = [], [], [], []
        for t in range(embedded.shape[1]):
            out, context, step_weights, state = self._recur(embedded[:, t], state, memory)
            outs.append(out)
            contexts.append(context)
            weights.append(step_weights)
            feeds.append(state.feed)
        if self.input_feeding:
            vectors = torch.stack(feeds, dim=1)  # (B, T, Do), computed inside the loop
        else:
            out_all = torch.stack(outs, dim=1)  # (B, T, D)
            vectors = self._combine(out_all, torch.stack(contexts, dim=1), embedded)  # (B, T, Do)
        return vectors, torch.stack(weights, dim=1)  # (B, T, Do), (B, T, S)

    def _fusable(self, embedded: Tensor) -> bool:
        """Bahdanau timing with one GRU layer and an additive/concat score, in fp32/fp64,
        whose projections hold their weights as tensors (not dynamically quantized)."""
        score = self.attention.score
        return (
            self.query_timing == "previous"
            and isinstance(self.rnn, nn.GRU)
            and self.num_layers == 1
            and isinstance(score, AdditiveScore)
            and embedded.dtype in (torch.float32, torch.float64)
            and isinstance(score.query_proj.weight, Tensor)
            and isinstance(score.v.weight, Tensor)
        )

    def _recur(
        self, embedded: Tensor, state: RNNState, memory: RNNMemory
    ) -> tuple[Tensor, Tensor, Tensor, RNNState]:
        """Recurrent part of one step -> ``out (B, D), context (B, Dv), weights (B, S), state``."""
        if self.query_timing == "previous":
            context, weights = self._attend(state.hidden[-1], memory)  # query s_{t-1}
            out, state = self._rnn_step(torch.cat([embedded, context], dim=-1), state)
            return out, context, weights, state
        rnn_input = torch.cat([embedded, state.feed], dim=-1) if self.input_feeding else embedded
        out, state = self._rnn_step(rnn_input, state)
        context, weights = self._attend(out, memory)  # query h_t
        if self.input_feeding:
            state = state._replace(feed=self._combine(out, context, embedded))
        return out, context, weights, state

    def _rnn_step(self, rnn_input: Tensor, state: RNNState) -> tuple[Tensor, RNNState]:
        out, final = run_rnn(self.rnn, rnn_input.unsqueeze(1), state.rnn_state())  # (B, 1, D)
        hidden, cell = final if isinstance(final, tuple) else (final, None)
        return out.squeeze(1), RNNState(hidden, cell, state.feed)

    def _attend(self, query: Tensor, memory: RNNMemory) -> tuple[Tensor, Tensor]:
        """Context and weights for a step query ``(B, D)`` or all steps ``(B, T, D)``.

        A step query of ``k * B`` rows (beam search's ``k`` beams of each of the
        memory's ``B`` sentences, row ``r`` reading sentence ``r // k``) attends as
        ``(B, k, D)``: one small matrix product per sentence instead of ``k``
        matrix-vector products over ``k`` copies of its encoder states.
        """
        sentences = memory.batch_size
        if query.dim() == 2 and query.shape[0] != sentences:
            beams = query.view(sentences, -1, query.shape[-1])  # (B, k, D)
            context, weights = self._attend(beams, memory)  # (B, k, Dv), (B, k, S)
            return context.flatten(0, 1), weights.flatten(0, 1)  # (k*B, Dv), (k*B, S)
        mask = memory.mask if query.dim() == 2 else memory.mask[:, None, :]  # (B, S) or (B, 1, S)
        return self.attention(
            query,
            memory.keys,
            memory.states,
            mask,
            prepared_keys=memory.prepared_keys,
            values_zeroed=True,  # prepare() zeroed the padding's states
        )

    def _combine(self, out: Tensor, context: Tensor, embedded: Tensor) -> Tensor:
        """The output vector ``o_t`` (Bahdanau A.2.2 deep output / Luong eq. 5), ``(..., Do)``."""
        # Bahdanau: [s_t; c_t; E y_{t-1}]; Luong: [c_t; h_t]
        parts = [out, context, embedded] if self.query_timing == "previous" else [context, out]
        return torch.tanh(self.combine(torch.cat(parts, dim=-1)))  # (..., Do)

    @property
    def output_layer(self) -> tuple[Tensor, Tensor]:
        """``(W_s (V, Do), b (V,))``; ``W_s`` is the embedding table when tied."""
        if self.output is None:
            return self.embedding.weight, self.output_bias
        return self.output.weight, self.output.bias

    def logits(self, vectors: Tensor) -> Tensor:
        """``W_s o_t + b`` (Luong eq. 6, before the softmax), ``(..., V)``.

        An untied output layer is called as the module it is, so that one replaced by
        ``torch.ao.quantization.quantize_dynamic`` runs its int8 kernel.
        """
        if self.output is not None:
            return self.output(vectors)  # (..., V)
        return F.linear(vectors, *self.output_layer)  # (..., V)
