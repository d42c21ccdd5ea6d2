"""Who runs the search: attnkit's own greedy and beam search on the loaded model, or another
engine that returns the same hypotheses (an exported model, :mod:`attnkit.nmt.export`).

:func:`~attnkit.nmt.decoding.translate.translate_lines` asks a :class:`SearchEngine` for
the n best hypotheses of tokenized sources and turns them into translations, so every
engine feeds the one output path (stdout, attention, JSON, heatmaps, evaluation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from ..data.batching import Examples
from .search import Hypothesis, decode_n_best
from .settings import SearchSettings
from .steps import SearchModel

__all__ = ["SearchEngine", "TorchEngine"]


class SearchEngine(Protocol):
    """Finds hypotheses for tokenized sources.

    Attributes:
        name: what the engine is called in messages (``"attnkit"``, ``"ctranslate2"``).
        max_source_len: the longest source its model reads (``</s>`` included), None
            for no limit; :func:`~attnkit.nmt.decoding.translate.translate_lines` cuts
            longer sources to it.
    """

    name: str
    max_source_len: int | None

    def n_best(
        self, examples: Examples, settings: SearchSettings, n: int
    ) -> list[list[Hypothesis]]:
        """Per example (ids without specials), in input order, 1 to ``n`` hypotheses, best
        first, with the attention weights of each step (see :class:`Hypothesis`)."""
        ...


@dataclass(frozen=True)
class TorchEngine:
    """attnkit's own search (:func:`~attnkit.nmt.decoding.search.decode_n_best`) on ``model``,
    a translator or an :class:`~attnkit.nmt.decoding.ensemble.Ensemble`."""

    model: SearchModel
    device: torch.device | str = "cpu"
    name: str = "attnkit"

    @property
    def max_source_len(self) -> int | None:
        """The model's source limit: for an ensemble, the shortest of its members'."""
        return self.model.max_source_len

    def n_best(
        self, examples: Examples, settings: SearchSettings, n: int
    ) -> list[list[Hypothesis]]:
        return decode_n_best(self.model, examples, settings, n=n, device=self.device)
