"""Using a trained run: load it, translate text, show alignments, evaluate a split.

A run folder (written by :func:`attnkit.nmt.train.train`) holds
``config.yaml``, the tokenizer files and the ``best``/``last`` checkpoints.
Search is greedy for ``beam_size == 1`` and beam search otherwise
(:mod:`attnkit.nmt.search`); sentences are decoded in length-sorted batches
and returned in input order. Empty input lines — blank after the tokenizer's
normalisation (:func:`attnkit.nmt.text.is_blank`: a byte order mark, a
zero-width space or a direction mark is as empty as a space) — give empty
translations, so output lines always stay aligned with input lines.
Evaluation scores every line of a test set: an empty source gives an empty
hypothesis, and both are counted in the result.

Odd input never crashes translation: bytes that are not UTF-8 are replaced
by U+FFFD (:func:`split_input`, with a warning), unseen characters and other
scripts become ``<unk>``, inputs longer than the model's limit
(:func:`input_limit`) are truncated with a warning, and a translation never
contains a line break.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from .architectures import build_translator
from .batching import Examples
from .checkpoint import load_checkpoint
from .config import DecodeConfig, RunConfig
from .corpus import ParallelCorpus, load_split
from .device import resolve_device
from .metrics import Score, chrf, sacre_bleu, tokenized_bleu
from .model import Translator
from .search import Hypothesis, decode_examples
from .text import is_blank
from .tokenizer import Tokenizer, load_tokenizers
from .vocab_ids import EOS, SPECIAL_TOKENS

__all__ = [
    "Evaluation",
    "LineSplitter",
    "LoadedRun",
    "Translation",
    "alignment_text",
    "decode_ids",
    "evaluate_corpus",
    "evaluate_run",
    "input_limit",
    "load_run",
    "split_input",
    "translate_lines",
]

EOS_LABEL = SPECIAL_TOKENS[EOS]
DEFAULT_INPUT_LIMIT = 256
# What str.splitlines() breaks on besides "\n"; none may appear inside an output line.
_LINE_BREAKS = re.compile("[\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
_BOM = b"\xef\xbb\xbf"


@dataclass
class LoadedRun:
    """A trained model with its config and tokenizers, ready to translate."""

    folder: Path
    config: RunConfig
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    model: Translator
    device: torch.device


def load_run(folder: str | Path, *, checkpoint: str = "best", device: str = "cpu") -> LoadedRun:
    """Load ``folder/config.yaml``, its tokenizers and the named checkpoint (``best``/``last``).

    Raises:
        FileNotFoundError: ``folder`` is not a run folder or lacks the checkpoint.
        ValueError: a file in it is invalid (the message names it), or ``device``
            is unknown or not on this machine (:func:`.device.resolve_device`).
    """
    folder = Path(folder)
    where = resolve_device(device, "device")  # before any loading: a bad name fails fast
    config_path = folder / "config.yaml"
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path} not found; is {folder} a training run folder?")
    config = RunConfig.load(config_path)
    src_tok, tgt_tok = load_tokenizers(folder)
    model = build_translator(config.model, src_tok.vocab_size, tgt_tok.vocab_size)
    ckpt = load_checkpoint(_checkpoint_path(folder, checkpoint))
    try:
        model.load_state_dict(ckpt.model)
    except RuntimeError as err:
        raise ValueError(
            f"{folder / checkpoint}.json does not fit the model in {config_path}: {err}"
        ) from None
    model.to(where).eval()
    return LoadedRun(folder, config, src_tok, tgt_tok, model, where)


def _checkpoint_path(folder: Path, checkpoint: str) -> Path:
    """``folder/CHECKPOINT.json``; a missing one is an error that says what else is there."""
    path = folder / f"{checkpoint}.json"
    if path.is_file():
        return path
    other = "last" if checkpoint == "best" else "best"
    if (folder / f"{other}.json").is_file():
        hint = f"{folder / other}.json exists: use checkpoint {other!r} (--checkpoint {other})"
    else:
        hint = f"there is no {other}.json either (training stopped before its first save)"
    when = "the first validation" if checkpoint == "best" else "the first checkpoint"
    raise FileNotFoundError(
        f"checkpoint not found: {path} (written at {when}); {hint}; "
        f"or resume training: attnkit train --resume {folder}"
    )


@dataclass
class Translation:
    """One translated sentence and the attention that produced it.

    ``weights`` is (T, S): row t is the attention of output token t (the last
    row is the EOS step when EOS was produced) over ``src_pieces`` (the source
    subwords and EOS). Empty input gives an empty translation with no weights.
    ``src_ids`` (without EOS) and ``output_ids`` (EOS included when produced)
    are what :func:`attnkit.nmt.views.attention_views` needs to show every
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


