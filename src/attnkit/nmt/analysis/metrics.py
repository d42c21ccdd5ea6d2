"""Translation metrics: sacreBLEU, chrF, lowercased tokenized BLEU, perplexity, AER.

BLEU (Papineni et al. 2002) and chrF (Popović 2015) are computed by sacreBLEU
(Post 2018) on detokenized text, and reported with sacreBLEU's signature so
numbers are comparable across papers. ``tokenized_bleu`` lowercases both
sides — the setting of most Multi30k tutorials, which report higher numbers
than case-sensitive sacreBLEU.

BLEU splits text into words with the tokenizer sacreBLEU picks for the target
language (``tgt_lang``, the run's ``data.tgt_lang``): ``zh`` for Chinese,
``ja-mecab`` for Japanese, ``ko-mecab`` for Korean, ``13a`` for every other
language, as ``sacrebleu -l SRC-TGT`` does. Text without spaces between words
read by ``13a`` is one "word" a sentence, and BLEU near 0 for any translation.
Japanese and Korean need sacreBLEU's extras (``pip install "sacrebleu[ja]"``);
without them BLEU reads those texts character by character (``tok:char`` in
the signature) and says so in a warning.

A corpus score needs at least one sentence: every scorer raises a
``ValueError`` for empty lists (a score over no sentences is undefined, and a
0 would look like a real result). Empty strings inside a corpus are scored as
sacreBLEU scores them (an empty hypothesis matches nothing).

``alignment_error_rate`` scores word alignments against sure and possible
gold links (Och & Ney 2003).

sacreBLEU is imported when a score is first computed, so a process that
never scores (a torchrun rank other than 0, which leaves validation to rank
0) never loads it.
"""

from __future__ import annotations

import math
import operator
import re
import warnings
from collections.abc import Collection, Sequence
from dataclasses import dataclass

__all__ = [
    "AlignmentScore",
    "Link",
    "Score",
    "alignment_error_rate",
    "chrf",
    "perplexity",
    "sacre_bleu",
    "tokenized_bleu",
]

Link = tuple[int, int]  # (source word index, target word index), 0-based


@dataclass(frozen=True)
class Score:
    """A corpus-level score in [0, 100] with the sacreBLEU signature that defines it."""

    name: str
    score: float
    signature: str

    def __str__(self) -> str:
        return f"{self.name} = {self.score:.2f}  ({self.signature})"


def _check(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    for arg, lines in (("hypotheses", hypotheses), ("references", references)):
        _check_lines(arg, lines)
    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses has {len(hypotheses)} lines but references has {len(references)}"
        )
    if not hypotheses:
        raise ValueError("no sentences to score: hypotheses and references are empty")


def _check_lines(arg: str, lines: Sequence[str]) -> None:
    """``lines`` must be a sequence of strings, one sentence each (not one string)."""
    if isinstance(lines, str):
        raise TypeError(
            f"{arg} must be a list of sentences, got one string ({len(lines)} characters); "
            f"pass [{arg}] to score a single sentence"
        )
    for n, line in enumerate(lines):
        if not isinstance(line, str):
            raise TypeError(
                f"{arg}[{n}] is a {type(line).__name__}, not a string: pass one sentence a "
                "line (one reference per hypothesis, not sacreBLEU's list of reference lists)"
            )


def sacre_bleu(
    hypotheses: Sequence[str], references: Sequence[str], *, tgt_lang: str | None = None
) -> Score:
    """Corpus BLEU of detokenized hypotheses against one reference each (sacreBLEU defaults,
    with the tokenizer sacreBLEU picks for ``tgt_lang``: see the module docstring).

    Args:
        hypotheses: one detokenized translation a line.
        references: one reference a hypothesis.
        tgt_lang: the target language's code (``fr``, ``zh``, ``zh-CN``, ``ja_JP``);
            None (or any language but Chinese, Japanese, Korean): the ``13a`` tokenizer.

    Raises:
        ValueError: the lists differ in length or are empty (true of every scorer here).
        TypeError: either argument is a single string or holds a non-string
            (true of every scorer here).
    """
    _check(hypotheses, references)
    return _bleu_score("BLEU", _bleu(tgt_lang), hypotheses, references)


def tokenized_bleu(
    hypotheses: Sequence[str], references: Sequence[str], *, tgt_lang: str | None = None
) -> Score:
    """Corpus BLEU after lowercasing (for comparison with tutorials), with the tokenizer
    of :func:`sacre_bleu` (``13a`` but for Chinese, Japanese and Korean)."""
    _check(hypotheses, references)
    return _bleu_score("BLEU (lowercased)", _bleu(tgt_lang, lowercase=True), hypotheses, references)


def _bleu_score(name: str, metric, hypotheses: Sequence[str], references: Sequence[str]) -> Score:
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return Score(name, result.score, str(metric.get_signature()))


def _bleu(tgt_lang: str | None, *, lowercase: bool = False):
    """sacreBLEU's ``BLEU`` with the tokenizer it picks for ``tgt_lang`` (``char`` for
    Japanese or Korean when its MeCab extras are missing, with a warning)."""
    from sacrebleu.metrics import BLEU

    lang = _primary_language(tgt_lang)
    try:
        return BLEU(lowercase=lowercase, trg_lang=lang)
    except RuntimeError as err:  # ja-mecab / ko-mecab without sacrebleu[ja] / [ko]
        warnings.warn(
            f"BLEU for target language {tgt_lang!r} reads characters (tok:char): "
            f"sacreBLEU's tokenizer for it is not installed ({' '.join(str(err).split())})",
            stacklevel=3,
        )
        return BLEU(lowercase=lowercase, tokenize="char")


