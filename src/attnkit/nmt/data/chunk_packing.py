"""A chunk of a corpus made ready to append to a token store: encoded, filtered, flattened.

This is the work of the store's worker processes (:func:`~.store_build.build_store`,
:func:`~.worker_pool.ordered_map`). :class:`ChunkPacker` takes sentence
pairs: it encodes them (sentencepiece's batch encoder, or the word-by-word
encoder of guided alignment), leaves out the pairs over the length limits
and lays each column's ids back to back in one array. :class:`LinePacker`
takes the raw lines of the corpus files (:class:`~.line_chunks.RawChunk`) and
first does what the line reader (:mod:`.corpus`) does per line: decode
UTF-8, drop a byte order mark, split a TSV line into its cells, strip each
side and leave out (counting) the pairs with a blank side
(:func:`~.text.is_blank`). The result, :class:`PackedChunk`, says what
became of every pair or line, so the process that writes the store only
appends arrays and adds up counts.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .line_chunks import LineFiles, RawChunk, nul_error, tsv_cells, utf8_error
from .text import is_blank

__all__ = [
    "DROPPED",
    "KEPT",
    "SKIPPED",
    "ChunkPacker",
    "LinePacker",
    "PackedChunk",
    "PairEncoder",
]

LINK_DTYPE = np.dtype(np.int32)
SKIPPED, KEPT, DROPPED = 0, 1, 2  # a line with a blank side, a pair stored, one too long

Ids = list[list[int]]
Encoded = tuple[Ids, Ids, Ids | None]  # source ids, target ids, links (or None)
Columns = dict[str, tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class PairEncoder:
    """A chunk encoder for plain pairs: ``[(source, target), ...]`` -> (source ids,
    target ids, None). Picklable when its two batch encoders are (bound methods of
    attnkit tokenizers are)."""

    encode_src: Callable[[list[str]], Ids]
    encode_tgt: Callable[[list[str]], Ids]

    def __call__(self, chunk: list[tuple]) -> Encoded:
        return (
            self.encode_src([pair[0] for pair in chunk]),
            self.encode_tgt([pair[1] for pair in chunk]),
            None,
        )


@dataclass(frozen=True)
class PackedChunk:
    """A chunk ready to append.

    Attributes:
        status: what became of each pair (or line) that came in, ``(n,)`` uint8:
            :data:`KEPT`, :data:`DROPPED` (over the length limits) or
            :data:`SKIPPED` (a blank side; only from lines).
        columns: per column (``src``, ``tgt``, and ``links`` when present) the
            kept pairs' ids back to back and their lengths (int64).
        error: what stopped the chunk after the lines of ``status`` (to be raised
            once they are appended), or None.
    """

    status: np.ndarray
    columns: Columns
    error: Exception | None = field(default=None, compare=False)

    @property
    def read(self) -> int:
        """Pairs read: kept or dropped (not skipped)."""
        return len(self.status) - self.skipped

    @property
    def skipped(self) -> int:
        return int(np.count_nonzero(self.status == SKIPPED))

    @property
    def dropped(self) -> int:
        return int(np.count_nonzero(self.status == DROPPED))

    def head(self, pairs: int) -> PackedChunk:
        """The chunk up to its ``pairs``-th pair read (``1 <= pairs <= read``), without
        what follows it, an error included."""
        cut = int(np.flatnonzero(self.status != SKIPPED)[pairs - 1]) + 1
        status = self.status[:cut]
        kept = int(np.count_nonzero(status == KEPT))
        columns = {
            name: (flat[: int(lengths[:kept].sum())], lengths[:kept])
            for name, (flat, lengths) in self.columns.items()
        }
        return PackedChunk(status, columns)


@dataclass(frozen=True)
class ChunkPacker:
    """Encode a chunk of pairs, drop those over the length limits, flatten each column.

    Picklable when ``encode_chunk`` is.

    Attributes:
        encode_chunk: pairs -> (source ids, target ids, links or None).
        dtype: the ids' dtype (:func:`~.store.id_dtype`); links are int32.
        max_src_len, max_tgt_len: longest kept sides, in tokens (None: no limit).
    """

    encode_chunk: Callable[[list[tuple]], Encoded]
    dtype: np.dtype
    max_src_len: int | None = None
    max_tgt_len: int | None = None

    def __call__(self, chunk: list[tuple]) -> PackedChunk:
        src, tgt, links = self.encode_chunk(chunk)
        src_lengths, tgt_lengths = _lengths(src), _lengths(tgt)
        keep = np.ones(len(chunk), dtype=bool)
        if self.max_src_len is not None:
            keep &= src_lengths <= self.max_src_len
        if self.max_tgt_len is not None:
            keep &= tgt_lengths <= self.max_tgt_len
        columns = {
            "src": _flatten(src, src_lengths, self.dtype, keep),
            "tgt": _flatten(tgt, tgt_lengths, self.dtype, keep),
        }
        if links is not None:
            columns["links"] = _flatten(links, _lengths(links), LINK_DTYPE, keep)
        return PackedChunk(np.where(keep, KEPT, DROPPED).astype(np.uint8), columns)


def _lengths(sequences: Sequence[Sequence[int]]) -> np.ndarray:
    return np.fromiter(map(len, sequences), dtype=np.int64, count=len(sequences))


def _flatten(
    sequences: Sequence[Sequence[int]], lengths: np.ndarray, dtype: np.dtype, keep: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The kept sequences back to back (``dtype``) and their lengths (int64)."""
    if not keep.all():
        sequences = [sequences[i] for i in np.flatnonzero(keep).tolist()]
        lengths = lengths[keep]
    flat = np.fromiter(
        itertools.chain.from_iterable(sequences), dtype=dtype, count=int(lengths.sum())
    )
    return flat, lengths


