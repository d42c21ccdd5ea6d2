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

It is built in a temporary sibling folder and renamed into place, with
``meta.json`` written last, so a folder without a valid ``meta.json`` (a build
cut short) is never read; :func:`open_or_build` rebuilds it. The fingerprint
(a hash of whatever the caller says the store depends on: the data files, the
tokenizer, the length limits) decides whether a store can be reused. One
build at a time per store: a lock file beside it makes a second builder wait
and then reuse the first one's result.

Building: chunks of the corpus are encoded, length-filtered and flattened
(:mod:`.chunk_packing`) in worker processes (:func:`~.worker_pool.ordered_map`)
and written back in order, so a store built on several workers is byte for
byte the one built on one. :func:`build_store` takes the pairs from a reader
in this process (any stream of pairs: a toy task, a holdout);
:func:`build_store_from_lines` reads the files itself and only cuts them into
chunks of raw lines (:mod:`.line_chunks`), leaving the decoding and cleaning
of each line to the workers too, which is what keeps up with sentencepiece on
few cores.

Disk: ``2`` (``uint16``) or ``4`` bytes per token plus 20 bytes per pair.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...atomic import new_folder_beside, replace_folder, writing
from .chunk_packing import ChunkPacker, Encoded, LinePacker, PackedChunk, PairEncoder
from .line_chunks import LineFiles, check_readable, read_chunks
from .worker_pool import ordered_map

__all__ = [
    "OutdatedStore",
    "RaggedIds",
    "SentenceReader",
    "StoreCounts",
    "ChunkPacker",
    "PairEncoder",
    "TokenStore",
    "build_store",
    "build_store_from_lines",
    "fingerprint",
    "open_or_build",
]

FORMAT = "attnkit-token-store"
VERSION = 2  # 2: the lengths files
META = "meta.json"
SIDES = ("src", "tgt")
CHUNK_PAIRS = 20_000  # pairs (or lines) encoded per call to the tokenizer's batch encoder


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
    return meta


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


