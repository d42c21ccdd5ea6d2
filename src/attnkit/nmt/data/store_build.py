"""Building a token store (:mod:`.store`): the corpus encoded chunk by chunk onto disk.

A store is built in a temporary sibling folder and renamed into place, with
``meta.json`` written last, so a build cut short leaves nothing that is read;
:func:`open_or_build` reuses a complete store whose fingerprint matches and
rebuilds any other. One build at a time per store: a lock file beside it makes
a second builder wait and then reuse the first one's result.

Chunks of the corpus are encoded, length-filtered and flattened
(:mod:`.chunk_packing`) in worker processes (:func:`~.worker_pool.ordered_map`)
and written back in order, so a store built on several workers is byte for
byte the one built on one. :func:`build_store` takes the pairs from a reader
in this process (any stream of pairs: a toy task, a holdout);
:func:`build_store_from_lines` reads the files itself and only cuts them into
chunks of raw lines (:mod:`.line_chunks`), leaving the decoding and cleaning
of each line to the workers too, which is what keeps up with sentencepiece on
few cores. Nothing per sentence stays in memory: a build's memory follows the
chunk size, not the corpus.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...atomic import new_folder_beside, replace_folder, writing
from .chunk_packing import ChunkPacker, Encoded, LinePacker, PackedChunk
from .line_chunks import LineFiles, read_chunks
from .store import (
    FORMAT,
    META,
    SIDES,
    VERSION,
    OutdatedStore,
    StoreCounts,
    TokenStore,
    id_dtype,
    length_dtype,
)
from .worker_pool import ordered_map

__all__ = ["CHUNK_PAIRS", "build_store", "build_store_from_lines", "open_or_build"]

CHUNK_PAIRS = 20_000  # pairs (or lines) encoded per call to the tokenizer's batch encoder


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
