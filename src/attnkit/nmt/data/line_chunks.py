"""Corpus files cut into chunks of raw lines: the reading half of building a token store.

Building a store of millions of pairs is reading and encoding; the encoding
runs on worker processes (:mod:`.worker_pool`), and on a machine with few
cores whatever the reading process does per line competes with them. So the
reader does no per-line work in Python: it takes the next ``size`` lines of
each file (two line-aligned files, or one TSV, and the guided-alignment file
beside them when there is one) as bytes, joins them into one block per file
and hands the blocks on (:class:`RawChunk`). The workers decode, clean, encode
and flatten them (:class:`~.chunk_packing.LinePacker`).

What only the reader can see it checks, with the messages of the line
reader (:func:`attnkit.nmt.data.corpus.iter_lines`): files of different line
counts, an alignment file with fewer or more lines than the corpus, a file
that cannot be read (a corrupt gzip stream). The error travels in the chunk
that ends at it (:attr:`RawChunk.error`) and is raised after the lines
before it, as the line-by-line reader would have; on that path only (an
error), the rest of the longer file is decoded, as the line reader did while
counting it, so that an invalid line there is named instead.
"""

from __future__ import annotations

import contextlib
import gzip
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import BinaryIO

from .text import is_blank

__all__ = [
    "GZIP_MAGIC",
    "READ_ERRORS",
    "LineFiles",
    "UTF16_BOMS",
    "RawChunk",
    "check_readable",
    "decode_line",
    "line_count_error",
    "nul_error",
    "open_bytes",
    "read_chunks",
    "read_error",
    "tsv_cells",
    "utf8_error",
]


def check_readable(path: str | Path, what: str = "corpus file") -> None:
    """Refuse a ``path`` that is missing or a folder; a named pipe (``<(zcat f.gz)``) is fine.

    Raises:
        FileNotFoundError: ``what not found: PATH`` or ``what PATH is a folder``.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{what} not found: {path}")
    if path.is_dir():
        raise FileNotFoundError(f"{what} {path} is a folder, not a file")


GZIP_MAGIC = b"\x1f\x8b"  # the first two bytes of every gzip member (RFC 1952)

# what reading a corpus file can raise past its first lines: an I/O error, a gzip stream
# that is truncated (EOFError) or has a bad header or CRC (gzip.BadGzipFile, an OSError),
# or deflate data damaged inside a member (zlib.error, which gzip passes on as it is)
READ_ERRORS = (OSError, EOFError, zlib.error)


# other compressors' magic numbers: such a file is refused by name, not read as bad UTF-8
_OTHER_COMPRESSION = (
    (re.compile(rb"\xfd7zXZ\x00"), "xz", "xz -d"),
    (re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)"), "bzip2", "bunzip2"),
    (re.compile(rb"\x28\xb5\x2f\xfd"), "zstd", "zstd -d"),
    (re.compile(rb"PK\x03\x04"), "zip", "unzip"),
    (re.compile(rb"7z\xbc\xaf\x27\x1c"), "7z", "7z x"),
)


def open_bytes(path: Path) -> BinaryIO:
    """``path`` opened once for reading bytes, through gzip when it starts with gzip's
    magic (looked at without consuming it, so a pipe loses nothing).

    Raises:
        ValueError: ``path`` starts with the magic number of another compressor (xz,
            bzip2, zstd, zip, 7z); the message names it and says to decompress the file.
    """
    raw = open(path, "rb")  # noqa: SIM115 (returned open)
    try:
        head = raw.peek(10)[:10]
        _refuse_other_compression(path, head)
    except BaseException:
        raw.close()
        raise
    return _ClosingGzip(raw) if head[:2] == GZIP_MAGIC else raw


def other_compression(head: bytes) -> tuple[str, str] | None:
    """The compressor (not gzip) whose magic number ``head``, a stream's first bytes,
    starts with, and the command that decompresses it: ``("xz", "xz -d")``; else None."""
    for magic, name, tool in _OTHER_COMPRESSION:
        if magic.match(head):
            return name, tool
    return None


def _refuse_other_compression(path: Path, head: bytes) -> None:
    """Raise for a file whose first bytes ``head`` are another compressor's magic: read
    as text, it failed as invalid UTF-8 with advice (``iconv -c``) that ruins it."""
    found = other_compression(head)
    if found is not None:
        name, tool = found
        raise ValueError(
            f"{path} is compressed with {name}, which attnkit does not read (plain or "
            f"gzipped UTF-8 text only): decompress it first ({tool} {path}), or "
            "recompress it with gzip"
        )


class _ClosingGzip(gzip.GzipFile):
    """A gzip stream over an open file that closes that file too."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self.raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.raw.close()


UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")  # little-, big-endian (UTF-32 LE starts the same)