@dataclass(frozen=True)
class LinePacker:
    """Decode and clean a chunk of raw lines into pairs, then pack them (:class:`ChunkPacker`).

    The pairs are those the pair reader (:func:`~.corpus.stream_split`) gives
    for the same lines, guided-alignment lines attached as ``(line, number)``,
    so the store is byte for byte the one built from it. The first bad line
    (not UTF-8, a TSV line without enough columns, a pair its encoder refuses,
    such as a malformed alignment) ends the chunk: the lines before it are
    packed and its error travels in :attr:`PackedChunk.error`, as does the
    reader's own (:attr:`~.line_chunks.RawChunk.error`).

    Attributes:
        files: the files the lines come from (named in errors; TSV columns).
        packer: encodes, filters and flattens the pairs.
    """

    files: LineFiles
    packer: ChunkPacker

    def __call__(self, chunk: RawChunk) -> PackedChunk:
        pairs, lines, count, error = self._pairs(chunk)
        try:
            packed = self.packer(pairs)
        except Exception:  # noqa: BLE001 (re-raised in order, at its pair's line)
            bad, error = self._first_refused(pairs)
            pairs, count = pairs[:bad], lines[bad]
            packed = self.packer(pairs)
        status = np.full(count, SKIPPED, dtype=np.uint8)
        status[lines[: len(pairs)]] = packed.status
        if error is None and count == chunk.count:
            error = chunk.error
        return PackedChunk(status, packed.columns, error)

    def _first_refused(self, pairs: list[tuple]) -> tuple[int, Exception]:
        """The first pair the encoder refuses alone, and its error."""
        for i, pair in enumerate(pairs):
            try:
                self.packer.encode_chunk([pair])
            except Exception as err:  # noqa: BLE001
                return i, err
        raise RuntimeError("a chunk was refused but none of its pairs alone")

    def _pairs(self, chunk: RawChunk) -> tuple[list[tuple], list[int], int, Exception | None]:
        """The pairs of the chunk's lines that have no blank side, the line (0-based) of
        each, the lines read (all, or those before the first bad one), and its error."""
        files = self.files
        decoded = [
            _decode(block, chunk.count, path, chunk.first)
            for block, path in zip(chunk.blocks, files.paths, strict=True)
        ]
        corpus = decoded[: len(files.corpus)]
        count = min(len(lines) for lines, _ in corpus)
        error = next((err for lines, err in corpus if len(lines) == count and err), None)
        if files.columns is None:
            src, tgt = corpus[0][0], corpus[1][0]
        else:
            src, tgt, count, error = self._cells(corpus[0][0], count, error, chunk.first)
        if files.alignments is not None and len(decoded[-1][0]) < count:
            count, error = len(decoded[-1][0]), decoded[-1][1]
        pairs, lines = _clean(src, tgt, count)
        if files.alignments is not None:
            align = decoded[-1][0]
            pairs = [
                (s, t, (align[k].rstrip("\r\n"), chunk.first + k))
                for (s, t), k in zip(pairs, lines, strict=True)
            ]
        return pairs, lines, count, error

    def _cells(
        self, lines: list[str], count: int, error: Exception | None, first: int
    ) -> tuple[list[str], list[str], int, Exception | None]:
        """The source and target cells of TSV lines (a blank line: two blank cells); a line
        with too few columns ends them."""
        path, columns = self.files.corpus[0], self.files.columns
        src, tgt = [], []
        for k in range(count):
            try:
                s, t = tsv_cells(lines[k].rstrip("\r\n"), path, first + k, *columns)
            except ValueError as err:
                return src, tgt, k, err
            src.append(s)
            tgt.append(t)
        return src, tgt, count, error


def _decode(block: bytes, count: int, path, first: int) -> tuple[list[str], Exception | None]:
    """The ``count`` lines of ``block`` as text (endings kept but for the ``\\n``), up to the
    first that is not UTF-8 or holds a NUL byte, and its error; a byte order mark on
    line 1 is dropped."""
    try:
        lines, error = block.decode("utf-8").split("\n", count)[:count], None
    except UnicodeDecodeError:
        lines, error = _decode_each(block, count, path, first)
    if b"\x00" in block:
        nul = next((k for k, line in enumerate(lines) if "\x00" in line), None)
        if nul is not None:
            lines, error = lines[:nul], nul_error(path, first + nul)
    if first == 1 and lines:
        lines[0] = lines[0].removeprefix("\ufeff")  # byte order mark of some editors
    return lines, error


def _decode_each(block: bytes, count: int, path, first: int) -> tuple[list[str], Exception]:
    """:func:`_decode` line by line, for a block that does not decode whole."""
    raws = block.split(b"\n")
    lines = []
    for k in range(count):
        raw = raws[k] + b"\n" if k < len(raws) - 1 else raws[k]  # as the line reader saw it
        try:
            lines.append(raw.decode("utf-8").removesuffix("\n"))
        except UnicodeDecodeError as err:
            return lines, utf8_error(path, first + k, err)
    raise AssertionError("a block that does not decode has a line that does not")


def _clean(src: list[str], tgt: list[str], count: int) -> tuple[list[tuple[str, str]], list[int]]:
    """The first ``count`` pairs stripped, those with a blank side left out, and the index
    of each pair kept (as :class:`~.corpus.PairStream` does)."""
    pairs, lines = [], []
    for k in range(count):
        s, t = src[k], tgt[k]
        if is_blank(s) or is_blank(t):
            continue
        pairs.append((s.strip(), t.strip()))
        lines.append(k)
    return pairs, lines
