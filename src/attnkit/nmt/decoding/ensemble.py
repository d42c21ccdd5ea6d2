"""Decoding with several trained translators at once: an ensemble that averages their
predictions at every output step.

Models trained apart (other seeds, other sizes, even other architectures) make
partly independent errors, so the mean of their next-token distributions is a
better guess than any one of them: the ensemble of NMT since its beginnings
(Sutskever et al. 2014 decoded with five LSTMs; Sennrich et al. 2016, Edinburgh's
WMT16 systems), which fairseq, Marian and OpenNMT decode with. With ``M`` members the ensemble's
next-token distribution is the mean of theirs,

    log p(y_t | y_<t, x) = log( (1/M) sum_m p_m(y_t | y_<t, x) ),

computed as ``logsumexp_m(log p_m) - log M`` (fairseq's ``EnsembleModel``), and
every member keeps its own encoder memory and decoder state, reordered with the
beams. The attention weights an ensemble returns (for alignments and heatmaps)
are the mean of the members' alignment views.

:class:`Ensemble` offers what greedy and beam search ask of a model
(:class:`~attnkit.nmt.decoding.steps.SearchModel`); it decodes only: it is
neither trained nor read for attention maps. :func:`load_ensemble` builds one
from a loaded run and the folders of other runs with the same tokenizers.

Notation: ``M`` members, ``B`` rows, ``S`` source length, ``V`` target vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from ..models.translator import DecoderState, SourceMemory, Translator
from ..runs.loaded_run import LoadedRun, load_run

__all__ = ["Ensemble", "EnsembleMemory", "EnsembleState", "load_ensemble"]


@dataclass
class EnsembleMemory:
    """Each member's :class:`SourceMemory` of one source batch.

    ``mask`` and ``lengths`` are the first member's: every member read the same
    source tokens.
    """

    members: tuple[SourceMemory, ...]

    @property
    def mask(self) -> Tensor:
        """``(B, S)`` bool, True at real source tokens."""
        return self.members[0].mask

    @property
    def lengths(self) -> Tensor:
        """Real source lengths ``(B,)``, long."""
        return self.members[0].lengths

    def index_select(self, index: Tensor) -> EnsembleMemory:
        """Pick, repeat or reorder sentences in every member's memory."""
        return EnsembleMemory(tuple(memory.index_select(index) for memory in self.members))


@dataclass
class EnsembleState:
    """Each member's :class:`DecoderState`, reordered together."""

    members: tuple[DecoderState, ...]

    def index_select(self, index: Tensor) -> EnsembleState:
        """Pick, repeat or reorder rows in every member's state."""
        return EnsembleState(tuple(state.index_select(index) for state in self.members))


class Ensemble(nn.Module):
    """Several translators decoding as one, their next-token probabilities averaged.

    Args:
        members: two or more trained translators (one is allowed: it decodes as
            itself) with the same source and target vocabularies, i.e. the same
            tokenizers; any architectures.

    Raises:
        ValueError: no member, or members whose vocabulary sizes differ (the
            message names the member and both sizes).
    """

    steps_normalized = True  # step returns the mean's log-probabilities

    def __init__(self, members: Sequence[Translator]) -> None:
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one member, got none")
        first = members[0]
        for i, model in enumerate(members[1:], start=1):
            for side in ("src_vocab_size", "tgt_vocab_size"):
                if getattr(model, side) != getattr(first, side):
                    raise ValueError(
                        f"ensemble member {i} has {side}={getattr(model, side)}, member 0 "
                        f"{getattr(first, side)}: members must share their tokenizers"
                    )
        self.members = nn.ModuleList(members)

    @property
    def beams_share_memory(self) -> bool:
        """Whether beams may share one memory row: only if every member allows it."""
        return all(model.beams_share_memory for model in self.members)

    @property
    def max_target_len(self) -> int | None:
        """The smallest of the members' step limits (None if none has one)."""
        limits = [m.max_target_len for m in self.members if m.max_target_len is not None]
        return min(limits, default=None)

    @property
    def max_source_len(self) -> int | None:
        """The shortest of the members' source limits (None if none has one): a source
        every member can read."""
        limits = [m.max_source_len for m in self.members if m.max_source_len is not None]
        return min(limits, default=None)

    def encode(self, src: Tensor, src_lengths: Tensor) -> EnsembleMemory:
        """Every member's memory of ``src`` ``(B, S)`` (see ``Translator.encode``)."""
        return EnsembleMemory(tuple(model.encode(src, src_lengths) for model in self.members))

    def initial_state(self, memory: EnsembleMemory) -> EnsembleState:
        """Every member's decoder state before the first output token."""
        return EnsembleState(
            tuple(
                model.initial_state(own)
                for model, own in zip(self.members, memory.members, strict=True)
            )
        )

    def step(
        self, prev_tokens: Tensor, state: EnsembleState, memory: EnsembleMemory
    ) -> tuple[Tensor, Tensor, EnsembleState]:
        """One output step of every member, combined.

        Args:
            prev_tokens: ``y_{t-1}`` ``(B,)`` long.
            state: from :meth:`initial_state`, then the returned state.
            memory: from :meth:`encode` (possibly reordered).

        Returns:
            ``(log_probs (B, V) float32, weights (B, S) float32, new_state)``: the
            log of the members' mean next-token probability (already normalised:
            ``steps_normalized``, so the search uses it as it is) and the mean of
            their attention weights.

        Raises:
            ValueError: ``prev_tokens`` does not fit the memory (from the members).
        """
        outputs = [
            model.step(prev_tokens, own_state, own_memory)
            for model, own_state, own_memory in zip(
                self.members, state.members, memory.members, strict=True
            )
        ]
        log_probs = torch.stack([logits.float().log_softmax(dim=-1) for logits, _, _ in outputs])
        mean = log_probs.logsumexp(dim=0) - math.log(len(outputs))  # (B, V)
        weights = torch.stack([w.float() for _, w, _ in outputs]).mean(dim=0)  # (B, S)
        return mean, weights, EnsembleState(tuple(new for _, _, new in outputs))


def load_ensemble(run: LoadedRun, others: Sequence[str | Path], *, checkpoint: str) -> Ensemble:
    """``run``'s model and the same ``checkpoint`` of every run folder in ``others``.

    The members are loaded onto ``run``'s device; they decode in ``run``'s
    precision (enter ``run.precision.autocast()`` around the search), and
    ``run``'s config and tokenizers turn text into ids and back.

    Raises:
        FileNotFoundError: a folder is not a run folder or lacks the checkpoint.
        ValueError: a run's tokenizers differ from ``run``'s (the message names
            the folder and the side), or a file in it is invalid.
    """
    members = [run.model]
    for folder in others:
        other = load_run(folder, checkpoint=checkpoint, device=str(run.device))
        for side, mine, theirs in (
            ("source", run.src_tok, other.src_tok),
            ("target", run.tgt_tok, other.tgt_tok),
        ):
            if theirs.to_bytes() != mine.to_bytes():
                raise ValueError(
                    f"{other.folder}'s {side} tokenizer differs from {run.folder}'s: an "
                    "ensemble's runs must share their tokenizers (train them on the same "
                    "data with the same tokenizer settings)"
                )
        members.append(other.model)
    return Ensemble(members)
