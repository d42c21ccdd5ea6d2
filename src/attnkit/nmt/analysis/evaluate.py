"""Scoring a run on a whole test set: translate every line, then sacreBLEU, chrF and
lowercased BLEU.

Evaluation scores every line of a test set: an empty source gives an empty
hypothesis, and both are counted in the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..data.corpus import ParallelCorpus, load_split
from ..data.text import is_blank
from ..decoding.engine import SearchEngine
from ..decoding.settings import SearchSettings
from ..decoding.translate import translate_lines
from ..runs.loaded_run import LoadedRun
from .metrics import Score, chrf, sacre_bleu, tokenized_bleu

__all__ = ["Evaluation", "evaluate_corpus", "evaluate_run"]


@dataclass
class Evaluation:
    """Scores of one whole test set plus the hypotheses and references they came from.

    Attributes:
        name: what was scored, for messages: ``"the test split"`` or a source file.
        bleu: case-sensitive sacreBLEU over every pair, with sacreBLEU's tokenizer
            for the run's ``data.tgt_lang`` (:func:`~.metrics.sacre_bleu`).
        chrf: chrF over every pair.
        tokenized_bleu: lowercased BLEU over every pair (same tokenizer).
        hypotheses: one translation per line of the test set, in order; ``""``
            for an empty source.
        references: the reference of each line; ``""`` for an empty one.
        empty_sources: lines whose source was empty (translated as ``""``).
        empty_references: lines whose reference was empty (scored as they are).
    """

    name: str
    bleu: Score
    chrf: Score
    tokenized_bleu: Score
    hypotheses: list[str]
    references: list[str]
    empty_sources: int = 0
    empty_references: int = 0


def evaluate_corpus(
    run: LoadedRun,
    corpus: ParallelCorpus,
    name: str,
    settings: SearchSettings | None = None,
    *,
    beam_size: int | None = None,
    warn: Callable[[str], None] | None = None,
    engine: SearchEngine | None = None,
) -> Evaluation:
    """Translate every source of ``corpus`` and score the result against its references.

    Every pair counts, so the score is on the whole test set and the
    hypotheses stay line-aligned with its files: an empty source gives an
    empty hypothesis, an empty reference is scored as it is, and both are
    counted in the result.

    Args:
        run: the loaded run that translates.
        corpus: the test set, read with ``keep_empty=True``.
        name: what the test set is called in messages (``"the test split"``, a file).
        settings: the search settings (default: the run's ``decode`` section).
        beam_size: overrides the settings' beam size (1 = greedy) when given.
        warn: hears of sources truncated to :func:`input_limit` (the score then
            covers truncated inputs).
        engine: who searches (default: attnkit's own search; see
            :mod:`attnkit.nmt.decoding.engine`).

    Raises:
        ValueError: no pair has both a source and a reference
            (``no sentence pairs in the test split``).
    """
    pairs = zip(corpus.src, corpus.tgt, strict=True)
    if not any(not is_blank(s) and not is_blank(t) for s, t in pairs):
        detail = f" ({len(corpus)} lines, each with an empty side)" if len(corpus) else ""
        raise ValueError(f"no sentence pairs in {name}{detail}")
    translations = translate_lines(
        run, corpus.src, settings, beam_size=beam_size, warn=warn, engine=engine, supervised=False
    )  # the text alone is scored
    hyps = [t.text for t in translations]
    lang = run.config.data.tgt_lang  # picks sacreBLEU's tokenizer (zh, ja, ko: their own)
    return Evaluation(
        name,
        sacre_bleu(hyps, corpus.tgt, tgt_lang=lang),
        chrf(hyps, corpus.tgt),
        tokenized_bleu(hyps, corpus.tgt, tgt_lang=lang),
        hyps,
        list(corpus.tgt),
        empty_sources=sum(t.weights is None for t in translations),
        empty_references=sum(is_blank(t) for t in corpus.tgt),
    )


def evaluate_run(
    run: LoadedRun,
    split: str = "test",
    settings: SearchSettings | None = None,
    *,
    beam_size: int | None = None,
    warn: Callable[[str], None] | None = None,
    engine: SearchEngine | None = None,
) -> Evaluation:
    """Translate every line of the config's ``split`` and score it (:func:`evaluate_corpus`).

    Raises:
        ValueError: the config has no such split, a file in it is unreadable, or
            it holds no sentence pairs.
        FileNotFoundError: a file of the split is missing.
    """
    corpus = load_split(run.config.data, split, keep_empty=True)
    name = f"the {split} split"
    return evaluate_corpus(
        run, corpus, name, settings, beam_size=beam_size, warn=warn, engine=engine
    )
