"""Reading parallel text: two line-aligned files, a TSV, or the bundled Multi30k.

A parallel corpus is a list of (source, target) sentence pairs. Files may be
gzipped (``.gz``); text must be UTF-8 (a leading byte order mark is dropped).
Errors name the file and the 1-based line.
Pairs where either side is empty (:func:`attnkit.nmt.data.text.is_blank`: only
whitespace and invisible characters) are skipped and counted, never silently
dropped — except with ``keep_empty=True``, which keeps every line (a blank side
as ``""``) so that a test set is scored whole and its translations stay
line-aligned with its files.
"""

from __future__ import annotations

import gzip
import logging
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..config import DataConfig, SplitFiles
from .text import is_blank

__all__ = [
    "MULTI30K_SPLITS",
    "ParallelCorpus",
    "bundled_multi30k",
    "load_split",
    "multi30k_path",
    "read_lines",
    "read_parallel",
    "read_tsv",
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


def _open_bytes(path: Path):
    with open(path, "rb") as probe:
        magic = probe.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def read_lines(path: str | Path) -> list[str]:
    """All lines of a UTF-8 text file (gzipped or not), without line endings.

    Raises:
        FileNotFoundError: ``path`` does not exist (the message names it).
        ValueError: a line is not valid UTF-8 or the gzip stream is corrupt
            (the message names the file and the line).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path}")
    lines: list[str] = []
    try:
        with _open_bytes(path) as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise ValueError(
                        f"{path}, line {number}: invalid UTF-8 at byte {err.start} ({err.reason})"
                    ) from None
                if number == 1:
                    text = text.removeprefix("\ufeff")  # byte order mark of some editors
                lines.append(text.rstrip("\r\n"))
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise ValueError(f"{path}: cannot read after line {len(lines)}: {err}") from None
    return lines


def _pairs(src: list[str], tgt: list[str], where: str, keep_empty: bool) -> ParallelCorpus:
    """Stripped pairs; blank sides become ``""`` and, unless ``keep_empty``, drop the pair."""
    kept_src, kept_tgt = [], []
    for s, t in zip(src, tgt, strict=True):
        s = "" if is_blank(s) else s.strip()
        t = "" if is_blank(t) else t.strip()
        if keep_empty or (s and t):
            kept_src.append(s)
            kept_tgt.append(t)
    skipped = len(src) - len(kept_src)
    if skipped:
        log.info("%s: skipped %d pair(s) with an empty side", where, skipped)
    return ParallelCorpus(kept_src, kept_tgt, skipped)


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
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        longer = src_path if len(src) > len(tgt) else tgt_path
        raise ValueError(
            f"line counts differ: {src_path} has {len(src)} lines but {tgt_path} has "
            f"{len(tgt)} ({longer}, line {min(len(src), len(tgt)) + 1} has no partner); "
            "parallel files must be line-aligned"
        )
    return _pairs(src, tgt, f"{src_path} / {tgt_path}", keep_empty)


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
    needed = max(src_column, tgt_column) + 1
    src, tgt = [], []
    for number, line in enumerate(read_lines(path), start=1):
        if is_blank(line):
            src.append("")
            tgt.append("")
            continue
        cells = line.split("\t")
        if len(cells) < needed:
            raise ValueError(
                f"{path}, line {number}: expected at least {needed} tab-separated columns, "
                f"got {len(cells)}"
            )
        src.append(cells[src_column])
        tgt.append(cells[tgt_column])
    return _pairs(src, tgt, str(path), keep_empty)


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
    if src_lang == tgt_lang:
        raise ValueError(f"src_lang and tgt_lang must differ, both are {src_lang!r}")
    return read_parallel(
        multi30k_path(split, src_lang), multi30k_path(split, tgt_lang), keep_empty=keep_empty
    )


def _read_split_files(files: SplitFiles, keep_empty: bool) -> ParallelCorpus:
    if files.tsv is not None:
        return read_tsv(files.tsv, files.src_column, files.tgt_column, keep_empty=keep_empty)
    return read_parallel(files.src, files.tgt, keep_empty=keep_empty)


def _holdout(corpus: ParallelCorpus, size: int, split: str) -> ParallelCorpus:
    """Every ``len(corpus) // size``-th pair (``size`` of them) for 'valid'; the rest for 'train'.

    Raises:
        ValueError: ``size`` leaves no training pairs.
    """
    if size >= len(corpus):
        raise ValueError(
            f"data.valid_holdout={size} leaves no training pairs ({len(corpus)} pairs in all)"
        )
    stride = len(corpus) // size
    held = set(range(0, stride * size, stride))
    keep = [i for i in range(len(corpus)) if (i in held) == (split == "valid")]
    pick = [corpus.src[i] for i in keep], [corpus.tgt[i] for i in keep]
    return ParallelCorpus(*pick, corpus.skipped)


def load_split(data: DataConfig, split: str, *, keep_empty: bool = False) -> ParallelCorpus:
    """The ``split`` ('train', 'valid' or 'test') of the corpus that ``data`` describes.

    ``keep_empty`` keeps pairs with a blank side (see :func:`read_parallel`);
    evaluation uses it so that it scores, and writes, every line of the split.

    Raises:
        ValueError: the config has no such split (user corpora without ``test``).
    """
    if split not in MULTI30K_SPLITS:
        raise ValueError(f"split must be one of {sorted(MULTI30K_SPLITS)}, got {split!r}")
    if data.bundled == "multi30k":
        corpus = bundled_multi30k(split, data.src_lang, data.tgt_lang, keep_empty=keep_empty)
    elif data.toy is not None:
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
    elif data.valid_holdout is not None and split in ("train", "valid"):
        corpus = _holdout(_read_split_files(data.train, keep_empty), data.valid_holdout, split)
    else:
        files = getattr(data, split)
        if files is None:
            raise ValueError(f"the config's data section has no '{split}' files")
        corpus = _read_split_files(files, keep_empty)
    return corpus.head(data.max_train_pairs) if split == "train" else corpus
