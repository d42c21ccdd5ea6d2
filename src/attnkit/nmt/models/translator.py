"""The translator interface that every architecture implements, and its input checks.

Search, training, translation, alignment and the explorer talk to a
:class:`Translator`, never to one architecture's classes. Decoding is split
into work done once per source sentence and work done once per output step:

* ``memory = model.encode(src, src_lengths)`` runs the encoder and every
  per-source precomputation (padding mask, projected attention keys, the
  cross-attention keys/values of each layer) once. The result is a
  :class:`SourceMemory`.
* ``state = model.initial_state(memory)`` is the decoder state before the
  first output token (a :class:`DecoderState`).
* ``logits, weights, state = model.step(prev_tokens, state, memory)`` emits
  one output step: unnormalised scores over the target vocabulary and the
  attention weights over the source.
* ``logits, weights = model(src, src_lengths, tgt_in)`` is the teacher-forced
  pass used for training; it equals running :meth:`Translator.step` over
  ``tgt_in`` one token at a time. With ``logits=False`` it stops before the
  output layer (``model.output_layer``), so the loss can apply that layer
  itself, a block of rows at a time (:mod:`attnkit.nmt.training.vocab_loss`).
* ``model.attention_maps(src, src_lengths, tgt_in)`` is the same forced pass
  returning every attention weight, per layer and head (:class:`AttentionMaps`):
  cross-attention for every architecture, self-attention where there is some.

Beam search reorders the two parts separately: the decoder state after every
step (``state.index_select(rows)``), the memory only when sentences are
expanded to beams or leave the batch, so per-source tensors are never copied
once per step.

Notation: ``B`` batch (or ``N`` beam rows), ``S`` source length, ``T``
target length, ``V`` target vocabulary size.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...attention.masks import values_unreadable
from ..vocab_ids import NUM_SPECIAL

__all__ = [
    "AttentionLayout",
    "AttentionMaps",
    "DecoderState",
    "SourceMemory",
    "Translator",
    "check_ids",
    "check_source",
    "describe_tensor",
]

_Self = TypeVar("_Self")

# Token ids: the dtypes nn.Embedding takes. Lengths: the integer dtypes torch reduces and
# compares (its uint16/uint32/uint64, the token store's dtypes, lack min and max on the CPU).
TOKEN_DTYPES = (torch.int64, torch.int32)
LENGTH_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


class SourceMemory(Protocol):
    """What the decoder reads from a source batch, computed once per sentence.

    Every architecture's memory carries at least these fields.

    Attributes:
        mask: ``(B, S)`` bool, True at real source tokens (may be attended).
        lengths: real source lengths ``(B,)``, long.
    """

    mask: Tensor
    lengths: Tensor

    def index_select(self: _Self, index: Tensor) -> _Self:
        """Pick, repeat or reorder sentences: ``index`` ``(B',)`` long -> batch ``B'``."""
        ...


class DecoderState(Protocol):
    """What one decoder step hands to the next (recurrent state, KV caches)."""

    def index_select(self: _Self, index: Tensor) -> _Self:
        """Pick, repeat or reorder rows: ``index`` ``(B',)`` long -> batch ``B'``."""
        ...


@dataclass
class AttentionMaps:
    """Every attention weight of one forced-decoding pass, per layer and head.

    Attributes:
        cross: decoder-to-source attention ``(B, L, H, T, S)``, float; an RNN
            decoder has one layer and one head.
        encoder: source self-attention ``(B, Le, H, S, S)``, or None (an RNN
            encoder has no attention).
        decoder: target self-attention ``(B, Ld, H, T, T)``: causal (exactly 0
            above the diagonal) unless read with ``full_context``; or None.
    """

    cross: Tensor
    encoder: Tensor | None = None
    decoder: Tensor | None = None


@dataclass(frozen=True)
class AttentionLayout:
    """How many layers and heads :meth:`Translator.attention_maps` returns, without running it.

    Attributes:
        layers: ``L``, decoder layers with cross-attention (1 for an RNN).
        heads: ``H``, heads per attention layer (1 for an RNN).
        encoder_layers: ``Le``, encoder layers with self-attention; 0 when the
            encoder has none (an RNN).
        decoder_self_attention: whether the decoder has causal self-attention.
        alignment_layer: the decoder layer (0-based) whose head-averaged
            cross-attention :meth:`Translator.step` returns.
    """

    layers: int
    heads: int
    encoder_layers: int = 0
    decoder_self_attention: bool = False
    alignment_layer: int = 0


class Translator(nn.Module, ABC):
    """An encoder-decoder translator with attention (see the module docstring).

    Subclasses implement the architecture in :meth:`_encode`, :meth:`_step`
    and :meth:`_teacher_forced`; the public methods here check their inputs
    first, so every architecture rejects bad input with the same messages.

    A subclass whose :meth:`step` can read one memory row for several decoder
    rows sets ``beams_share_memory = True``: it then accepts ``prev_tokens`` of
    ``k * B`` rows for a memory of ``B`` sentences, row ``r`` reading sentence
    ``r // k``, and beam search keeps one copy of each source instead of ``k``.
    ``steps_normalized`` is False: :meth:`step` returns logits, which the search
    normalises (an ensemble of translators, already normalised, says True).
    ``max_target_len`` is the most decoder steps the model can take (a table of
    positions ends there; ``</s>`` included), None for no limit: the search stops
    every hypothesis there, whatever ``max_len_a``/``max_len_b`` allow.
    ``max_source_len`` is the longest source the encoder reads (``</s>`` included),
    None for no limit: translation cuts longer sources to it, with a warning.

    Args:
        src_vocab_size: source vocabulary size, including the special tokens.
        tgt_vocab_size: V, target vocabulary size, including the special tokens.

    Raises:
        ValueError: a vocabulary smaller than the special tokens plus one symbol.
    """

    beams_share_memory: bool = False
    steps_normalized: bool = False
    max_target_len: int | None = None
    max_source_len: int | None = None

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int) -> None:
        super().__init__()
        for arg, size in (("src_vocab_size", src_vocab_size), ("tgt_vocab_size", tgt_vocab_size)):
            if not isinstance(size, int) or size <= NUM_SPECIAL:
                raise ValueError(
                    f"{arg} must be an int > {NUM_SPECIAL} (the special tokens plus at "
                    f"least one symbol), got {size!r}"
                )
        self.src_vocab_size = src_vocab_size
        self.tgt_vocab_size = tgt_vocab_size

    # ------------------------------------------------------------ public API
    def encode(self, src: Tensor, src_lengths: Tensor) -> SourceMemory:
        """Encode a source batch and do all per-source work once.

        Args:
            src: ``(B, S)`` long, padded with PAD.
            src_lengths: ``(B,)`` integer, each in ``[1, S]``, any order.

        Returns:
            the architecture's :class:`SourceMemory` for batch ``B``.

        Raises:
            ValueError: bad shapes or dtypes, lengths outside ``[1, S]``, or token
                ids outside the source vocabulary.
        """
        check_source(src, src_lengths)
        check_ids("src", src, self.src_vocab_size)
        return self._encode(src, src_lengths)

    @property
    @abstractmethod
    def attention_layout(self) -> AttentionLayout:
        """The layer and head counts of :meth:`attention_maps` (read from the architecture)."""

    @property
    @abstractmethod
    def output_layer(self) -> tuple[Tensor, Tensor | None]:
        """The output layer's ``(weight (V, Do), bias (V,) or None)``: the logits of
        output vectors ``o`` ``(..., Do)`` are ``o W^T + b`` (see :meth:`project`)."""

    def project(self, vectors: Tensor) -> Tensor:
        """Logits ``(..., V)`` of output vectors ``(..., Do)`` (``forward(logits=False)``)."""
        weight, bias = self.output_layer
        return F.linear(vectors, weight, bias)

    @abstractmethod
    def initial_state(self, memory: SourceMemory) -> DecoderState:
        """The decoder state before the first output token, for ``memory``'s batch."""

    def step(
        self, prev_tokens: Tensor, state: DecoderState, memory: SourceMemory
    ) -> tuple[Tensor, Tensor, DecoderState]:
        """One output step (greedy and beam search).

        Args:
            prev_tokens: ``y_{t-1}`` ``(B,)`` long; BOS at the first step.
            state: :meth:`initial_state` at the first step, then the returned state.
            memory: from :meth:`encode` (possibly reordered with ``index_select``);
                with ``beams_share_memory``, ``B / k`` sentences for ``k`` rows each.

        Returns:
            ``(logits (B, V), weights (B, S), new_state)``: unnormalised scores
            (apply ``log_softmax`` for log-probabilities) and the attention
            weights over the source (the architecture's alignment view).

        Raises:
            ValueError: ``prev_tokens`` is not ``(B,)`` int64/int32 with the batch of
                ``memory`` (or, with ``beams_share_memory``, a multiple of it).
        """
        batch = memory.lengths.shape[0]
        rows = prev_tokens.shape[0] if isinstance(prev_tokens, Tensor) and prev_tokens.dim() else 0
        shared = self.beams_share_memory and rows > 0 and batch > 0 and rows % batch == 0
        if (
            not isinstance(prev_tokens, Tensor)
            or prev_tokens.shape != ((rows,) if shared else (batch,))
            or prev_tokens.dtype not in TOKEN_DTYPES
        ):
            multiple = " or a multiple of it" if self.beams_share_memory else ""
            raise ValueError(
                f"prev_tokens must be a 1-D int64 or int32 tensor (B={batch}{multiple},) "
                f"matching memory, got {describe_tensor(prev_tokens)}"
                f"{_convert_hint(prev_tokens, TOKEN_DTYPES)}"
            )
        return self._step(prev_tokens, state, memory)

    def forward(
        self,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        *,
        teacher_forcing: float = 1.0,
        need_weights: bool = True,
        supervised_layer: int | None = None,
        full_context: bool = False,
        logits: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher-forced decoding of the target: logits and attention weights.

        Args:
            src: ``(B, S)`` long, padded with PAD.
            src_lengths: ``(B,)`` integer, any order.
            tgt_in: ``[BOS, y_1 .. y_{T-1}]`` ``(B, T)`` long, padded with PAD.
            teacher_forcing: probability in [0, 1] of feeding the gold token at
                each step; below 1 the model's own argmax is fed otherwise, on
                the step-by-step path.
            need_weights: return the weights; with False an architecture may
                skip computing them and return None (training does this).
            supervised_layer: guided alignment: return instead the
                cross-attention of this decoder layer (0-based) per head,
                ``(B, H, T, S)``, as the softmax made it (before attention
                dropout), with gradient; only that layer computes explicit
                weights. Needs ``teacher_forcing`` 1.
            full_context: with ``supervised_layer``, read those weights from a
                second decoder pass without the causal mask, up to that layer:
                each target position sees the whole target (Garg et al. 2019,
                sec. 4.2). Needs decoder self-attention (a Transformer).
            logits: with False, return the output vectors ``(B, T, Do)`` that
                :meth:`project` (the output layer) turns into the logits.
                Needs ``teacher_forcing`` 1.

        Returns:
            ``(logits (B, T, V), weights (B, T, S) or None)``, float: the same
            alignment view as :meth:`step`. Positions past a target's end hold
            values the loss should ignore (PAD targets). With
            ``supervised_layer``: ``(logits, weights (B, H, T, S))``.

        Raises:
            ValueError: bad shapes or dtypes, mismatched batch sizes, token ids
                outside the vocabularies, ``teacher_forcing`` outside [0, 1], or
                below 1 with ``supervised_layer`` or ``logits=False``;
                ``full_context`` without ``supervised_layer`` or on a decoder
                without self-attention.
        """
        if not 0.0 <= teacher_forcing <= 1.0:
            raise ValueError(f"teacher_forcing must be in [0, 1], got {teacher_forcing}")
        if not logits and teacher_forcing < 1.0:
            raise ValueError("logits=False needs teacher_forcing 1.0")
        if full_context and supervised_layer is None:
            raise ValueError("full_context needs supervised_layer")
        self._check_full_context(full_context)
        memory = self.encode(src, src_lengths)  # checks src and src_lengths first
        self._check_target(tgt_in, src)
        if supervised_layer is not None:
            if teacher_forcing < 1.0:
                raise ValueError("supervised_layer needs teacher_forcing 1.0")
            if not 0 <= supervised_layer < self.attention_layout.layers:
                raise ValueError(
                    f"supervised_layer={supervised_layer} is not a decoder layer "
                    f"(layers={self.attention_layout.layers})"
                )
            vectors, weights = self._supervised(tgt_in, memory, supervised_layer, full_context)
        elif teacher_forcing < 1.0:
            return self._free_running(tgt_in, memory, teacher_forcing)
        else:
            vectors, weights = self._teacher_forced(tgt_in, memory, need_weights)
        return (self.project(vectors) if logits else vectors), weights

    def _supervised(
        self, tgt_in: Tensor, memory: SourceMemory, layer: int, full_context: bool = False
    ) -> tuple[Tensor, Tensor]:
        """Output vectors ``(B, T, Do)`` and layer ``layer``'s per-head cross-attention
        ``(B, H, T, S)`` (see forward)."""
        raise NotImplementedError(f"{type(self).__name__} does not support guided alignment")

    def attention_maps(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, *, full_context: bool = False
    ) -> AttentionMaps:
        """Forced decoding of ``tgt_in`` returning every attention weight.

        Args:
            src: ``(B, S)`` long, padded with PAD.
            src_lengths: ``(B,)`` integer, any order.
            tgt_in: ``[BOS, y_1 .. y_{T-1}]`` ``(B, T)`` long, padded with PAD.
            full_context: decode without the causal mask, each target position
                seeing the whole target: how a run trained with
                ``train.guided_alignment.full_context`` is read. Needs decoder
                self-attention (a Transformer).

        Returns:
            :class:`AttentionMaps`; its cross-attention, averaged the way
            :meth:`step` averages, equals the weights of step-by-step decoding.

        Raises:
            ValueError: as :meth:`forward`.
        """
        self._check_full_context(full_context)
        check_source(src, src_lengths)
        check_ids("src", src, self.src_vocab_size)
        self._check_target(tgt_in, src)
        return self._attention_maps(src, src_lengths, tgt_in, full_context)

    def _check_full_context(self, full_context: bool) -> None:
        if full_context and not self.attention_layout.decoder_self_attention:
            raise ValueError(
                f"full_context needs a decoder with self-attention; {type(self).__name__} "
                "reads the target left to right"
            )

    def _check_target(self, tgt_in: Tensor, src: Tensor) -> None:
        if not isinstance(tgt_in, Tensor) or tgt_in.dim() != 2 or tgt_in.dtype not in TOKEN_DTYPES:
            raise ValueError(
                f"tgt_in must be a 2-D int64 or int32 tensor (B, T), got "
                f"{describe_tensor(tgt_in)}{_convert_hint(tgt_in, TOKEN_DTYPES)}"
            )
        if tgt_in.shape[0] != src.shape[0] or tgt_in.shape[1] == 0:
            raise ValueError(
                f"tgt_in must be (B={src.shape[0]}, T>=1) to match src {tuple(src.shape)}, "
                f"got {tuple(tgt_in.shape)}"
            )
        check_ids("tgt_in", tgt_in, self.tgt_vocab_size)

    def _free_running(
        self, tgt_in: Tensor, memory: SourceMemory, teacher_forcing: float
    ) -> tuple[Tensor, Tensor]:
        """Step loop feeding the model's own argmax with probability ``1 - teacher_forcing``."""
        state, tokens = self.initial_state(memory), tgt_in[:, 0]
        logits, weights = [], []
        for t in range(tgt_in.shape[1]):
            step_logits, step_weights, state = self._step(tokens, state, memory)
            logits.append(step_logits)
            weights.append(step_weights)
            if t + 1 < tgt_in.shape[1]:
                use_gold = torch.rand(tokens.shape, device=tokens.device) < teacher_forcing
                tokens = torch.where(use_gold, tgt_in[:, t + 1], step_logits.argmax(-1))
        return torch.stack(logits, dim=1), torch.stack(weights, dim=1)  # (B, T, V), (B, T, S)

    # ------------------------------------------------------- per architecture
    @abstractmethod
    def _encode(self, src: Tensor, src_lengths: Tensor) -> SourceMemory:
        """:meth:`encode` on checked input."""

    @abstractmethod
    def _step(
        self, prev_tokens: Tensor, state: DecoderState, memory: SourceMemory
    ) -> tuple[Tensor, Tensor, DecoderState]:
        """:meth:`step` on checked input."""

    @abstractmethod
    def _teacher_forced(
        self, tgt_in: Tensor, memory: SourceMemory, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """:meth:`forward` with full teacher forcing, on checked input, stopping before
        the output layer: output vectors ``(B, T, Do)`` and the weights (or None)."""

    @abstractmethod
    def _attention_maps(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, full_context: bool = False
    ) -> AttentionMaps:
        """:meth:`attention_maps` on checked input."""


def check_ids(arg: str, ids: Tensor, vocab_size: int) -> None:
    """Raise a ValueError naming ``arg`` if a token id lies outside ``[0, vocab_size)``.

    Not while ``torch.export`` traces nor under ``torch.func`` transforms
    (:func:`~attnkit.attention.masks.values_unreadable`).
    """
    if values_unreadable():
        return
    low, high = _bounds(ids)
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"{arg} holds token ids in [{low}, {high}] but the vocabulary has {vocab_size} "
            f"symbols (ids 0..{vocab_size - 1})"
        )


def check_source(src: Tensor, src_lengths: Tensor) -> None:
    """Check a padded source batch and its lengths; raise a ValueError naming the argument.

    Raises:
        ValueError: ``src`` is not a 2-D int64/int32 tensor ``(B, S)`` (the token ids
            an embedding takes), ``src_lengths`` is not 1-D integer ``(B,)`` (bool and
            the unsigned 16-64-bit dtypes refused), or a length is outside ``[1, S]``
            (checked unless ``torch.export`` traces or a ``torch.func`` transform runs:
            :func:`~attnkit.attention.masks.values_unreadable`).
    """
    if not isinstance(src, Tensor) or src.dim() != 2 or src.dtype not in TOKEN_DTYPES:
        raise ValueError(
            f"src must be a 2-D int64 or int32 tensor (B, S), got "
            f"{describe_tensor(src)}{_convert_hint(src, TOKEN_DTYPES)}"
        )
    if (
        not isinstance(src_lengths, Tensor)
        or src_lengths.dim() != 1
        or src_lengths.dtype not in LENGTH_DTYPES
    ):
        raise ValueError(
            f"src_lengths must be a 1-D integer tensor (B,), got "
            f"{describe_tensor(src_lengths)}{_convert_hint(src_lengths, LENGTH_DTYPES)}"
        )
    if src_lengths.shape[0] != src.shape[0]:
        raise ValueError(
            f"src_lengths has B={src_lengths.shape[0]} but src has B={src.shape[0]} "
            f"(src {tuple(src.shape)}, src_lengths {tuple(src_lengths.shape)})"
        )
    if src.shape[0] == 0:
        raise ValueError("src is an empty batch (B=0)")
    if values_unreadable():
        return
    low, high = _bounds(src_lengths)
    if low < 1 or high > src.shape[1]:
        raise ValueError(
            f"src_lengths must lie in [1, S={src.shape[1]}], got min {low} and max {high}"
        )


def _bounds(t: Tensor) -> tuple[int, int]:
    """``t``'s smallest and largest values in one pass and one read back to the host
    (``int(t.min()), int(t.max())`` waited for a GPU twice; every training step checks
    three tensors)."""
    low, high = torch.stack(torch.aminmax(t)).tolist()
    return low, high


def _convert_hint(t: object, allowed: tuple[torch.dtype, ...]) -> str:
    """``; convert it with .long()`` for an integer (or bool) tensor of a dtype not ``allowed``."""
    if not isinstance(t, Tensor) or t.dtype in allowed or t.is_floating_point() or t.is_complex():
        return ""
    return "; convert it with .long()"


def describe_tensor(t: object) -> str:
    """``shape (…) dtype …`` for a tensor, else the type name (for error messages)."""
    if isinstance(t, Tensor):
        return f"shape {tuple(t.shape)} dtype {t.dtype}"
    return type(t).__name__