def utf8_error(path: str | Path, number: int, err: UnicodeDecodeError) -> ValueError:
    """The error for line ``number`` of ``path`` that is not UTF-8 (``err``: from its bytes),
    with what to do: for a file that starts with a UTF-16 byte order mark (Windows
    Notepad's "Unicode"), save it as UTF-8; else (a stray byte in a crawled corpus),
    drop the undecodable bytes with ``iconv -c``, which keeps every line."""
    hint = "; iconv -f UTF-8 -t UTF-8 -c drops undecodable bytes and keeps the lines"
    if number == 1 and err.start == 0 and bytes(err.object[:2]) in UTF16_BOMS:
        hint = "; the file starts with a UTF-16 byte order mark: save it as UTF-8"
    return ValueError(
        f"{path}, line {number}: invalid UTF-8 at byte {err.start} ({err.reason}){hint}"
    )


def nul_error(path: str | Path, number: int) -> ValueError:
    """The error for line ``number`` of ``path`` that holds a NUL byte: valid UTF-8, but no
    text has one, while UTF-16 without a byte order mark has one in every ASCII character
    and an archive (tar, .tar.gz) in its headers; read on, either trained on garbage."""
    return ValueError(
        f"{path}, line {number}: a NUL byte (U+0000), which no text holds: save a UTF-16 "
        "file as UTF-8, extract an archive (tar) first"
    )


