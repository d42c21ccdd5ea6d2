"""What greedy and beam search share: what they ask of a model (:class:`SearchModel`), the
:class:`Hypothesis` they return, one decoder step as log-probabilities, the length
limits, and n-gram blocking.

Notation: ``N`` rows (sentences, or sentences times beams), ``t`` steps so
far, ``S`` source length, ``V`` target vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from ..models.translator import DecoderState, SourceMemory
from ..vocab_ids import BOS, PAD
from .value_equality import compared_by_value

__all__ = ["Hypothesis", "SearchModel", "block_repeats", "max_lengths", "next_log_probs"]


class SearchModel(Protocol):
    """What greedy and beam search ask of a model: a
    :class:`~attnkit.nmt.models.translator.Translator` (whose methods say what each
    does), or an :class:`~attnkit.nmt.decoding.ensemble.Ensemble` of them.

    ``train``/``eval``/``training`` are ``nn.Module``'s: the search runs in eval mode.
    """

    training: bool
    steps_normalized: bool  # step returns log-probabilities, not logits
    max_target_len: int | None  # the most steps the model can take; None: no limit
    max_source_len: int | None  # the longest source it reads, </s> included; None: no limit

    @property
    def beams_share_memory(self) -> bool: ...

    def encode(self, src: Tensor, src_lengths: Tensor) -> SourceMemory: ...

    def initial_state(self, memory: Any) -> DecoderState: ...

    def step(
        self, prev_tokens: Tensor, state: Any, memory: Any
    ) -> tuple[Tensor, Tensor, DecoderState]: ...

    def train(self, mode: bool = True) -> Any: ...

    def eval(self) -> Any: ...


@compared_by_value
@dataclass
class Hypothesis:
    """One translation of one sentence.

    Attributes:
        tokens: output token ids, without ``<bos>`` and ``<eos>``.
        weights: attention weights ``(n_steps, S_i)``, float, on the CPU, one row
            per output step: ``len(tokens) + 1`` rows when the hypothesis ended
            with ``<eos>`` (the last row is the ``<eos>`` step), ``len(tokens)``
            when it hit the length limit. ``S_i`` is the sentence's real length.
        score: the ranking score: the log-probability for greedy decoding, the
            length-normalised log-probability for beam search.
        log_prob: ``log p(y | x)`` summed over the output steps (incl. ``<eos>``).
    """

    tokens: list[int]
    weights: Tensor
    score: float
    log_prob: float

    @property
    def ended(self) -> bool:
        """Whether the hypothesis emitted ``<eos>`` (rather than hitting the limit)."""
        return self.weights.shape[0] > len(self.tokens)


_NO_LIMIT = 2**31 - 1  # steps: "no limit" in practice, and an int32 for CTranslate2


def max_lengths(
    src_lengths: Tensor, max_len_a: float, max_len_b: float, cap: int | None = None
) -> Tensor:
    """Per-sentence step limits ``min(int(a * src_len + b), cap)`` ``(B,)``; each must be >= 1,
    and none is above ``2**31 - 1`` (a huge ``a`` means no limit).

    ``cap``: the model's own limit (``SearchModel.max_target_len``), None for none.
    """
    limits = (max_len_a * src_lengths.double() + max_len_b).floor()  # (B,)
    limits = limits.clamp(-_NO_LIMIT, _NO_LIMIT).long()  # 1e30 would wrap round to -2**63
    if cap is not None:
        limits = limits.clamp(max=cap)
    if limits.numel() and int(limits.min()) < 1:
        raise ValueError(
            f"max_len_a={max_len_a} and max_len_b={max_len_b} give a length limit "
            f"{int(limits.min())} < 1 for a source of length "
            f"{int(src_lengths[limits.argmin()])}"
        )
    return limits


def next_log_probs(
    model: SearchModel, tokens: Tensor, state: DecoderState, memory: SourceMemory
) -> tuple[Tensor, Tensor, DecoderState]:
    """One step: log-probabilities ``(N, V)`` with PAD and BOS ruled out, weights ``(N, S)``."""
    logits, weights, state = model.step(tokens, state, memory)
    log_probs = logits if model.steps_normalized else logits.float().log_softmax(dim=-1)  # (N, V)
    log_probs[:, PAD] = -torch.inf
    log_probs[:, BOS] = -torch.inf
    return log_probs, weights, state


def block_repeats(log_probs: Tensor, history: Tensor, n: int) -> None:
    """Rule out, in place, each row's tokens that would repeat an n-gram of its ``history``.

    ``log_probs`` ``(N, V)``; ``history`` ``(N, t)`` long, the tokens emitted so
    far (no ``<bos>``); ``n <= 0`` blocks nothing. ``<eos>`` never appears in a
    live history, so some token always stays allowed. Only the matching n-grams'
    last tokens are written: no ``(N, V)`` buffer is made.
    """
    if n <= 0 or history.shape[1] < n:
        return
    grams = history.unfold(1, n, 1)  # (N, G, n), every n-gram so far
    prefix = history[:, history.shape[1] - (n - 1) :]  # (N, n-1), the newest n-1 tokens
    match = (grams[:, :, :-1] == prefix[:, None, :]).all(dim=-1)  # (N, G)
    rows, gram = match.nonzero(as_tuple=True)  # (M,) each: the n-grams the next token would close
    log_probs[rows, grams[rows, gram, -1]] = -torch.inf
