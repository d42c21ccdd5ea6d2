"""Translating a stream buffer by buffer.

``attnkit translate RUN < input`` reads stdin in buffers of at most
``buffer_size`` lines (:func:`read_buffers`) and translates each buffer as
soon as it is read (:func:`translate_buffers`), so memory follows the buffer,
not the file, and an interactive pipe gets its answer without waiting for
more input: when no more bytes are ready on the file descriptor (``select``),
the lines that have arrived form a buffer of their own. Inside a buffer,
sentences are decoded in length-sorted batches
(:func:`attnkit.nmt.decoding.search.decode_n_best`) and come back in input order.
Where the translations go is :mod:`attnkit.nmt.decoding.output`'s business.
"""

from __future__ import annotations

import io
import os
import select
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import BinaryIO, TextIO

from ..data.line_chunks import GZIP_MAGIC, UTF16_BOMS, other_compression
from ..runs.loaded_run import LoadedRun
from .engine import SearchEngine
from .settings import SearchSettings
from .translate import Translation, translate_lines

__all__ = [
    "LineSplitter",
    "input_buffers",
    "is_regular_file",
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
    drops it; data that starts with gzip's magic is decompressed first, as a corpus
    file is. ``warn`` is told the 1-based number of each line that was not valid UTF-8.

    Raises:
        ValueError: gzipped data that is corrupt or ends before its last member does.
    """
    splitter = LineSplitter(warn)
    return [*splitter.feed(data), *splitter.close()]


class LineSplitter:
    """:func:`split_input` for a stream that arrives in chunks (stdin read piece by piece).

    :meth:`feed` takes the next bytes and returns the lines they complete;
    :meth:`close` returns the last line when it had no ``\\n``. Line numbers in
    warnings count from the first line of the stream (1-based), and only the
    stream's very first bytes may be a byte order mark. A stream that starts
    with gzip's magic is decompressed as it arrives (every member of
    ``cat a.gz b.gz``). Only the unfinished last line is held, so memory
    follows the longest line, not the stream.
    """

    def __init__(self, warn: Callable[[str], None] | None = None) -> None:
        self.warn = warn
        self.lines_done = 0
        self._pending = bytearray()  # grows in place: a long line is not copied per chunk
        self._started = False
        self._gunzip = _Gunzip()

    def feed(self, data: bytes) -> list[str]:
        """Lines completed by ``data`` (a ``\\n`` ends a line), decoded.

        Raises:
            ValueError: the stream is gzipped and ``data`` is not valid gzip.
        """
        data = self._gunzip.feed(data)
        self._pending += data
        if not self._started:
            if len(self._pending) < len(_BOM) and _BOM.startswith(self._pending):
                return []  # maybe the start of a byte order mark: wait for more
            self._pending = self._pending.removeprefix(_BOM)
            self._started = True
        if b"\n" not in data:  # nothing completed: the held bytes are not searched again
            return []
        *rows, rest = self._pending.split(b"\n")
        self._pending = bytearray(rest)
        return [self.decode(bytes(raw)) for raw in rows]

    def close(self) -> list[str]:
        """The last line when the stream did not end with ``\\n`` (else nothing).

        Raises:
            ValueError: the stream is gzipped and ended inside a member.
        """
        self._pending += self._gunzip.close()
        rest = bytes(self._pending if self._started else self._pending.removeprefix(_BOM))
        self._pending, self._started = bytearray(), True
        return [self.decode(rest)] if rest else []

    def decode(self, raw: bytes) -> str:
        """The next line, ``raw`` without its ``\\n``, decoded (U+FFFD for invalid bytes)."""
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


def _refuse_unreadable_start(head: bytes) -> None:
    """A stream that starts with another compressor's magic would be translated as
    garbage, one U+FFFD warning a line: refuse it, naming the compressor. So is UTF-16
    (PowerShell 5's ``>``, Notepad's "Unicode"): each NUL byte became a line of its own and
    each line came back as a wrong translation, more lines out than in, with status 0."""
    if head[:2] in UTF16_BOMS:
        raise ValueError(
            "the input starts with a UTF-16 byte order mark: save it as UTF-8 (attnkit "
            "reads plain or gzipped UTF-8 text only)"
        )
    found = other_compression(head[:10])
    if found is not None:
        name, tool = found
        raise ValueError(
            f"the input is compressed with {name}, which attnkit does not read (plain or "
            f"gzipped UTF-8 text only): decompress it first ({tool} FILE)"
        )


class _Gunzip:
    """A stream's bytes as they arrive, decompressed when its first bytes are gzip's magic."""

    def __init__(self) -> None:
        self._head = b""  # the first byte, until the second tells whether it is gzip
        self._plain = False
        self._inflate: zlib._Decompress | None = None
        self._inside = False  # the current member has begun and not ended

    def feed(self, data: bytes) -> bytes:
        """The text that ``data`` brings (itself for a stream that is not gzipped)."""
        if self._plain:
            return data
        if self._inflate is None:
            data, self._head = self._head + data, b""
            if len(data) < len(GZIP_MAGIC) and GZIP_MAGIC.startswith(data):
                self._head = data  # wait for the byte that decides
                return b""
            if not data.startswith(GZIP_MAGIC):
                _refuse_unreadable_start(data)
                self._plain = True
                return data
            self._inflate = zlib.decompressobj(wbits=31)
        out = []
        try:
            while data:
                self._inside = True
                out.append(self._inflate.decompress(data))
                if not self._inflate.eof:
                    break
                data, self._inside = self._inflate.unused_data, False
                self._inflate = zlib.decompressobj(wbits=31)  # the next member, if any
        except zlib.error as err:
            raise ValueError(f"input is gzipped but not valid gzip ({err})") from None
        return b"".join(out)

    def close(self) -> bytes:
        """What is still held at the end (a lone first byte); an error for a cut member."""
        if self._inside:
            raise ValueError("input is gzipped but ends early: its last member is cut short")
        rest, self._head = self._head, b""
        return rest


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


def input_buffers(
    sentences: Sequence[str],
    stdin: TextIO | None,
    buffer_size: int,
    warn: Callable[[str], None] | None = None,
) -> Iterator[Sequence[str]]:
    """``sentences`` in buffers of ``buffer_size``, or, when there are none, ``stdin``'s
    lines as :func:`read_buffers` reads them (from its bytes when it has any).

    A sentence from the command line holding bytes that are not UTF-8 (Python keeps
    them as lone surrogates) is decoded as such a stdin line is: one U+FFFD per
    undecodable byte, and ``warn`` hears of it.

    Raises:
        ValueError: no ``sentences`` and no ``stdin`` (None: Python's ``sys.stdin`` when
            the process was started with its standard input closed, ``<&-``).
    """
    if not sentences and stdin is None:
        raise ValueError(
            "no sentences given and stdin is closed: give sentences as arguments or pipe them in"
        )
    if sentences:
        splitter = LineSplitter(warn)
        sentences = [splitter.decode(_argument_bytes(s)) for s in sentences]
        return (sentences[i : i + buffer_size] for i in range(0, len(sentences), buffer_size))
    binary = getattr(stdin, "buffer", None)
    if binary is None:  # a text stream without bytes underneath (e.g. io.StringIO)
        binary = io.BytesIO(stdin.read().encode("utf-8", "replace"))
    return read_buffers(binary, buffer_size, warn=warn)


def _argument_bytes(sentence: str) -> bytes:
    """A command-line argument's bytes: Python decoded them with ``surrogateescape``."""
    try:
        return os.fsencode(sentence)
    except UnicodeEncodeError:  # a surrogate no undecodable byte makes: _clean replaces it
        return sentence.encode("utf-8", "surrogatepass")


def is_regular_file(stream: TextIO | BinaryIO) -> bool:
    """Whether ``stream`` reads a regular file (not a pipe or terminal, not a captured stream)."""
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):  # no descriptor (captured in tests)
        return False


def _fileno(stream: BinaryIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, io.UnsupportedOperation, ValueError):
        return None


def translate_buffers(
    run: LoadedRun,
    buffers: Iterable[Sequence[str]],
    settings: SearchSettings | None = None,
    *,
    n_best: int = 0,
    warn: Callable[[str], None] | None = None,
    engine: SearchEngine | None = None,
    supervised: bool = True,
) -> Iterator[tuple[int, list[Translation]]]:
    """Translate buffer after buffer (:func:`translate_lines` with ``settings``,
    ``n_best``, ``engine`` and ``supervised``), as each one comes.

    Yields:
        ``(first, translations)``: the 1-based number of the buffer's first line
        in the whole stream, and one translation per line of the buffer.
    """
    first = 1
    for lines in buffers:
        yield (
            first,
            translate_lines(
                run,
                lines,
                settings,
                n_best=n_best,
                warn=warn,
                first_line=first,
                engine=engine,
                supervised=supervised,
            ),
        )
        first += len(lines)
