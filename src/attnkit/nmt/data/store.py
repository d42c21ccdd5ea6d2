"""The token store: a tokenized parallel corpus as flat id arrays on disk, memory-mapped.

A corpus of millions of pairs does not fit in memory as Python lists of ids
(about 2.4 KB per short pair). The store keeps, per side, every sentence's ids
back to back in one flat array of the smallest unsigned dtype that holds the
vocabulary (``uint16`` up to 65,536 pieces, else ``uint32``) and an
``int64`` offsets array with one entry more than there are pairs: sentence
``i`` is ``ids[offsets[i]:offsets[i + 1]]``. Beside them, the sentences'
lengths (``uint16``, or ``uint32`` when a sentence has more than 65,535
tokens), which batching reads for every pair each epoch: mapped, they cost
2 bytes a sentence of page cache, where computing them from the offsets would
read 8 and hold 4 more per sentence in the process. This is the layout of fairseq's
and Megatron's indexed datasets, written with numpy so that it needs nothing
beyond numpy and reads back with ``numpy.memmap``: the operating system pages
in what a batch touches, and processes on one machine (torchrun ranks) share
one copy in the page cache. (Hugging Face ``datasets`` would do the same
through Arrow, at the cost of a large dependency for two arrays per side.)

A store is a folder::

    meta.json       format, version, fingerprint, pair and token counts, dtypes
    src.ids         flat source ids           tgt.ids       flat target ids
    src.offsets     int64, pairs + 1          tgt.offsets   int64, pairs + 1
    src.lengths     tokens per sentence       tgt.lengths   (length_dtype), pairs
    links.ids       optional: piece-level alignment links of each pair, flat int32
                    ``s0 t0 s1 t1 ...`` (guided alignment, :mod:`.word_links`)
    links.offsets   int64, pairs + 1 (present with links.ids)

A folder without a valid ``meta.json`` (a build cut short) is never read. The
fingerprint (a hash of whatever the caller says the store depends on: the
data files, the tokenizer, the length limits) decides whether a store can be
reused. Building, reusing and rebuilding a store is :mod:`.store_build`'s
work; this module is the format and its reading.

Disk: ``2`` (``uint16``) or ``4`` bytes per token plus 20 bytes per pair.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .line_chunks import check_readable

__all__ = [
    "FORMAT",
    "META",
    "SIDES",
    "VERSION",
    "OutdatedStore",
    "RaggedIds",
    "SentenceReader",
    "StoreCounts",
    "TokenStore",
    "file_identity",
    "fingerprint",
    "id_dtype",
    "length_dtype",
]

FORMAT = "attnkit-token-store"
VERSION = 2  # 2: the lengths files
META = "meta.json"
SIDES = ("src", "tgt")


def fingerprint(parts: dict) -> str:
    """A hex digest of ``parts`` (JSON-serialisable): equal parts, equal fingerprint."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_identity(path: str | Path) -> dict:
    """What a store records of a data file: its resolved path, size and modification time.

    Raises:
        FileNotFoundError: ``path`` does not exist or is a folder (the message names it as
            :func:`~.line_chunks.check_readable` names any corpus file).
        ValueError: ``path`` is not a regular file (a pipe, a device): training data
            is read more than once (the tokenizer's sample, then the store).
    """
    check_readable(path)
    info = Path(path).stat()
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(
            f"{path}: training data must be a regular file, not a pipe or a device: it is "
            "read more than once (the tokenizer's sample, then the token store); write it "
            "to a file first (.gz files are read as they are)"
        )
    resolved = Path(path).resolve()
    return {"path": str(resolved), "bytes": info.st_size, "mtime_ns": info.st_mtime_ns}