def decode_line(raw: bytes, path: str | Path, number: int) -> str:
    """Line ``number`` of ``path`` (its bytes, ending included) as text.

    Raises:
        ValueError: the bytes are not UTF-8 (:func:`utf8_error`), or hold a NUL byte
            (:func:`nul_error`).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise utf8_error(path, number, err) from None
    if "\x00" in text:
        raise nul_error(path, number)
    return text


def tsv_cells(
    line: str, path: str | Path, number: int, src_column: int, tgt_column: int
) -> tuple[str, str]:
    """The source and target cells of TSV line ``number`` of ``path`` (no line ending);
    a blank line gives two blank cells.

    Raises:
        ValueError: the line has fewer than ``max(src_column, tgt_column) + 1`` cells.
    """
    if is_blank(line):
        return "", ""
    cells = line.split("\t")
    needed = max(src_column, tgt_column) + 1
    if len(cells) < needed:
        raise ValueError(
            f"{path}, line {number}: expected at least {needed} tab-separated columns, "
            f"got {len(cells)}"
        )
    return cells[src_column], cells[tgt_column]


def read_error(path: str | Path, lines: int, err: Exception) -> ValueError:
    """The error for ``path`` that cannot be read after its first ``lines`` lines."""
    return ValueError(f"{path}: cannot read after line {lines}: {err}")


@dataclass(frozen=True)
class LineFiles:
    """The files of a training split, read as lines.

    Paths are named in messages as given, as the line readers name them.

    Attributes:
        corpus: ``(source file, target file)``, line-aligned, or ``(tsv file,)``.
        columns: ``(source column, target column)`` of the TSV; None for two files.
        alignments: a Pharaoh file line-aligned with the corpus (guided alignment), or None.
    """

    corpus: tuple[str | Path, ...]
    columns: tuple[int, int] | None = None
    alignments: str | Path | None = None

    @property
    def where(self) -> str:
        """The corpus as messages name it: ``SRC / TGT`` or the TSV."""
        return " / ".join(str(p) for p in self.corpus)

    @property
    def paths(self) -> tuple[Path, ...]:
        """Every file, in the order of :attr:`RawChunk.blocks`: corpus, then alignments."""
        files = self.corpus if self.alignments is None else (*self.corpus, self.alignments)
        return tuple(Path(p) for p in files)


@dataclass(frozen=True)
class RawChunk:
    """``count`` consecutive lines of each file, as bytes.

    Attributes:
        first: the 1-based number of the first line.
        count: lines in each block.
        blocks: per file of :attr:`LineFiles.paths`, its ``count`` lines joined,
            endings included (the file's last line may lack one).
        error: what the reader met right after these lines (a short or
            unreadable file), to be raised once they are processed; or None.
    """

    first: int
    count: int
    blocks: tuple[bytes, ...]
    error: ValueError | None = None


class _RawFile:
    """One file read in runs of lines, counting them; read errors kept, not raised."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle = open_bytes(path)
        self.read = 0

    def __enter__(self) -> _RawFile:
        return self

    def __exit__(self, *exc_info) -> None:
        self.handle.close()

    def take(self, n: int) -> tuple[list[bytes], ValueError | None]:
        """The next (up to) ``n`` lines, and the error that stopped the reading, if any."""
        lines: list[bytes] = []
        error = None
        try:
            lines.extend(islice(self.handle, n))  # keeps the lines read before an error
        except READ_ERRORS as err:
            error = read_error(self.path, self.read + len(lines), err)
        self.read += len(lines)
        return lines, error

    def count_rest(self, taken: list[bytes], error: ValueError | None, number: int) -> int:
        """Lines from ``number`` on: ``taken`` (already read), then the unread ones.

        Each is decoded, as the line reader did while counting them.

        Raises:
            ValueError: a line is not UTF-8, or the file cannot be read on.
        """
        count = 0
        while True:
            for raw in taken:
                decode_line(raw, self.path, number + count)
                count += 1
            if error is not None:
                raise error
            taken, error = self.take(10_000)
            if not taken and error is None:
                return count


def read_chunks(files: LineFiles, size: int) -> Iterator[RawChunk]:
    """The files in chunks of ``size`` lines each (the last chunk may be shorter).

    Raises:
        FileNotFoundError: a file is missing (at the first ``next``), named as
            the line readers name it.
    """
    if files.alignments is not None:
        check_readable(files.alignments, "alignment file")
    for path in files.corpus:
        check_readable(path)
    with contextlib.ExitStack() as stack:
        raws = [stack.enter_context(_RawFile(path)) for path in files.paths]
        corpus = raws[: len(files.corpus)]
        align = raws[-1] if files.alignments is not None else None
        first = 1
        while True:
            chunk, ended = _next_chunk(files, corpus, align, first, size)
            if chunk.count or chunk.error is not None:
                yield chunk
            if ended:
                return
            first += chunk.count


def _next_chunk(
    files: LineFiles, corpus: list[_RawFile], align: _RawFile | None, first: int, size: int
) -> tuple[RawChunk, bool]:
    """The chunk from line ``first``, and whether it is the last one."""
    taken = [raw.take(size) for raw in corpus]
    count = min(len(lines) for lines, _ in taken)
    error = _corpus_error(files, corpus, taken, count, first)
    ended = error is not None or count < size
    if align is not None:
        lines, align_error = align.take(count)
        if len(lines) < count:  # the alignments end (or break) first
            count, ended = len(lines), True
            error = align_error or _short_alignment(files, first + count)
        elif ended and error is None:
            error = _extra_alignment(files, align, first + count)
        taken.append((lines, None))
    blocks = tuple(b"".join(lines[:count]) for lines, _ in taken)
    return RawChunk(first, count, blocks, error), ended


def _corpus_error(
    files: LineFiles, corpus: list[_RawFile], taken: list, count: int, first: int
) -> ValueError | None:
    """What ends the corpus files at line ``first + count``: a read error, or files of
    different lengths (None: both go on, or both end there)."""
    for _, error in (t for t in taken if len(t[0]) == count):
        if error is not None:  # the first file that fails at the line after ``count``
            return error
    if all(len(lines) == count for lines, _ in taken) or len(corpus) == 1:
        return None
    longer = 0 if len(taken[0][0]) > count else 1
    number = first + count  # the first line without a partner
    lines, error = taken[longer]
    try:
        rest = corpus[longer].count_rest(lines[count:], error, number)
    except ValueError as err:  # the line reader met it while counting
        return err
    counts = (number - 1 + rest, number - 1) if longer == 0 else (number - 1, number - 1 + rest)
    return line_count_error(files.corpus, counts, number)


def line_count_error(
    paths: tuple[str | Path, str | Path], counts: tuple[int, int], number: int
) -> ValueError:
    """The error for a source and a target file (``paths``) of different line ``counts``,
    whose line ``number`` is the first without a partner; it names a shorter file with
    lone-CR line endings, which every reader here takes as one line."""
    (src_path, tgt_path), (src_n, tgt_n) = paths, counts
    longer, shorter = (src_path, tgt_path) if src_n > tgt_n else (tgt_path, src_path)
    hint = ""
    if _lone_cr(shorter):
        hint = (
            f"; {shorter} ends its lines with a lone CR (old Mac style), which is not a "
            f"line break here: convert it first (tr '\\r' '\\n' < {shorter} > fixed)"
        )
    return ValueError(
        f"line counts differ: {src_path} has {src_n} lines but {tgt_path} has "
        f"{tgt_n} ({longer}, line {number} has no partner); "
        f"parallel files must be line-aligned{hint}"
    )


def _lone_cr(path: str | Path) -> bool:
    """Whether the first 64 KiB of ``path`` end more lines with a lone CR (one no LF
    follows) than with an LF: a stray CR inside the lines of an LF file (crawled text) is
    no old Mac file, and converting it would split its lines. False for what is not a
    regular file: a pipe, read once already, would block or be empty."""
    if not Path(path).is_file():
        return False
    try:
        with open_bytes(Path(path)) as handle:
            head = handle.read(1 << 16)
    except (*READ_ERRORS, ValueError):
        return False
    return len(re.findall(rb"\r(?!\n)", head.rstrip(b"\r"))) > head.count(b"\n")


def _short_alignment(files: LineFiles, number: int) -> ValueError:
    return ValueError(
        f"{files.alignments} has {number - 1} lines but the corpus {files.where} has more "
        f"(line {number} has no alignment); the alignment file must be "
        "line-aligned with the training corpus file"
    )


def _extra_alignment(files: LineFiles, align: _RawFile, number: int) -> ValueError | None:
    """The error for alignment lines past the corpus's ``number - 1`` lines (None: none)."""
    try:
        extra = align.count_rest([], None, number)
    except ValueError as err:
        return err
    if not extra:
        return None
    return ValueError(
        f"{files.alignments} has {number - 1 + extra} lines but the corpus {files.where} "
        f"has {number - 1}; the alignment file must be line-aligned with the training "
        "corpus file"
    )
