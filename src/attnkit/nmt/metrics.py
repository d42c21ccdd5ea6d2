"""Translation metrics: sacreBLEU, chrF, lowercased tokenized BLEU, perplexity.

BLEU (Papineni et al. 2002) and chrF (Popović 2015) are computed by sacreBLEU
(Post 2018) on detokenized text, and reported with sacreBLEU's signature so
numbers are comparable across papers. ``tokenized_bleu`` lowercases and
applies the 13a tokenizer on both sides — the setting of most Multi30k
tutorials, which report higher numbers than case-sensitive sacreBLEU.

A corpus score needs at least one sentence: every scorer raises a
``ValueError`` for empty lists (a score over no sentences is undefined, and a
0 would look like a real result). Empty strings inside a corpus are scored as
sacreBLEU scores them (an empty hypothesis matches nothing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF

__all__ = ["Score", "chrf", "perplexity", "sacre_bleu", "tokenized_bleu"]


@dataclass(frozen=True)
class Score:
    """A corpus-level score in [0, 100] with the sacreBLEU signature that defines it."""

    name: str
    score: float
    signature: str

    def __str__(self) -> str:
        return f"{self.name} = {self.score:.2f}  ({self.signature})"


def _check(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses has {len(hypotheses)} lines but references has {len(references)}"
        )
    if not hypotheses:
        raise ValueError("no sentences to score: hypotheses and references are empty")


def sacre_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> Score:
    """Corpus BLEU of detokenized hypotheses against one reference each (sacreBLEU defaults).

    Raises:
        ValueError: the lists differ in length or are empty (true of every scorer here).
    """
    _check(hypotheses, references)
    metric = BLEU()
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return Score("BLEU", result.score, str(metric.get_signature()))


def tokenized_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> Score:
    """Corpus BLEU after lowercasing and 13a tokenization (for comparison with tutorials)."""
    _check(hypotheses, references)
    metric = BLEU(lowercase=True, tokenize="13a")
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return Score("BLEU (lowercased)", result.score, str(metric.get_signature()))


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> Score:
    """Corpus chrF (character n-gram F-score, beta = 2)."""
    _check(hypotheses, references)
    metric = CHRF()
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return Score("chrF", result.score, str(metric.get_signature()))


def perplexity(mean_nll: float) -> float:
    """``exp(mean negative log-likelihood per token)``; ``inf`` if it would overflow."""
    return math.exp(mean_nll) if mean_nll < 700 else math.inf