class RaggedIds(Sequence):
    """Sentences of ids stored back to back: sentence ``i`` is ``flat[offsets[i]:offsets[i+1]]``.

    Indexing gives a list of ints, as a list of lists would, so batching code
    treats both alike (through ``read``, a :class:`SentenceReader`, when given);
    :meth:`lengths` gives the lengths without reading the ids (the store's
    mapped lengths, or else computed from the offsets).
    """

    def __init__(
        self,
        flat: np.ndarray,
        offsets: np.ndarray,
        lengths: np.ndarray | None = None,
        read: Callable[[int], list[int]] | None = None,
    ) -> None:
        self.flat = flat
        self.offsets = offsets
        self._lengths = lengths
        self._read = read

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> list[int]:  # type: ignore[override]
        if not -len(self) <= i < len(self):
            raise IndexError(f"sentence {i} out of range for {len(self)} sentences")
        i = int(i) % len(self)
        if self._read is not None:
            return self._read(i)
        return self.flat[self.offsets[i] : self.offsets[i + 1]].tolist()

    def lengths(self) -> np.ndarray:
        """Tokens per sentence, ``(N,)`` unsigned or int32 integers (computed once if not given)."""
        if self._lengths is None:
            self._lengths = np.diff(self.offsets).astype(np.int32)
        return self._lengths


class SentenceReader:
    """Sentence ``i`` of a stored column read with two ``pread`` calls: its two offsets, then
    its ids.

    Training reads its batches this way, not through the memory map: every
    page a mapping touches counts in the process's resident memory, and the
    kernel maps whole (large) page-cache folios around it, so 50 random batches
    of 64 mapped nearly all of a 5M-pair store (750 MB of RSS). Read with
    ``pread``, the pages stay in the page cache, shared by every process on the
    machine (the torchrun ranks) as before, and out of each one's RSS. The
    speed is the same (about 10 us a sentence either way).

    Raises (when called):
        ValueError: a file is shorter than its offsets say (changed since it was opened).
    """

    def __init__(self, ids: Path, offsets: Path, dtype: np.dtype) -> None:
        self.ids_path, self.offsets_path, self.dtype = ids, offsets, np.dtype(dtype)
        self.ids_fd = os.open(ids, os.O_RDONLY)
        self.offsets_fd = os.open(offsets, os.O_RDONLY)
        weakref.finalize(self, _close, self.ids_fd, self.offsets_fd)

    def __call__(self, i: int) -> list[int]:
        start, end = np.frombuffer(
            self._read(self.offsets_fd, 16, 8 * i, self.offsets_path), np.int64
        )
        size = self.dtype.itemsize
        raw = self._read(self.ids_fd, int(end - start) * size, int(start) * size, self.ids_path)
        return np.frombuffer(raw, self.dtype).tolist()

    @staticmethod
    def _read(fd: int, count: int, at: int, path: Path) -> bytes:
        raw = os.pread(fd, count, at)
        if len(raw) != count:
            raise ValueError(f"{path}: {len(raw)} bytes at byte {at}, expected {count}")
        return raw


