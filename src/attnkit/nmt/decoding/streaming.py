"""Translating a stream buffer by buffer, and the records that show its attention.

``attnkit translate RUN < input`` reads stdin in buffers of at most
``buffer_size`` lines (:func:`read_buffers`) and translates each buffer as
soon as it is read (:func:`translate_buffers`), so memory follows the buffer,
not the file, and an interactive pipe gets its answer without waiting for
more input: when no more bytes are ready on the file descriptor (``select``),
the lines that have arrived form a buffer of their own. Inside a buffer,
sentences are decoded in length-sorted batches
(:func:`attnkit.nmt.decoding.search.decode_examples`) and come back in input order.

:func:`json_record` is one line of ``--attention-json``: the source, its
translation, tokens and attention weights (rows = target tokens, columns =
source tokens, as :func:`attnkit.plot.read_weights` reads them) and, on
request, the N best beam hypotheses (:func:`n_best`, which runs
:func:`attnkit.nmt.decoding.search.beam_search_n_best`).
"""

from __future__ import annotations

import io
import os
import select
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import BinaryIO

from torch import Tensor

from ..data.batching import Examples, make_batch, sorted_batches
from ..runs.loaded_run import LoadedRun
from .search import Hypothesis, beam_search_n_best
from .translate import EOS_LABEL, Translation, translate_lines

__all__ = [
    "LineSplitter",
    "json_record",
    "n_best",
    "read_buffers",
    "split_input",
    "translate_buffers",
]

CHUNK_BYTES = 1 << 16
_BOM = b"\xef\xbb\xbf"


