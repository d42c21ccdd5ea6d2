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
lines: :class:`attnkit.nmt.decoding.streaming.LineSplitter`.)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from torch import Tensor

from ..config import DecodeConfig, RunConfig
from ..data.batching import Examples
from ..data.text import is_blank
from ..runs.loaded_run import LoadedRun
from ..vocab_ids import EOS, SPECIAL_TOKENS
from .search import Hypothesis, decode_examples

__all__ = [
    "Translation",
    "alignment_text",
    "decode_ids",
    "input_limit",
    "translate_lines",
]

EOS_LABEL = SPECIAL_TOKENS[EOS]
DEFAULT_INPUT_LIMIT = 256
# What str.splitlines() breaks on besides "\n"; none may appear inside an output line.
_LINE_BREAKS = re.compile("[\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


@dataclass
class Translation:
    """One translated sentence and the attention that produced it.

    ``weights`` is (T, S): row t is the attention of output token t (the last
    row is the EOS step when EOS was produced) over ``src_pieces`` (the source
    subwords and EOS). Empty input gives an empty translation with no weights.
    ``src_ids`` (without EOS) and ``output_ids`` (EOS included when produced)
    are what :func:`attnkit.nmt.decoding.views.attention_views` needs to show every
    layer and head.
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


def input_limit(config: RunConfig) -> int:
    """Longest source (tokens, without EOS) translated: ``decode.max_input_len``, else
    ``data.max_src_len`` (what the model was trained on), else 256."""
    return config.decode.max_input_len or config.data.max_src_len or DEFAULT_INPUT_LIMIT


def _clean(text: str) -> str:
    """Valid Unicode on one line: lone surrogates (from undecodable argv bytes) -> U+FFFD."""
    text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return _LINE_BREAKS.sub(" ", text)


def decode_ids(
    run: LoadedRun, ids: Sequence[Sequence[int]], decode: DecodeConfig
) -> list[Hypothesis]:
    """Search for translations of tokenized sources with the settings of ``decode``.

    Args:
        run: the loaded run (its model and device).
        ids: source token ids per sentence, without specials.
        decode: beam size, length and coverage penalties, n-gram blocking, limits.

    Returns:
        one :class:`~attnkit.nmt.decoding.search.Hypothesis` per source, in input order.
    """
    return decode_examples(
        run.model,
        Examples([list(x) for x in ids]),
        beam_size=decode.beam_size,
        length_penalty=decode.length_penalty,
        coverage_penalty=decode.coverage_penalty,
        no_repeat_ngram=decode.no_repeat_ngram,
        max_len_a=decode.max_len_a,
        max_len_b=decode.max_len_b,
        batch_size=decode.batch_size,
        device=run.device,
    )


def translate_lines(
    run: LoadedRun,
    lines: Sequence[str],
    *,
    beam_size: int | None = None,
    warn: Callable[[str], None] | None = None,
    first_line: int = 1,
) -> list[Translation]:
    """Translate each line; blank lines translate to ``""``. One result per line, same order.

    A line is blank when :func:`attnkit.nmt.data.text.is_blank` says so, or (a guard
    for a tokenizer that normalises more away) when it encodes to no tokens;
    the model never sees an empty source. Sources longer than
    :func:`input_limit` tokens are cut to it; ``warn`` is told which line
    and how long it was, counting ``lines[0]`` as line ``first_line`` (a buffer
    of a longer stream passes its first line's number).
    """
    decode = run.config.decode
    limit = input_limit(run.config)
    lines = [_clean(line) for line in lines]
    encoded = {i: run.src_tok.encode(s.strip()) for i, s in enumerate(lines) if not is_blank(s)}
    wanted = [i for i, x in encoded.items() if x]
    ids = [encoded[i] for i in wanted]
    lengths = [len(x) for x in ids]
    for i, n in zip(wanted, lengths, strict=True):
        if n > limit and warn is not None:
            warn(f"line {i + first_line}: {n} tokens, truncated to the model's limit of {limit}")
    ids = [x[:limit] for x in ids]
    if beam_size is not None:
        decode = decode.model_copy(update={"beam_size": beam_size})
    hyps = decode_ids(run, ids, decode)
    results = [Translation(line, "", [], [], None) for line in lines]
    for i, src_ids, hyp in zip(wanted, ids, hyps, strict=True):
        tgt_pieces = run.tgt_tok.pieces(hyp.tokens)
        if hyp.ended:
            tgt_pieces.append(EOS_LABEL)
        results[i] = Translation(
            source=lines[i],
            text=_clean(run.tgt_tok.decode(hyp.tokens)),
            src_pieces=[*run.src_tok.pieces(src_ids), EOS_LABEL],
            tgt_pieces=tgt_pieces,
            weights=hyp.weights.detach().cpu().float(),
            score=float(hyp.score),
            src_ids=src_ids,
            output_ids=[*hyp.tokens, EOS] if hyp.ended else list(hyp.tokens),
        )
    for i, n in zip(wanted, lengths, strict=True):
        if n > limit:
            results[i].truncated_from = n
    return results


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