def _close(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


@dataclass(frozen=True)
class StoreCounts:
    """What a build kept and left out.

    Attributes:
        pairs: pairs in the store.
        skipped: pairs with an empty side (left out, counted).
        dropped: pairs longer than the length limits (left out, counted).
        src_tokens: source tokens in the store (no specials).
        tgt_tokens: target tokens in the store (no specials).
    """

    pairs: int
    skipped: int
    dropped: int
    src_tokens: int
    tgt_tokens: int


@dataclass
class TokenStore:
    """A built store, mapped read-only: ``src[i]`` and ``tgt[i]`` are the ids of pair ``i``."""

    folder: Path
    fingerprint: str
    counts: StoreCounts
    src: RaggedIds
    tgt: RaggedIds
    links: RaggedIds | None = None

    def __len__(self) -> int:
        return len(self.src)

    @classmethod
    def open(cls, folder: str | Path) -> TokenStore:
        """Map the store in ``folder``.

        Raises:
            FileNotFoundError: ``folder`` holds no complete store (no ``meta.json``).
            ValueError: ``meta.json`` or an array file is damaged or does not
                match it (the message names the file).
        """
        folder = Path(folder)
        meta = _read_meta(folder)
        dtype = np.dtype(meta["dtype"])
        arrays = {}
        for side in SIDES:
            offsets = _map(folder / f"{side}.offsets", np.int64, meta["pairs"] + 1)
            flat = _map(folder / f"{side}.ids", dtype, meta[f"{side}_tokens"])
            if offsets[0] != 0 or offsets[-1] != len(flat):
                raise ValueError(f"{folder / (side + '.offsets')}: does not index {side}.ids")
            lengths = _map(folder / f"{side}.lengths", meta["length_dtype"], meta["pairs"])
            if int(lengths.sum(dtype=np.int64)) != len(flat):
                raise ValueError(f"{folder / (side + '.lengths')}: does not add up to {side}.ids")
            read = SentenceReader(folder / f"{side}.ids", folder / f"{side}.offsets", dtype)
            arrays[side] = RaggedIds(flat, offsets, lengths, read)
        links = None
        if meta.get("link_values") is not None:
            offsets = _map(folder / "links.offsets", np.int64, meta["pairs"] + 1)
            flat = _map(folder / "links.ids", np.dtype(np.int32), meta["link_values"])
            if offsets[0] != 0 or offsets[-1] != len(flat):
                raise ValueError(f"{folder / 'links.offsets'}: does not index links.ids")
            read = SentenceReader(folder / "links.ids", folder / "links.offsets", np.int32)
            links = RaggedIds(flat, offsets, read=read)
        counts = StoreCounts(**{k: meta[k] for k in StoreCounts.__dataclass_fields__})
        return cls(folder, meta["fingerprint"], counts, arrays["src"], arrays["tgt"], links)


def _read_meta(folder: Path) -> dict:
    path = folder / META
    if not path.is_file():
        raise FileNotFoundError(f"no token store in {folder} ({META} missing)")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
        ok = meta["format"] == FORMAT and meta["version"] == VERSION
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a token store record ({err!r})") from None
    if not ok:
        cls = OutdatedStore if meta.get("format") == FORMAT else ValueError
        raise cls(f"{path}: format {meta.get('format')!r} v{meta.get('version')!r}")
    if bad := _bad_fields(meta):
        raise ValueError(f"{path}: not a token store record ({bad})")
    return meta


_DTYPES = ("uint16", "uint32")  # what id_dtype and length_dtype give
_COUNTS = ("pairs", "src_tokens", "tgt_tokens", *StoreCounts.__dataclass_fields__)


def _bad_fields(meta: dict) -> str:
    """What in ``meta`` (a ``meta.json`` of the right format) no build writes: a dtype
    other than :data:`_DTYPES`, a count that is not a whole number >= 0, a fingerprint
    that is not text; ``""`` when it is sound. A damaged file gets a ``ValueError``
    (the store is rebuilt), never a ``TypeError`` from numpy, nor ids read in a dtype
    of the same width (``float32`` for ``uint32``)."""
    for key in ("dtype", "length_dtype"):
        if meta.get(key) not in _DTYPES:
            return f"{key} must be one of {', '.join(_DTYPES)}, got {meta.get(key)!r}"
    optional = () if meta.get("link_values") is None else ("link_values",)
    for key in dict.fromkeys((*_COUNTS, *optional)):
        value = meta.get(key)
        if type(value) is not int or value < 0:
            return f"{key} must be a whole number >= 0, got {value!r}"
    if not isinstance(meta.get("fingerprint"), str):
        return f"fingerprint must be text, got {meta.get('fingerprint')!r}"
    return ""


class OutdatedStore(ValueError):
    """A store written by another version of attnkit in an older (or newer) layout."""


def _map(path: Path, dtype: np.dtype, count: int) -> np.ndarray:
    expected = count * np.dtype(dtype).itemsize
    if not path.is_file():
        raise ValueError(f"{path}: missing, expected {expected} bytes")
    size = path.stat().st_size
    if size != expected:
        raise ValueError(f"{path}: {size} bytes, expected {expected}")
    if count == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer dtype that holds ids ``0 .. vocab_size - 1``."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def length_dtype(longest: int) -> np.dtype:
    """The smallest unsigned integer dtype that holds lengths ``0 .. longest``."""
    return np.dtype(np.uint16 if longest < 1 << 16 else np.uint32)