def split_input(data: bytes, warn: Callable[[str], None] | None = None) -> list[str]:
    """Split raw input (e.g. stdin) into lines at ``\\n`` only; invalid UTF-8 becomes U+FFFD.

    A final line without ``\\n`` counts; a trailing ``\\r`` (CRLF files) is dropped,
    and so is a leading UTF-8 byte order mark, as :func:`attnkit.nmt.data.corpus.read_lines`
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


def read_buffers(
    stream: BinaryIO, buffer_size: int, warn: Callable[[str], None] | None = None
) -> Iterator[list[str]]:
    """Lines of a binary stream in buffers of at most ``buffer_size`` lines, as they arrive.

    Lines are split and decoded as :func:`attnkit.nmt.decoding.streaming.split_input`
    does (``warn`` hears of invalid UTF-8, numbered from the stream's first
    line). A buffer is yielded when it is full, at the end of the stream, and
    whenever no more bytes are ready on the stream's file descriptor (a
    terminal, or a pipe whose writer paused), so an interactive user never
    waits for a buffer to fill. Streams without a descriptor are read to
    full buffers.

    Raises:
        ValueError: ``buffer_size`` < 1.
    """
    if buffer_size < 1:
        raise ValueError(f"buffer_size must be >= 1, got {buffer_size}")
    splitter = LineSplitter(warn)
    fd = _fileno(stream)
    pending: list[str] = []
    while chunk := (os.read(fd, CHUNK_BYTES) if fd is not None else stream.read(CHUNK_BYTES)):
        pending.extend(splitter.feed(chunk))
        full = len(pending) - len(pending) % buffer_size
        for start in range(0, full, buffer_size):
            yield pending[start : start + buffer_size]
        del pending[:full]
        if pending and fd is not None and not select.select([fd], [], [], 0)[0]:
            yield pending
            pending = []
    pending.extend(splitter.close())
    for start in range(0, len(pending), buffer_size):
        yield pending[start : start + buffer_size]


def _fileno(stream: BinaryIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, io.UnsupportedOperation, ValueError):
        return None


def translate_buffers(
    run: LoadedRun,
    buffers: Iterable[Sequence[str]],
    *,
    beam_size: int | None = None,
    warn: Callable[[str], None] | None = None,
) -> Iterator[tuple[int, list[Translation]]]:
    """Translate buffer after buffer (:func:`translate_lines`), as each one comes.

    Yields:
        ``(first, translations)``: the 1-based number of the buffer's first line
        in the whole stream, and one translation per line of the buffer.
    """
    first = 1
    for lines in buffers:
        yield first, translate_lines(run, lines, beam_size=beam_size, warn=warn, first_line=first)
        first += len(lines)


def n_best(
    run: LoadedRun, translations: Sequence[Translation], n: int, beam_size: int | None = None
) -> list[list[Hypothesis]]:
    """The ``n`` best beam hypotheses of each translation's (possibly truncated) source.

    The beam is ``max(n, beam_size)`` wide (``beam_size`` defaults to the run's
    ``decode.beam_size``); an empty source gets no hypotheses.

    Returns:
        per translation, at most ``n`` hypotheses, best first.
    """
    decode = run.config.decode
    width = max(n, decode.beam_size if beam_size is None else beam_size)
    wanted = [i for i, t in enumerate(translations) if t.weights is not None]
    sources = Examples([translations[i].src_ids for i in wanted])
    found: list[list[Hypothesis]] = [[] for _ in translations]
    for indices in sorted_batches(sources, decode.batch_size) if wanted else []:
        batch = make_batch(sources, indices).to(run.device)
        hyps = beam_search_n_best(
            run.model,
            batch.src,
            batch.src_lengths,
            beam_size=width,
            length_penalty=decode.length_penalty,
            coverage_penalty=decode.coverage_penalty,
            no_repeat_ngram=decode.no_repeat_ngram,
            max_len_a=decode.max_len_a,
            max_len_b=decode.max_len_b,
        )
        for index, best in zip(indices, hyps, strict=True):
            found[wanted[index]] = best[:n]
    return found


def json_record(
    run: LoadedRun,
    translation: Translation,
    line: int,
    weights: Tensor | None = None,
    hypotheses: Sequence[Hypothesis] | None = None,
) -> dict:
    """One ``--attention-json`` object for input line ``line`` (1-based).

    Keys: ``line``, ``source``, ``translation``, ``score``, ``src_tokens``
    (``S`` source tokens with ``</s>``), ``tgt_tokens`` (``T`` output tokens,
    ``</s>`` when produced), ``weights`` (``T`` rows of ``S`` floats, or null
    for an empty line), ``row_labels``/``col_labels`` (the target/source
    tokens, so that :func:`attnkit.plot.read_weights` reads an entry as it
    is) and, when ``hypotheses`` is given, ``hypotheses``: a list of
    ``{"translation", "tgt_tokens", "weights", "score"}``, best first.
    ``weights`` (T, S) replaces the translation's own (``--layer``/``--head``).
    """
    weights = translation.weights if weights is None else weights
    record = {
        "line": line,
        "source": translation.source,
        "translation": translation.text,
        "score": translation.score,
        "src_tokens": translation.src_pieces,
        "tgt_tokens": translation.tgt_pieces,
        "weights": None if weights is None else _rounded(weights),
        "row_labels": translation.tgt_pieces,
        "col_labels": translation.src_pieces,
    }
    if hypotheses is not None:
        record["hypotheses"] = [_hypothesis_record(run, h) for h in hypotheses]
    return record


def _hypothesis_record(run: LoadedRun, hyp: Hypothesis) -> dict:
    pieces = run.tgt_tok.pieces(hyp.tokens) + ([EOS_LABEL] if hyp.ended else [])
    return {
        "translation": run.tgt_tok.decode(hyp.tokens),
        "tgt_tokens": pieces,
        "weights": _rounded(hyp.weights),
        "score": float(hyp.score),
    }


def _rounded(weights: Tensor) -> list[list[float]]:
    """(T, S) weights as nested lists, 6 decimals (smaller files, same pictures)."""
    return [[round(w, 6) for w in row] for row in weights.detach().cpu().float().tolist()]