def split_input(data: bytes, warn: Callable[[str], None] | None = None) -> list[str]:
    """Split raw input (e.g. stdin) into lines at ``\\n`` only; invalid UTF-8 becomes U+FFFD.

    A final line without ``\\n`` counts; a trailing ``\\r`` (CRLF files) is dropped,
    and so is a leading UTF-8 byte order mark, as :func:`attnkit.nmt.corpus.read_lines`
    drops it. ``warn`` is told the 1-based number of each line that was not valid UTF-8.
    """
    splitter = LineSplitter(warn)
    return [*splitter.feed(data), *splitter.close()]


class LineSplitter:
    """:func:`split_input` for a stream that arrives in chunks (stdin read piece by piece).

    :meth:`feed` takes the next bytes and returns the lines they complete;
    :meth:`close` returns the last line when it had no ``\\n``. Line numbers in
    warnings count from the first line of the stream (1-based), and only the
    stream's very first bytes may be a byte order mark. Only the unfinished
    last line is held, so memory follows the longest line, not the stream.
    """

    def __init__(self, warn: Callable[[str], None] | None = None) -> None:
        self.warn = warn
        self.lines_done = 0
        self._pending = b""
        self._started = False

    def feed(self, data: bytes) -> list[str]:
        """Lines completed by ``data`` (a ``\\n`` ends a line), decoded."""
        self._pending += data
        if not self._started:
            if len(self._pending) < len(_BOM) and _BOM.startswith(self._pending):
                return []  # maybe the start of a byte order mark: wait for more
            self._pending = self._pending.removeprefix(_BOM)
            self._started = True
        *rows, self._pending = self._pending.split(b"\n")
        return [self._decode(raw) for raw in rows]

    def close(self) -> list[str]:
        """The last line when the stream did not end with ``\\n`` (else nothing)."""
        rest = self._pending if self._started else self._pending.removeprefix(_BOM)
        self._pending, self._started = b"", True
        return [self._decode(rest)] if rest else []

    def _decode(self, raw: bytes) -> str:
        self.lines_done += 1
        raw = raw.removesuffix(b"\r")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as err:
            if self.warn is not None:
                self.warn(
                    f"line {self.lines_done}: invalid UTF-8 at byte {err.start} ({err.reason}); "
                    "undecodable bytes replaced by U+FFFD"
                )
            return raw.decode("utf-8", errors="replace")


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
        one :class:`~attnkit.nmt.search.Hypothesis` per source, in input order.
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

    A line is blank when :func:`attnkit.nmt.text.is_blank` says so, or (a guard
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


@dataclass
class Evaluation:
    """Scores of one whole test set plus the hypotheses and references they came from.

    Attributes:
        name: what was scored, for messages: ``"the test split"`` or a source file.
        bleu: case-sensitive sacreBLEU over every pair.
        chrf: chrF over every pair.
        tokenized_bleu: lowercased 13a BLEU over every pair.
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
    *,
    beam_size: int | None = None,
    warn: Callable[[str], None] | None = None,
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
        beam_size: beam size (1 = greedy); ``None`` takes the run's ``decode.beam_size``.
        warn: hears of sources truncated to :func:`input_limit` (the score then
            covers truncated inputs).

    Raises:
        ValueError: no pair has both a source and a reference
            (``no sentence pairs in the test split``).
    """
    pairs = zip(corpus.src, corpus.tgt, strict=True)
    if not any(not is_blank(s) and not is_blank(t) for s, t in pairs):
        detail = f" ({len(corpus)} lines, each with an empty side)" if len(corpus) else ""
        raise ValueError(f"no sentence pairs in {name}{detail}")
    translations = translate_lines(run, corpus.src, beam_size=beam_size, warn=warn)
    hyps = [t.text for t in translations]
    return Evaluation(
        name,
        sacre_bleu(hyps, corpus.tgt),
        chrf(hyps, corpus.tgt),
        tokenized_bleu(hyps, corpus.tgt),
        hyps,
        list(corpus.tgt),
        empty_sources=sum(t.weights is None for t in translations),
        empty_references=sum(is_blank(t) for t in corpus.tgt),
    )


def evaluate_run(
    run: LoadedRun,
    split: str = "test",
    *,
    beam_size: int | None = None,
    warn: Callable[[str], None] | None = None,
) -> Evaluation:
    """Translate every line of the config's ``split`` and score it (:func:`evaluate_corpus`).

    Raises:
        ValueError: the config has no such split, a file in it is unreadable, or
            it holds no sentence pairs.
        FileNotFoundError: a file of the split is missing.
    """
    corpus = load_split(run.config.data, split, keep_empty=True)
    return evaluate_corpus(run, corpus, f"the {split} split", beam_size=beam_size, warn=warn)
