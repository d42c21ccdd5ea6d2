"""The ``train.guided_alignment`` section: supervising one attention with word alignments.

Garg et al. 2019 ("Jointly Learning to Align and Translate with Transformer
Models", sec. 4) add to the translation loss the cross-entropy between one
attention head and an external aligner's links (:mod:`attnkit.nmt.training.guided_alignment`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .section import _Section

__all__ = ["GuidedAlignmentConfig"]


class GuidedAlignmentConfig(_Section):
    """Guided alignment (Garg et al. 2019): ``loss = CE + weight * alignment loss``.

    Attributes:
        file: a Pharaoh file (``i-j`` 0-based source-target word links), one line
            per line of the training corpus file(s), line-aligned with them (all
            lines: before holdout, blank-pair skipping and ``max_train_pairs``);
            an empty line means no alignment for that pair. Relative paths are
            relative to the config file (on the command line, to the current folder).
        words: what the file's word indices count (:mod:`attnkit.nmt.data.word_split`):
            ``whitespace`` (default), the line's whitespace-separated tokens
            (``"chat."`` is one word); ``punctuation``, those tokens split at
            punctuation and French elisions (``"chat ."``, ``"l' homme"``), as the
            Hansards gold sets and ``benchmarks/align_aer.py --write-labels`` split
            them. Pick the rule the aligner's input was tokenized with; with
            ``punctuation`` each subword piece belongs to the split word covering most
            of its characters (:func:`attnkit.nmt.data.word_links.split_word_pieces`).
        weight: lambda, the alignment loss's weight (Garg et al.: 0.05).
        layer: the supervised decoder layer (0-based, negative counts from the
            last); None: the penultimate layer (Garg et al.), or the only one.
        heads: the supervised heads of that layer (their mean is supervised);
            ``"all"`` for every head. Default: head 0 (Garg et al.: one head).
        shift: which decoder step's attention is supervised for target word
            ``t``: 1 (default), the step whose *input* is ``t`` (it has read the
            word it aligns, as shift-att, Chen et al. 2020, reads it); 0, the
            step that *predicts* ``t`` (it has not seen the word yet). Extract
            with the same shift (``attnkit align --shift``).
        full_context: supervise the head in a second decoder pass without the
            causal mask, run up to the supervised layer, where every target
            position sees the whole target (Garg et al. 2019, sec. 4.2;
            OpenNMT-py's ``full_context_alignment``). The translation loss keeps
            the causal pass. ``attnkit align`` then reads the run the same way.
            Transformer only; costs that partial pass (about a third more per
            step for layer 1 of 3).
    """

    file: str
    words: Literal["whitespace", "punctuation"] = "whitespace"
    weight: float = Field(0.05, gt=0)
    layer: int | None = None
    heads: list[int] | Literal["all"] = Field(default_factory=lambda: [0], min_length=1)
    shift: Literal[0, 1] = 1
    full_context: bool = False

    def decoder_layer(self, layers: int) -> int:
        """The supervised decoder layer, 0-based, in a decoder of ``layers`` layers.

        Raises:
            ValueError: the configured layer is not one of them.
        """
        if self.layer is None:
            return max(layers - 2, 0)
        if not -layers <= self.layer < layers:
            raise ValueError(
                f"train.guided_alignment.layer={self.layer} is not a decoder layer "
                f"(the model has {layers})"
            )
        return self.layer % layers

    def head_indices(self, heads: int) -> list[int]:
        """The supervised heads, 0-based, of a layer of ``heads`` heads (``all``: every one).

        Raises:
            ValueError: a configured head is not one of them, or is named twice.
        """
        picked = list(range(heads)) if self.heads == "all" else list(self.heads)
        if len(set(picked)) < len(picked):
            raise ValueError(
                f"train.guided_alignment.heads={self.heads} names a head twice (each head "
                "once: their mean is supervised)"
            )
        if any(not 0 <= h < heads for h in picked):
            raise ValueError(
                f"train.guided_alignment.heads={self.heads} names a head outside "
                f"0..{heads - 1} (the model has {heads} per layer)"
            )
        return picked

    def read_head(self) -> int | tuple[int, ...] | str:
        """The head alignments are read from, as a
        :class:`~attnkit.nmt.decoding.selection.HeadSelection` names it: the
        supervised one, the tuple of supervised heads (their mean was trained), or
        ``"mean"`` for ``all``."""
        if self.heads == "all":
            return "mean"
        return self.heads[0] if len(self.heads) == 1 else tuple(self.heads)
