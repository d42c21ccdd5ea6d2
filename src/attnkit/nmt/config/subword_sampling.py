"""The ``train.subword_sampling`` section: a new segmentation of the training text each epoch.

Subword regularization (Kudo 2018, "Subword Regularization: Improving Neural
Network Translation Models with Multiple Subword Candidates"): instead of the
one best segmentation, every epoch trains on segmentations sampled from the
sentencepiece model, so the translator sees many spellings of each word.
Validation and translation keep the best segmentation.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from .section import _Section

__all__ = ["SubwordSamplingConfig"]


class SubwordSamplingConfig(_Section):
    """Sampled segmentations of the training pairs, drawn again each epoch (Kudo 2018).

    Attributes:
        alpha: the smoothing exponent of a unigram model's sampling distribution,
            ``P(x) ~ P_unigram(x)^alpha`` (Kudo 2018, sec. 3.3): small values sample
            nearly uniformly, 1 follows the model; for a ``bpe`` model it is the
            probability of dropping a merge (BPE-dropout, Provilkov et al. 2020).
            Kudo's choice for translation: 0.1 with ``nbest_size`` 64.
        nbest_size: sample among the ``nbest_size`` best segmentations (unigram;
            2 or more), -1 among all of them. Ignored by ``bpe`` models.
        sides: which sides are sampled: ``both`` (default), ``source`` or ``target``.
    """

    alpha: float = Field(0.1, gt=0, le=1)
    nbest_size: int = 64
    sides: Literal["both", "source", "target"] = "both"

    @field_validator("nbest_size")
    @classmethod
    def _several_candidates(cls, value: int) -> int:
        if value != -1 and value < 2:
            raise ValueError(f"must be -1 (all segmentations) or 2 or more, got {value}")
        return value
