"""Reading parallel text: two line-aligned files, a TSV, or the bundled Multi30k.

A parallel corpus is a list of (source, target) sentence pairs. Files may be
gzipped (``.gz``); text must be UTF-8 (a leading byte order mark is dropped) without
NUL bytes (UTF-16 or an archive read as UTF-8 has them); a file of another
compressor (xz, bzip2, zstd, zip, 7z) is refused, named.
Errors name the file and the 1-based line.
Pairs where either side is empty (:func:`attnkit.nmt.data.text.is_blank`: only
whitespace and invisible characters) are skipped and counted, never silently
dropped — except with ``keep_empty=True``, which keeps every line (a blank side
as ``""``) so that a test set is scored whole and its translations stay
line-aligned with its files.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..config import DataConfig, SplitFiles
from .line_chunks import (
    READ_ERRORS,
    check_readable,
    decode_line,
    line_count_error,
    open_bytes,
    read_error,
    tsv_cells,
)
from .text import is_blank

__all__ = [
    "MULTI30K_SPLITS",
    "PairStream",
    "ParallelCorpus",
    "bundled_multi30k",
    "load_split",
    "multi30k_path",
    "iter_lines",
    "read_lines",
    "read_parallel",
    "read_tsv",
    "stream_parallel",
    "stream_split",
    "stream_tsv",
]

log = logging.getLogger(__name__)

MULTI30K_SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
MULTI30K_LANGS = ("de", "en")


@dataclass
class ParallelCorpus:
    """Aligned source/target sentences, ``src[i]`` translates to ``tgt[i]``.

    ``skipped`` counts the pairs dropped because one side was empty (always 0
    when read with ``keep_empty=True``; blank sides are then ``""``).
    """

    src: list[str]
    tgt: list[str]
    skipped: int = 0

    def __post_init__(self) -> None:
        if len(self.src) != len(self.tgt):
            raise ValueError(f"src has {len(self.src)} sentences but tgt has {len(self.tgt)}")

    def __len__(self) -> int:
        return len(self.src)

    def head(self, n: int | None) -> ParallelCorpus:
        """The first ``n`` pairs (all of them for ``None``)."""
        if n is None:
            return self
        return ParallelCorpus(self.src[:n], self.tgt[:n], self.skipped)


def read_lines(path: str | Path) -> list[str]:
    """All lines of a UTF-8 text file (gzipped or not), without line endings.

    Raises:
        FileNotFoundError: ``path`` does not exist (the message names it).
        ValueError: a line is not valid UTF-8 or holds a NUL byte, or the gzip stream
            is corrupt (the message names the file and the line).
    """
    return list(iter_lines(path))


def iter_lines(path: str | Path) -> Iterator[str]:
    """:func:`read_lines` one line at a time: memory follows the longest line, not the file.

    Raises:
        the errors of :func:`read_lines`, when the bad line is reached (the
        missing file at the first ``next``).
    """
    path = Path(path)
    check_readable(path)
    number = 0
    try:
        with open_bytes(path) as handle:
            for number, raw in enumerate(handle, start=1):  # noqa: B007 (read in except)
                text = decode_line(raw, path, number)
                if number == 1:
                    text = text.removeprefix("\ufeff")  # byte order mark of some editors
                yield text.rstrip("\r\n")
    except READ_ERRORS as err:
        raise read_error(path, number, err) from None


class PairStream:
    """Sentence pairs read lazily from their files, stripped; pairs with a blank side counted.

    Each iteration reads the files from the start. Unless ``keep_empty``, a
    pair with a blank side (:func:`attnkit.nmt.data.text.is_blank`) is left
    out and counted in ``skipped`` (the pairs read so far in the current or
    last iteration); with ``keep_empty`` a blank side is ``""`` and nothing is
    left out. A stream made from another (``inner``: a holdout, the first N
    pairs) takes the pairs as they come and reports the inner stream's count.
    """

    def __init__(
        self,
        raw: Callable[[], Iterator[tuple[str, str]]],
        where: str,
        keep_empty: bool = False,
        *,
        inner: PairStream | None = None,
    ) -> None:
        self._raw = raw
        self.where = where
        self.keep_empty = keep_empty
        self.inner = inner
        self._skipped = 0

    @property
    def skipped(self) -> int:
        """Pairs left out for a blank side."""
        return self._skipped if self.inner is None else self.inner.skipped

    def __iter__(self) -> Iterator[tuple[str, str]]:
        if self.inner is not None:
            yield from self._raw()
            return
        self._skipped = 0
        for s, t, *extra in self._raw():  # extra: a line-aligned file's (line, number)
            s = "" if is_blank(s) else s.strip()
            t = "" if is_blank(t) else t.strip()
            if self.keep_empty or (s and t):
                yield (s, t, *extra) if extra else (s, t)
            else:
                self._skipped += 1
        if self._skipped:
            log.info("%s: skipped %d pair(s) with an empty side", self.where, self._skipped)

    def read(self) -> ParallelCorpus:
        """Every pair, in memory (for the small splits: valid, test)."""
        pairs = list(self)
        return ParallelCorpus([s for s, _ in pairs], [t for _, t in pairs], self.skipped)


def _require(*paths: str | Path) -> None:
    for path in paths:
        check_readable(path)


def _parallel_lines(src_path: str | Path, tgt_path: str | Path) -> Iterator[tuple[str, str]]:
    _require(src_path, tgt_path)
    missing = object()
    number = 0
    lines = itertools.zip_longest(iter_lines(src_path), iter_lines(tgt_path), fillvalue=missing)
    for number, (s, t) in enumerate(lines, start=1):  # noqa: B007 (read after the loop)
        if s is missing or t is missing:
            rest = sum(1 for _ in lines)
            counts = (number - 1, number + rest) if s is missing else (number + rest, number - 1)
            raise line_count_error((src_path, tgt_path), counts, number)
        yield s, t


def stream_parallel(
    src_path: str | Path, tgt_path: str | Path, *, keep_empty: bool = False
) -> PairStream:
    """The pairs of two line-aligned files, read lazily (see :func:`read_parallel`)."""
    where = f"{src_path} / {tgt_path}"
    return PairStream(lambda: _parallel_lines(src_path, tgt_path), where, keep_empty)


def read_parallel(
    src_path: str | Path, tgt_path: str | Path, *, keep_empty: bool = False
) -> ParallelCorpus:
    """Read two line-aligned files: line i of ``src_path`` translates line i of ``tgt_path``.

    Args:
        src_path: source sentences, one per line, UTF-8, optionally gzipped.
        tgt_path: their translations, same number of lines.
        keep_empty: keep pairs with a blank side (as ``""``) instead of skipping them.

    Raises:
        FileNotFoundError: a file is missing.
        ValueError: the files have different line counts (the message names
            both files and the first line without a partner), or a line is not UTF-8.
    """
    return stream_parallel(src_path, tgt_path, keep_empty=keep_empty).read()


def _tsv_cells(path: str | Path, src_column: int, tgt_column: int) -> Iterator[tuple[str, str]]:
    _require(path)
    for number, line in enumerate(iter_lines(path), start=1):
        yield tsv_cells(line, path, number, src_column, tgt_column)


def stream_tsv(
    path: str | Path, src_column: int = 0, tgt_column: int = 1, *, keep_empty: bool = False
) -> PairStream:
    """The pairs of a tab-separated file, read lazily (see :func:`read_tsv`)."""
    return PairStream(lambda: _tsv_cells(path, src_column, tgt_column), str(path), keep_empty)


def read_tsv(
    path: str | Path, src_column: int = 0, tgt_column: int = 1, *, keep_empty: bool = False
) -> ParallelCorpus:
    """Read a tab-separated file with the source and target in the given columns.

    A blank line is a pair with two blank sides; ``keep_empty`` keeps such
    pairs (as ``""``) instead of skipping them, as in :func:`read_parallel`.

    Raises:
        FileNotFoundError: the file is missing.
        ValueError: a non-empty line has too few columns, or is not UTF-8.
    """
    return stream_tsv(path, src_column, tgt_column, keep_empty=keep_empty).read()


def multi30k_path(split: str, lang: str) -> Path:
    """Path of a bundled Multi30k file, e.g. ``multi30k_path("train", "de")``.

    Raises:
        ValueError: unknown split (train, valid, test) or language (de, en).
    """
    if split not in MULTI30K_SPLITS:
        raise ValueError(f"Multi30k split must be one of {sorted(MULTI30K_SPLITS)}, got {split!r}")
    if lang not in MULTI30K_LANGS:
        raise ValueError(f"Multi30k language must be one of {MULTI30K_LANGS}, got {lang!r}")
    root = resources.files("attnkit") / "data" / "multi30k"
    return Path(str(root / f"{MULTI30K_SPLITS[split]}.{lang}.gz"))


def bundled_multi30k(
    split: str, src_lang: str = "de", tgt_lang: str = "en", *, keep_empty: bool = False
) -> ParallelCorpus:
    """The bundled Multi30k Task 1 split in the direction ``src_lang -> tgt_lang``.

    Elliott et al. 2016, doi:10.18653/v1/W16-3210 (non-commercial research and
    education use; see ``attnkit/data/multi30k/README.md``).
    """
    return _multi30k_stream(split, src_lang, tgt_lang, keep_empty).read()


def _multi30k_stream(split: str, src_lang: str, tgt_lang: str, keep_empty: bool) -> PairStream:
    if src_lang == tgt_lang:
        raise ValueError(f"src_lang and tgt_lang must differ, both are {src_lang!r}")
    src, tgt = multi30k_path(split, src_lang), multi30k_path(split, tgt_lang)
    return stream_parallel(src, tgt, keep_empty=keep_empty)


def _files_stream(files: SplitFiles, keep_empty: bool) -> PairStream:
    if files.tsv is not None:
        return stream_tsv(files.tsv, files.src_column, files.tgt_column, keep_empty=keep_empty)
    return stream_parallel(files.src, files.tgt, keep_empty=keep_empty)


def _holdout(pairs: PairStream, size: int, split: str) -> PairStream:
    """Every ``n // size``-th of the ``n`` pairs (``size`` of them) for 'valid', the rest for
    'train'.

    Counts the pairs in a first pass, so the files are read twice.

    Raises:
        ValueError: ``size`` leaves no training pairs.
    """

    def picked() -> Iterator[tuple[str, str]]:
        total = sum(1 for _ in pairs)
        if size >= total:
            raise ValueError(
                f"data.valid_holdout={size} leaves no training pairs ({total} pairs in all)"
            )
        stride = total // size
        for i, pair in enumerate(pairs):
            held = i % stride == 0 and i < stride * size
            if held == (split == "valid"):
                yield pair

    return PairStream(picked, pairs.where, inner=pairs)


def _toy_stream(data: DataConfig, split: str) -> PairStream:
    from .toy import toy_corpus

    toy = data.toy
    corpus = toy_corpus(
        toy.task,
        getattr(toy, f"{split}_size"),
        num_symbols=toy.num_symbols,
        min_len=toy.min_len,
        max_len=toy.max_len,
        seed=toy.seed + list(MULTI30K_SPLITS).index(split),
    )
    return PairStream(lambda: zip(corpus.src, corpus.tgt, strict=True), f"toy {split}", True)


def stream_split(
    data: DataConfig,
    split: str,
    *,
    keep_empty: bool = False,
    alignments: str | Path | None = None,
) -> PairStream:
    """The ``split`` ('train', 'valid' or 'test') of the corpus that ``data`` describes, lazily.

    The files are read as the stream is iterated, never whole; the training
    split stops after ``data.max_train_pairs`` pairs. See :func:`load_split`.
    A ``data.valid_holdout`` split skips blank pairs even with ``keep_empty``:
    it is drawn from the pairs training reads, so evaluating it scores the
    pairs training held out.

    With ``alignments`` (a file line-aligned with the corpus file(s) the split
    is read from, all lines, before any holdout, blank-pair skipping or
    ``max_train_pairs``), each pair comes as ``(source, target, (line, number))``
    with that file's line and its 1-based number
    (:func:`attnkit.nmt.data.word_links.attach_lines`).

    Raises:
        ValueError: an unknown split, or the config has no such split (user
            corpora without ``test``).
    """
    if split not in MULTI30K_SPLITS:
        raise ValueError(f"split must be one of {sorted(MULTI30K_SPLITS)}, got {split!r}")
    holdout = data.valid_holdout is not None and split in ("train", "valid")
    if data.bundled == "multi30k":
        pairs = _multi30k_stream(split, data.src_lang, data.tgt_lang, keep_empty)
    elif data.toy is not None:
        pairs = _toy_stream(data, split)
    else:
        files = data.train if holdout else getattr(data, split)
        if files is None:
            raise ValueError(f"the config's data section has no '{split}' files")
        # a holdout counts the pairs training reads (blank ones skipped), also when an
        # evaluation asks to keep blank lines: else its stride lands on training pairs
        pairs = _files_stream(files, keep_empty and not holdout)
    if alignments is not None:
        pairs = _with_lines(pairs, alignments)
    if holdout and data.bundled != "multi30k" and data.toy is None:
        pairs = _holdout(pairs, data.valid_holdout, split)
    if split == "train" and data.max_train_pairs is not None:
        return _head(pairs, data.max_train_pairs)
    return pairs


def _with_lines(pairs: PairStream, path: str | Path) -> PairStream:
    """``pairs`` with each pair's line of the line-aligned file ``path`` attached."""
    from .word_links import attach_lines

    raw = attach_lines(pairs._raw, path, pairs.where)
    return PairStream(raw, pairs.where, pairs.keep_empty)


def _head(pairs: PairStream, n: int) -> PairStream:
    def first() -> Iterator[tuple[str, str]]:
        yield from itertools.islice(pairs, n)

    return PairStream(first, pairs.where, inner=pairs)


def load_split(data: DataConfig, split: str, *, keep_empty: bool = False) -> ParallelCorpus:
    """The ``split`` ('train', 'valid' or 'test') of the corpus that ``data`` describes.

    ``keep_empty`` keeps pairs with a blank side (see :func:`read_parallel`);
    evaluation uses it so that it scores, and writes, every line of the split.

    Raises:
        ValueError: the config has no such split (user corpora without ``test``).
    """
    return stream_split(data, split, keep_empty=keep_empty).read()