def _chunks(pairs: Iterable[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    chunk: list[tuple[str, str]] = []
    for pair in pairs:
        chunk.append(pair)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class _Writer:
    """Appends one column of a store being built to its files as the chunks come: the
    flat ids to ``NAME.ids``, the running offsets to ``NAME.offsets`` and, with
    ``lengths``, the lengths (``uint32``) to ``NAME.lengths``, narrowed to their final
    dtype by :meth:`narrow_lengths`. Nothing per sentence stays in memory, so a build's
    memory follows the chunk size, not the corpus. A failed write raises a
    :class:`~attnkit.atomic.WriteError` naming ``store``, the folder being built."""

    def __init__(self, folder: Path, name: str, store: Path, *, lengths: bool) -> None:
        self.store, self.sequences, self.tokens, self.longest = store, 0, 0, 0
        self.lengths_path = folder / f"{name}.lengths" if lengths else None
        paths = [folder / f"{name}.ids", folder / f"{name}.offsets", self.lengths_path]
        self.handles = []
        try:
            with writing(store):
                for path in filter(None, paths):
                    self.handles.append(open(path, "wb"))  # noqa: SIM115 (closed in close)
                self.handles[1].write(np.zeros(1, np.int64).tobytes())  # offsets[0]
        except BaseException:
            self.close()
            raise

    def write(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        ends = self.tokens + np.cumsum(lengths, dtype=np.int64)
        parts = [flat, ends]
        if self.lengths_path is not None:
            parts.append(lengths.astype(np.uint32))
        with writing(self.store):
            for handle, part in zip(self.handles, parts, strict=True):
                handle.write(part.tobytes())
        self.tokens = int(ends[-1]) if len(ends) else self.tokens
        self.longest = max(self.longest, int(lengths.max(initial=0)))
        self.sequences += len(lengths)

    def close(self) -> None:
        """Close the files (again: nothing happens)."""
        with writing(self.store):
            for handle in self.handles:
                handle.close()

    def narrow_lengths(self, dtype: np.dtype, block: int = 1 << 16) -> None:
        """Rewrite the closed ``uint32`` lengths file as ``dtype``, ``block`` lengths at a time."""
        if self.lengths_path is None or dtype == np.uint32:
            return
        narrow = self.lengths_path.with_suffix(".narrow")
        with writing(self.store), open(self.lengths_path, "rb") as src, open(narrow, "wb") as out:
            while len(part := np.fromfile(src, np.uint32, count=block)):
                out.write(part.astype(dtype).tobytes())
        with writing(self.store):
            os.replace(narrow, self.lengths_path)


def length_dtype(longest: int) -> np.dtype:
    """The smallest unsigned integer dtype that holds lengths ``0 .. longest``."""
    return np.dtype(np.uint16 if longest < 1 << 16 else np.uint32)


def build_store(
    folder: str | Path,
    pairs: Iterable[tuple],
    encode_chunk: Callable[[list[tuple]], Encoded],
    *,
    vocab_size: int,
    fingerprint: str,
    max_src_len: int | None = None,
    max_tgt_len: int | None = None,
    skipped: int | Callable[[], int] = 0,
    progress: Callable[[int], None] | None = None,
    links: bool = False,
    workers: int = 1,
) -> TokenStore:
    """Encode ``pairs`` chunk by chunk into a new store at ``folder`` (replacing any there).

    Args:
        folder: where the store goes; built in a temporary sibling, then renamed.
        pairs: (source, target) sentences, read lazily (a generator over the files);
            with ``links``, each also carries what ``encode_chunk`` needs for them.
        encode_chunk: a chunk of ``pairs`` -> (source ids, target ids, links or
            None), ids without specials (:class:`PairEncoder`, or
            :class:`~.word_links.AlignedEncoder` for guided alignment, whose
            links, flat ``[s0, t0, s1, t1, ...]`` piece indices per pair, are
            stored as ``links.*`` under the same length filter).
        vocab_size: the larger vocabulary of the two sides (chooses the dtype).
        fingerprint: recorded in ``meta.json``; :func:`open_or_build` compares it.
        max_src_len: pairs with a longer source (tokens, no specials) are dropped.
        max_tgt_len: the same for the target.
        skipped: pairs the reader left out for an empty side, or a callable that
            says how many once ``pairs`` is exhausted (recorded).
        progress: told the number of pairs read after each chunk.
        links: ``encode_chunk`` gives links (write ``links.*``).
        workers: processes that encode (from the second chunk on; 1: all in
            this process). ``encode_chunk`` must then pickle.

    Raises:
        whatever reading ``pairs`` or ``encode_chunk`` raises (the files' own
        errors, with file and line); nothing is left behind then but the
        untouched old store, if any.
        WriteError: the store could not be written (a full disk, a read-only
            folder); it names ``folder``, and the old store, if any, is kept.
    """
    packer = ChunkPacker(encode_chunk, id_dtype(vocab_size), max_src_len, max_tgt_len)
    packed = ordered_map(packer, _chunks(pairs, CHUNK_PAIRS), workers)
    return _write_store(folder, packed, packer.dtype, fingerprint, skipped, progress, links)


def build_store_from_lines(
    folder: str | Path,
    files: LineFiles,
    encode_chunk: Callable[[list[tuple]], Encoded],
    *,
    vocab_size: int,
    fingerprint: str,
    max_src_len: int | None = None,
    max_tgt_len: int | None = None,
    max_pairs: int | None = None,
    progress: Callable[[int], None] | None = None,
    workers: int = 1,
) -> TokenStore:
    """:func:`build_store` reading ``files`` itself: the same store, the work in the workers.

    This process only cuts the files into chunks of raw lines
    (:func:`~.line_chunks.read_chunks`) and appends what comes back; the
    workers decode, clean, count and encode the lines (:class:`LinePacker`), so
    that on few cores the reading does not compete with the encoding. The
    pairs, counts, errors (file and line) and bytes are those of
    :func:`build_store` over :func:`~.corpus.stream_split` of the same files.

    Args:
        folder, encode_chunk, vocab_size, fingerprint, max_src_len, max_tgt_len,
            progress, workers: as for :func:`build_store` (links are stored when
            ``files`` has alignments; each pair then comes to ``encode_chunk``
            as ``(source, target, (alignment line, number))``).
        files: the corpus files (and alignments).
        max_pairs: read only the first ``max_pairs`` pairs that have no blank
            side (``data.max_train_pairs``); nothing after them is read.

    Raises:
        FileNotFoundError, ValueError: the files' own errors (file and line),
            after the lines before the bad one were read; nothing is left behind
            but the untouched old store, if any.

        WriteError: as for :func:`build_store`.
    """
    packer = ChunkPacker(encode_chunk, id_dtype(vocab_size), max_src_len, max_tgt_len)
    packed = ordered_map(LinePacker(files, packer), read_chunks(files, CHUNK_PAIRS), workers)
    links = files.alignments is not None
    return _write_store(folder, packed, packer.dtype, fingerprint, 0, progress, links, max_pairs)


def _write_store(
    folder: str | Path,
    chunks: Iterator[PackedChunk],
    dtype: np.dtype,
    fingerprint: str,
    skipped: int | Callable[[], int],
    progress: Callable[[int], None] | None,
    links: bool,
    max_pairs: int | None = None,
) -> TokenStore:
    """Append ``chunks`` to a new store built beside ``folder``, then put it in place."""
    folder = Path(folder)
    with writing(folder):
        folder.parent.mkdir(parents=True, exist_ok=True)
        for stale in folder.parent.glob(f".{folder.name}.*.tmp"):  # builds that were killed
            shutil.rmtree(stale, ignore_errors=True)
        tmp = new_folder_beside(folder)
    writers: dict[str, _Writer] = {}
    try:
        for name in (*SIDES, "links") if links else SIDES:
            writers[name] = _Writer(tmp, name, folder, lengths=name in SIDES)
        with contextlib.closing(chunks):
            tally = _append(writers, chunks, progress, max_pairs)
        for writer in writers.values():
            writer.close()
        tokens = {name: writer.tokens for name, writer in writers.items()}
        lengths_as = length_dtype(max(writers[side].longest for side in SIDES))
        for side in SIDES:
            writers[side].narrow_lengths(lengths_as)
        counts = StoreCounts(
            pairs=writers["src"].sequences,
            skipped=tally.skipped + (skipped() if callable(skipped) else skipped),
            dropped=tally.dropped,
            src_tokens=tokens["src"],
            tgt_tokens=tokens["tgt"],
        )
        meta = {"format": FORMAT, "version": VERSION, "fingerprint": fingerprint}
        meta |= {"dtype": dtype.name, "length_dtype": lengths_as.name, **counts.__dict__}
        if "links" in tokens:
            meta["link_values"] = tokens["links"]
        with writing(folder):  # the folder is replaced whole: a plain write suffices inside it
            (tmp / META).write_bytes(json.dumps(meta, indent=2).encode("utf-8"))
            replace_folder(tmp, folder)
    except BaseException:
        with contextlib.suppress(OSError):
            for writer in writers.values():
                writer.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return TokenStore.open(folder)


@dataclass
class _Tally:
    read: int = 0
    skipped: int = 0
    dropped: int = 0


def _append(
    writers: dict[str, _Writer],
    chunks: Iterator[PackedChunk],
    progress: Callable[[int], None] | None,
    max_pairs: int | None,
) -> _Tally:
    """Write each chunk's columns, in order, until the chunks end, one carries an error
    (raised after its lines), or ``max_pairs`` pairs were read."""
    tally = _Tally()
    for packed in chunks:
        last = max_pairs is not None and tally.read + packed.read >= max_pairs
        if last:
            packed = packed.head(max_pairs - tally.read)
        for name, writer in writers.items():
            writer.write(*packed.columns[name])
        tally.read += packed.read
        tally.skipped += packed.skipped
        tally.dropped += packed.dropped
        if progress is not None:
            progress(tally.read)
        if packed.error is not None:
            raise packed.error
        if last:
            break
    return tally


@contextlib.contextmanager
def _build_lock(folder: Path) -> Iterator[None]:
    """One builder per store: a second one waits here until the first is done."""
    with writing(folder):
        folder.parent.mkdir(parents=True, exist_ok=True)
        handle = open(folder.with_name(f".{folder.name}.lock"), "a")  # noqa: SIM115
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def open_or_build(
    folder: str | Path,
    fingerprint: str,
    build: Callable[[], TokenStore],
    echo: Callable[[str], None] | None = None,
    *,
    also: Sequence[str] = (),
) -> TokenStore:
    """The store at ``folder`` if it is complete and its fingerprint matches, else ``build()``.

    ``also``: fingerprints an earlier attnkit gave the same data (a store it built is
    reused as it is). ``echo`` hears why a store is rebuilt (a different fingerprint, a
    build cut short or damaged, a store of another layout version; nothing for a first
    build).
    """
    folder = Path(folder)
    with _build_lock(folder):
        try:
            store = TokenStore.open(folder)
        except FileNotFoundError:
            why = None if not folder.exists() else "an earlier build was cut short"
        except OutdatedStore as err:
            why = f"it was written in another layout ({err}; this attnkit writes v{VERSION})"
        except ValueError as err:
            why = f"it is damaged ({err})"
        else:
            if store.fingerprint == fingerprint or store.fingerprint in also:
                return store
            why = "the data, tokenizer or length limits changed"
        if echo is not None and why is not None:
            echo(f"token store {folder}: rebuilding, {why}")
        return build()
