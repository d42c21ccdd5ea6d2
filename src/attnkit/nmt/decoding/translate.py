"""Translating text with a loaded run: clean and tokenize lines, search, and return translations.

Search is greedy for ``beam_size == 1`` and beam search otherwise
(:mod:`attnkit.nmt.decoding.search`); sentences are decoded in length-sorted batches
and returned in input order. Empty input lines — blank after the tokenizer's
normalisation (:func:`attnkit.nmt.data.text.is_blank`: a byte order mark, a
zero-width space or a direction mark is as empty as a space) — give empty
translations, so output lines always stay aligned with input lines.

Odd input never crashes translation: unseen characters and other scripts
become ``<unk>``, inputs longer than the model's limit (:func:`input_limit`)
are truncated with a warning, and a translation never contains a line break.
(Bytes that are not UTF-8 are replaced by U+FFFD when stdin is split into
lines: :class:`attnkit.nmt.decoding.streaming.LineSplitter`.) Every command
that feeds text to the model (translate, evaluate, inspect, the explorer)
prepares it with :func:`prepare_sources`, so they all see the same tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from torch import Tensor

from ..config import RunConfig
from ..data.batching import Examples
from ..data.text import is_blank
from ..runs.loaded_run import LoadedRun
from ..vocab_ids import EOS, SPECIAL_TOKENS
from .engine import SearchEngine, TorchEngine
from .search import Hypothesis
from .settings import SearchSettings
from .supervised import SupervisedHeads, supervised_weights
from .value_equality import compared_by_value

__all__ = [
    "Sources",
    "Translation",
    "alignment_text",
    "input_limit",
    "prepare_sources",
    "translate_lines",
]

EOS_LABEL = SPECIAL_TOKENS[EOS]
DEFAULT_INPUT_LIMIT = 256
# What str.splitlines() breaks on besides "\n"; none may appear inside an output line.
_LINE_BREAKS = re.compile("[\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
_NEWLINE = re.compile("\r?\n")  # where a corpus file's lines end: in no line of training text


@compared_by_value
@dataclass
class Translation:
    """One translated sentence and the attention that produced it.

    ``weights`` is (T, S): row t is the attention of output token t (the last
    row is the EOS step when EOS was produced) over ``src_pieces`` (the source
    subwords and EOS); ``weights_from`` says which: ``"search"``, the search's
    own view (the alignment layer's head mean at the step predicting the
    token; an ensemble's says it is the mean of its models' views), or for a
    guided-alignment run its supervised heads as trained
    (:mod:`attnkit.nmt.decoding.supervised`; e.g. ``"supervised heads: layer 1,
    head 0, shift 1"``). Empty input gives an empty translation with no weights.
    ``src_ids`` (without EOS) and ``output_ids`` (EOS included when produced)
    are what :func:`attnkit.nmt.decoding.views.attention_views` needs to show every
    layer and head. ``hypotheses`` holds, when :func:`translate_lines` was asked
    for ``n_best``, the search's best hypotheses as translations of the same
    source, best first (the first is this translation); else it is empty.
    """

    source: str
    text: str
    src_pieces: list[str]
    tgt_pieces: list[str]
    weights: Tensor | None
    score: float = 0.0
    truncated_from: int | None = None  # source length in tokens before truncation
    src_ids: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    hypotheses: list[Translation] = field(default_factory=list)  # the n best, when asked
    weights_from: str = "search"


def input_limit(config: RunConfig, max_source_len: int | None = None) -> int:
    """Longest source (tokens, without EOS) translated: ``decode.max_input_len``, else
    ``data.max_src_len`` (what the model was trained on), else 256; never more than
    a Transformer's ``model.max_positions`` minus the EOS, nor than ``max_source_len``
    (the searching model's own limit, EOS included: an ensemble's shortest) minus the EOS."""
    limit = config.decode.max_input_len or config.data.max_src_len or DEFAULT_INPUT_LIMIT
    positions = getattr(config.model, "max_positions", None)  # the RNN has no table
    for cap in (positions, max_source_len):
        limit = limit if cap is None else min(limit, cap - 1)
    return limit


def _valid(text: str) -> str:
    """``text`` as valid Unicode: lone surrogates (from undecodable argv bytes) -> U+FFFD."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _clean(text: str) -> str:
    """Valid Unicode on one line (:func:`_valid`, each line break -> a space)."""
    return _LINE_BREAKS.sub(" ", _valid(text))


@dataclass
class Sources:
    """Lines made ready for search by :func:`prepare_sources`.

    Attributes:
        lines: every input line, cleaned (valid Unicode, on one line) for display; the
            tokenizer reads it before its line breaks became spaces, as training read it.
        wanted: indices of the lines that have tokens (the others are blank).
        ids: per wanted line, its token ids (no specials), cut to the input limit.
        lengths: per wanted line, its token count before the cut.
    """

    lines: list[str]
    wanted: list[int]
    ids: list[list[int]]
    lengths: list[int]


def prepare_sources(
    run: LoadedRun,
    lines: Iterable[str],
    *,
    warn: Callable[[str], None] | None = None,
    first_line: int = 1,
    max_source_len: int | None = None,
) -> Sources:
    """Clean, blank-check, tokenize and truncate source lines: what the model will read.

    A line is blank when :func:`attnkit.nmt.data.text.is_blank` says so, or (a
    guard for a tokenizer that normalises more away) when it encodes to no
    tokens; blank lines are left out of ``ids``. Sources longer than
    :func:`input_limit` tokens (with ``max_source_len``, the searching model's
    limit) are cut to it; ``warn`` is told which line and how long it was,
    counting ``lines[0]`` as line ``first_line``.

    Raises:
        TypeError: ``lines`` is a str (a sequence of its characters, each of
            which would be translated as a line), or a line is not a str (it is
            named: None, bytes, a float NaN from an empty table cell).
    """
    if isinstance(lines, str):
        raise TypeError("lines must be a sequence of lines, got a str; pass [text] for one line")
    lines = list(lines)  # an open file or a generator is read once: by the check below
    for i, line in enumerate(lines):
        if not isinstance(line, str):
            raise TypeError(
                f"line {i + first_line} is a {type(line).__name__}, not a str: {line!r}"
            )
    limit = input_limit(run.config, max_source_len)
    # tokenized with its line breaks (U+0085, U+001C, ...) as a corpus line is in training
    # (sentencepiece keeps some, deletes others); shown with each as a space. A line of
    # training text never holds "\n" (nor the "\r" of a "\r\n"): that is a space, as it
    # was, not a character an identity-normalizing tokenizer reads as <unk>
    lines = [_NEWLINE.sub(" ", _valid(line)) for line in lines]
    encoded = {i: run.src_tok.encode(s.strip()) for i, s in enumerate(lines) if not is_blank(s)}
    wanted = [i for i, x in encoded.items() if x]
    lengths = [len(encoded[i]) for i in wanted]
    for i, n in zip(wanted, lengths, strict=True):
        if n > limit and warn is not None:
            warn(f"line {i + first_line}: {n} tokens, truncated to the model's limit of {limit}")
    shown = [_LINE_BREAKS.sub(" ", line) for line in lines]
    return Sources(shown, wanted, [encoded[i][:limit] for i in wanted], lengths)


def translate_lines(
    run: LoadedRun,
    lines: Iterable[str],
    settings: SearchSettings | None = None,
    *,
    beam_size: int | None = None,
    n_best: int = 0,
    warn: Callable[[str], None] | None = None,
    first_line: int = 1,
    engine: SearchEngine | None = None,
    supervised: bool = True,
) -> list[Translation]:
    """Translate each line; blank lines translate to ``""``. One result per line, same order.

    Args:
        run: the loaded run.
        lines: source text, one sentence per line: a list, an open text file or any
            iterable of str (see :func:`prepare_sources`).
        settings: the search settings (default: the run's ``decode`` section).
        beam_size: overrides ``settings.beam_size`` when given.
        n_best: keep this many of the search's best hypotheses in each
            translation's ``hypotheses`` (0: none; greedy search has one).
        warn: hears of truncated sources (:func:`prepare_sources`).
        first_line: the number of ``lines[0]`` in warnings (a buffer of a longer
            stream passes its first line's number).
        engine: who searches (default: attnkit's own search on ``run.model``);
            an exported model's engine gives the same kind of translations. Sources
            are cut to what its model reads (``engine.max_source_len``: an
            ensemble's shortest member) as well as to :func:`input_limit`.
        supervised: read a guided-alignment run's supervised heads as the weights
            (see below); False skips that forced pass where only the text is used.

    The search runs in ``run.precision`` (``load_run(..., precision=...)``). A run
    trained with guided alignment gets, after attnkit's own search, one forced pass
    that reads its supervised heads as the translations' weights (``weights_from``).

    Raises:
        ValueError: bad settings, a length limit < 1, or ``n_best`` < 0.
        TypeError: ``lines`` is a str, not a sequence of lines, or holds a non-str;
            ``n_best`` is not an int.
    """
    if not isinstance(n_best, int) or isinstance(n_best, bool):
        raise TypeError(f"n_best must be an int, got {type(n_best).__name__} {n_best!r}")
    if n_best < 0:
        raise ValueError(f"n_best must be >= 0 (0: no hypotheses kept), got {n_best}")
    settings = settings or SearchSettings.from_config(run.config.decode)
    settings = settings.with_overrides(beam_size=beam_size)
    engine = engine or TorchEngine(run.model, run.device)
    sources = prepare_sources(
        run, lines, warn=warn, first_line=first_line, max_source_len=engine.max_source_len
    )
    with run.precision.autocast():  # the run's arithmetic, in this thread
        found = engine.n_best(Examples(sources.ids), settings, max(n_best, 1))
    results = [Translation(line, "", [], [], None) for line in sources.lines]
    for i, src_ids, n, hyps in zip(
        sources.wanted, sources.ids, sources.lengths, found, strict=True
    ):
        results[i] = _translation(run, sources.lines[i], src_ids, hyps[0])
        results[i].truncated_from = n if n > len(src_ids) else None
        if n_best:
            results[i].hypotheses = [_translation(run, sources.lines[i], src_ids, h) for h in hyps]
    members = len(getattr(getattr(engine, "model", None), "members", ()))
    if members > 1:  # an ensemble: the mean of its members' views, not one softmax
        for t in (t for r in results for t in (r, *r.hypotheses)):
            t.weights_from = f"search, the mean of {members} models' views"
    if supervised and isinstance(engine, TorchEngine) and engine.model is run.model:
        _read_supervised(run, results)
    return results


def _read_supervised(run: LoadedRun, results: list[Translation]) -> None:
    """A guided-alignment run's translations (and hypotheses) get the attention it was
    trained on as their weights (:mod:`~attnkit.nmt.decoding.supervised`); others keep
    search's own."""
    heads = SupervisedHeads.of_run(run.config, run.model.attention_layout)
    if heads is None:
        return
    shown = [t for r in results for t in (r, *r.hypotheses[1:]) if t.output_ids]
    with run.precision.autocast():
        weights = supervised_weights(
            run.model,
            heads,
            [t.src_ids for t in shown],
            [t.output_ids for t in shown],
            device=run.device,
        )
    for t, w in zip(shown, weights, strict=True):
        t.weights, t.weights_from = w, f"supervised heads: {heads.caption()}"
    for r in results:
        if r.hypotheses:
            r.hypotheses[0].weights = r.weights  # the same output as r
            r.hypotheses[0].weights_from = r.weights_from


def _translation(run: LoadedRun, line: str, src_ids: list[int], hyp: Hypothesis) -> Translation:
    """One hypothesis of the source ``line`` (token ids ``src_ids``) as a :class:`Translation`."""
    tgt_pieces = run.tgt_tok.pieces(hyp.tokens)
    if hyp.ended:
        tgt_pieces.append(EOS_LABEL)
    return Translation(
        source=line,
        text=_clean(run.tgt_tok.decode(hyp.tokens)),
        src_pieces=[*run.src_tok.pieces(src_ids), EOS_LABEL],
        tgt_pieces=tgt_pieces,
        weights=hyp.weights.detach().cpu().float(),
        score=float(hyp.score),
        src_ids=src_ids,
        output_ids=[*hyp.tokens, EOS] if hyp.ended else list(hyp.tokens),
    )


def alignment_text(translation: Translation, weights: Tensor | None = None) -> str:
    """For each output token, the source token with the largest weight, and that weight.

    ``weights`` ``(T, S)`` replaces the translation's own (e.g. another layer or head).
    """
    weights = translation.weights if weights is None else weights
    if weights is None:
        return ""
    best = weights.max(dim=-1)  # values (T,), indices (T,)
    rows = []
    for piece, weight, j in zip(
        translation.tgt_pieces, best.values.tolist(), best.indices.tolist(), strict=False
    ):
        rows.append(f"  {piece:>15} <- {translation.src_pieces[j]:<15} {weight:.2f}")
    return "\n".join(rows)