def _primary_language(tgt_lang: str | None) -> str:
    """The primary subtag of a language code as sacreBLEU's ``trg_lang`` takes it:
    ``"zh-CN"``, ``"ZH_hant"`` -> ``"zh"``; ``""`` for None."""
    return re.split(r"[-_]", tgt_lang or "", maxsplit=1)[0].lower()


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> Score:
    """Corpus chrF (character n-gram F-score, beta = 2)."""
    from sacrebleu.metrics import CHRF

    _check(hypotheses, references)
    metric = CHRF()
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return Score("chrF", result.score, str(metric.get_signature()))


def perplexity(mean_nll: float) -> float:
    """``exp(mean negative log-likelihood per token)``; ``inf`` if it would overflow, NaN
    for a NaN loss (a diverged model, not an overflow)."""
    return math.exp(mean_nll) if mean_nll < 700 or math.isnan(mean_nll) else math.inf


@dataclass(frozen=True)
class AlignmentScore:
    """Corpus-level word-alignment quality; the rates are fractions in [0, 1].

    Attributes:
        precision: ``|A ∩ P| / |A|`` (1.0 when nothing was predicted).
        recall: ``|A ∩ S| / |S|`` (1.0 when the gold has no sure link).
        aer: ``1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)``.
        predicted: ``|A|``, links predicted.
        sure: ``|S|``, sure gold links.
        possible: ``|P|``, possible gold links, sure ones included.
    """

    precision: float
    recall: float
    aer: float
    predicted: int
    sure: int
    possible: int

    def __str__(self) -> str:
        return (
            f"AER = {self.aer:.4f}  precision {self.precision:.4f}  recall {self.recall:.4f}  "
            f"({self.predicted} links; gold {self.sure} sure, {self.possible} possible)"
        )


def alignment_error_rate(
    predicted: Sequence[Collection[Link]],
    sure: Sequence[Collection[Link]],
    possible: Sequence[Collection[Link]] | None = None,
) -> AlignmentScore:
    """Precision, recall and alignment error rate of a corpus (Och & Ney 2003, sec. 5).

    With ``A`` the predicted links, ``S`` the sure and ``P ⊇ S`` the possible
    gold links, all summed over the corpus::

        precision = |A ∩ P| / |A|      recall = |A ∩ S| / |S|
        AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

    A perfect alignment (``S ⊆ A ⊆ P``) has AER 0. Sure links are added to
    ``P`` here, so a gold file may list each link once, as sure or possible.

    Args:
        predicted: per sentence, the predicted ``(source, target)`` word links.
        sure: per sentence, the sure gold links.
        possible: per sentence, the possible gold links (None: no possible links).

    Returns:
        the corpus :class:`AlignmentScore`.

    Raises:
        ValueError: the three sequences have different numbers of sentences, or
            there are no predicted and no sure links at all (AER is undefined).
        TypeError: a sentence that is a string (a Pharaoh line ``"0-0 1-2"``:
            parse it into pairs first) or a link that is not a pair of
            non-negative ints (lists such as ``[0, 1]`` from JSON are accepted).

    Source: Och & Ney 2003, "A Systematic Comparison of Various Statistical
    Alignment Models", Computational Linguistics 29(1), the AER definition
    of its evaluation methodology.
    """
    possible = [()] * len(sure) if possible is None else possible
    if not len(predicted) == len(sure) == len(possible):
        raise ValueError(
            f"predicted has {len(predicted)} sentences, sure {len(sure)} and possible "
            f"{len(possible)}; they must match"
        )
    n_a = n_s = n_p = a_s = a_p = 0
    for n, (a, s, p) in enumerate(zip(predicted, sure, possible, strict=True)):
        a, s = _links("predicted", n, a), _links("sure", n, s)
        p = _links("possible", n, p) | s
        n_a, n_s, n_p = n_a + len(a), n_s + len(s), n_p + len(p)
        a_s, a_p = a_s + len(a & s), a_p + len(a & p)
    if n_a + n_s == 0:
        raise ValueError("no predicted and no sure gold links: AER is undefined")
    return AlignmentScore(
        precision=a_p / n_a if n_a else 1.0,
        recall=a_s / n_s if n_s else 1.0,
        aer=1.0 - (a_s + a_p) / (n_a + n_s),
        predicted=n_a,
        sure=n_s,
        possible=n_p,
    )


def _links(arg: str, n: int, links: Collection[Link]) -> set[Link]:
    """One sentence's links as a set of ``(int, int)``, each index >= 0."""
    if isinstance(links, str | bytes):
        raise TypeError(
            f"{arg}[{n}] is a string ({links[:20]!r}), not a collection of (source, target) "
            "links: parse Pharaoh 'i-j' lines into pairs of ints first"
        )
    out = set()
    for link in links:
        pair = _pair(link)
        if pair is None:
            raise TypeError(
                f"{arg}[{n}] holds {link!r}: a link is a pair (source, target) of word indices >= 0"
            )
        out.add(pair)
    return out


def _pair(link: object) -> Link | None:
    """``link`` as ``(i, j)`` when it is a pair of non-negative ints (not bools), else None."""
    if isinstance(link, str | bytes) or not (isinstance(link, Sequence) or hasattr(link, "shape")):
        return None  # a set {i, j} has no order: refused too
    try:
        i, j = (operator.index(x) for x in link if not isinstance(x, bool))
    except (TypeError, ValueError):  # a non-integer, or a bool left out of the pair
        return None
    return (i, j) if min(i, j) >= 0 else None
