"""The training split of a run, for corpora of any size: a sampled tokenizer and a token store.

Nothing here holds the corpus in memory. The tokenizer trains on a bounded
random sample drawn in one pass (:func:`sample_pairs`, reservoir sampling), and
the split is encoded chunk by chunk into a memory-mapped token store
(:mod:`attnkit.nmt.data.store`) that is reused while its fingerprint — the
data section (less the valid and test files), the identity (path, size,
modification time) of each training file and the tokenizers' bytes — is unchanged.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..config import DataConfig, TokenizerConfig
from .chunk_packing import PairEncoder
from .corpus import multi30k_path, stream_split
from .line_chunks import LineFiles, check_readable
from .store import TokenStore, file_identity, fingerprint
from .store_build import build_store, build_store_from_lines, open_or_build
from .subword_sampling import SampledSegmentation
from .tokenizer import Tokenizer, train_tokenizers
from .word_links import AlignedEncoder
from .word_split import WordRule

__all__ = [
    "Sample",
    "open_training_store",
    "sample_pairs",
    "store_fingerprint",
    "training_data_settings",
    "train_line_files",
    "train_on_sample",
    "train_split_files",
]


@dataclass
class Sample:
    """Sentence pairs drawn from a corpus, and how many pairs the corpus had.

    Attributes:
        src, tgt: the sampled sides, line-aligned.
        total: pairs in the whole corpus (``len(src)`` when it was all taken).
    """

    src: list[str]
    tgt: list[str]
    total: int


def sample_pairs(pairs: Iterable[tuple[str, str]], size: int, seed: int) -> Sample:
    """At most ``size`` pairs drawn uniformly at random from ``pairs`` in one pass.

    Reservoir sampling (Vitter 1985, Algorithm R): memory follows ``size``,
    not the corpus. When the corpus has at most ``size`` pairs, the sample is
    the whole corpus in its order. The same ``seed`` draws the same sample.

    Raises:
        ValueError: ``size`` is not positive.
    """
    if size <= 0:
        raise ValueError(f"size must be > 0, got {size}")
    rng = random.Random(seed)
    src: list[str] = []
    tgt: list[str] = []
    seen = 0
    for seen, (s, t) in enumerate(pairs, start=1):  # noqa: B007 (the count is returned)
        if seen <= size:
            src.append(s)
            tgt.append(t)
            continue
        slot = rng.randrange(seen)
        if slot < size:
            src[slot], tgt[slot] = s, t
    return Sample(src, tgt, seen)


def train_on_sample(
    sample: Sample, config: TokenizerConfig, threads: int
) -> tuple[Tokenizer, Tokenizer]:
    """(source, target) tokenizers trained on ``sample`` with the ``tokenizer`` section."""
    return train_tokenizers(
        sample.src,
        sample.tgt,
        kind=config.kind,
        vocab_size=config.vocab_size,
        joint=config.joint,
        model_type=config.model_type,
        character_coverage=config.character_coverage,
        normalization=config.normalization,
        threads=threads,
    )


def train_split_files(data: DataConfig) -> list[Path]:
    """The files the training split is read from (none for a toy task, made from its config)."""
    if data.bundled == "multi30k":
        return [multi30k_path("train", data.src_lang), multi30k_path("train", data.tgt_lang)]
    if data.train is None:
        return []
    files = data.train
    return [Path(files.tsv)] if files.tsv is not None else [Path(files.src), Path(files.tgt)]


def train_line_files(data: DataConfig, alignments: str | Path | None = None) -> LineFiles | None:
    """The training split's files, to be read as raw lines (:mod:`.line_chunks`); None when
    the split is not read straight from files (a toy task; a holdout for validation, which
    needs a first pass to count the pairs)."""
    if data.toy is not None or (data.bundled is None and data.valid_holdout is not None):
        return None
    if data.bundled == "multi30k":
        corpus = (multi30k_path("train", data.src_lang), multi30k_path("train", data.tgt_lang))
        return LineFiles(corpus, alignments=alignments)
    files = data.train
    if files.tsv is not None:
        columns = (files.src_column, files.tgt_column)
        return LineFiles((files.tsv,), columns, alignments)
    return LineFiles((files.src, files.tgt), alignments=alignments)


# data keys the training split is read without: a new dev or test set keeps the store
_OTHER_SPLITS = ("valid", "test")
_LENGTH_LIMITS = ("max_src_len", "max_tgt_len")  # applied after tokenizing, not to the sample


def training_data_settings(data: DataConfig, *, lengths: bool = True, legacy: bool = False) -> dict:
    """The data section as the training split is read with it: without ``valid`` and
    ``test`` (never read for training), and without the length limits unless ``lengths``
    (the tokenizers' sample is drawn before them). ``legacy``: the whole section, as
    keys were made before (a store or tokenizers made then match it)."""
    if legacy:
        return data.model_dump(mode="json")
    left_out = set(_OTHER_SPLITS) | (set() if lengths else set(_LENGTH_LIMITS))
    return data.model_dump(mode="json", exclude=left_out)


def store_fingerprint(
    data: DataConfig,
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    alignments: str | Path | None = None,
    words: WordRule = "whitespace",
    sampling: SampledSegmentation | None = None,
    *,
    legacy: bool = False,
) -> str:
    """What the training store depends on, hashed: the data settings it is read with
    (:func:`training_data_settings`; ``legacy``: the whole data section), training files,
    tokenizers, and the guided-alignment file when there is one (its path, size and
    modification time) with the word rule its indices count (left out for ``whitespace``,
    so stores built before the rule existed keep their fingerprint), or the sampled
    segmentation."""
    parts = {
        "data": training_data_settings(data, legacy=legacy),
        "files": [file_identity(path) for path in train_split_files(data)],
        "src_tokenizer": fingerprint({"bytes": src_tok.to_bytes().hex()}),
        "tgt_tokenizer": fingerprint({"bytes": tgt_tok.to_bytes().hex()}),
    }
    if alignments is not None:
        parts["alignments"] = file_identity(alignments)
        if words != "whitespace":
            parts["alignment_words"] = words
    if sampling is not None:
        parts["sampling"] = sampling.key()
    return fingerprint(parts)


def open_training_store(
    data: DataConfig,
    folder: str | Path,
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    *,
    threads: int = 1,
    echo: Callable[[str], None] | None = None,
    progress: Callable[[int], None] | None = None,
    alignments: str | Path | None = None,
    words: WordRule = "whitespace",
    sampling: SampledSegmentation | None = None,
) -> TokenStore:
    """The training split as a token store in ``folder``: reused if current, else built.

    Pairs longer than ``data.max_src_len`` / ``max_tgt_len`` tokens are left
    out and counted (``store.counts.dropped``), as are pairs with an empty
    side (``store.counts.skipped``).

    Args:
        data: the run's data section.
        folder: where the store lives (``RUN/store/train``).
        src_tok, tgt_tok: the run's tokenizers.
        threads: processes that encode (:func:`~.store_build.build_store`'s ``workers``).
        echo: hears why an existing store is rebuilt.
        progress: told the number of pairs read so far while building.
        alignments: a Pharaoh file line-aligned with the training corpus file(s)
            (guided alignment): its links, mapped onto pieces, are stored with
            the pairs that pass the same filters (``store.links``); the pairs'
            words are then encoded one by one (:mod:`.word_links`).
        words: what the alignment file's indices count (:mod:`.word_split`).
        sampling: encode with sampled segmentations (:mod:`.subword_sampling`), not the
            best one; not with ``alignments``.

    Raises:
        FileNotFoundError, ValueError: the corpus files' own errors (file and line),
            and the alignment file's (missing, line count, bad link; file and line).
        ValueError: both ``alignments`` and ``sampling``.
        TypeError: ``sampling`` of a side whose tokenizer is not sentencepiece.

    A training file that is gone leaves a complete store in ``folder`` as it is,
    with a note to ``echo`` (but for ``sampling``, which encodes from the files).
    """
    if alignments is not None:
        check_readable(alignments, "alignment file")
    if alignments is not None and sampling is not None:
        raise ValueError("alignment links need one segmentation: no sampling with alignments")
    try:
        key = store_fingerprint(data, src_tok, tgt_tok, alignments, words, sampling)
    except FileNotFoundError as gone:  # a training file deleted since the store was built
        if sampling is not None:  # each epoch's sample is encoded from the files
            raise
        return _store_without_files(folder, gone, echo)
    legacy = store_fingerprint(data, src_tok, tgt_tok, alignments, words, sampling, legacy=True)

    encoders = (
        (src_tok.encode_batch, tgt_tok.encode_batch)
        if sampling is None
        else sampling.encoders(src_tok, tgt_tok)
    )
    encoder = (
        PairEncoder(*encoders)
        if alignments is None
        else AlignedEncoder(*encoders, alignments, words, src_tok.pieces, tgt_tok.pieces)
    )
    common = {
        "vocab_size": max(src_tok.vocab_size, tgt_tok.vocab_size),
        "fingerprint": key,
        "max_src_len": data.max_src_len,
        "max_tgt_len": data.max_tgt_len,
        "progress": progress,
        "workers": threads,
    }

    def build() -> TokenStore:
        files = train_line_files(data, alignments)
        if files is not None:
            return build_store_from_lines(
                folder, files, encoder, max_pairs=data.max_train_pairs, **common
            )
        pairs = stream_split(data, "train", alignments=alignments)
        links = alignments is not None
        return build_store(
            folder, pairs, encoder, skipped=lambda: pairs.skipped, links=links, **common
        )

    return open_or_build(folder, key, build, echo, also=(legacy,))


def _store_without_files(
    folder: str | Path, gone: FileNotFoundError, echo: Callable[[str], None] | None
) -> TokenStore:
    """The complete store in ``folder``, used as it is although a training file is gone
    (``gone``: a scratch disk purged after ``prepare``): without the file it can be
    neither checked nor rebuilt. ``echo`` hears a note that says so.

    Raises:
        FileNotFoundError: ``gone``, when ``folder`` holds no complete store.
    """
    try:
        store = TokenStore.open(folder)
    except (FileNotFoundError, ValueError):
        raise gone from None
    if echo is not None:
        echo(
            f"note: {gone}; the token store {folder} built from it is used as it is "
            f"({len(store):,} pairs): without the file it can be neither checked nor rebuilt"
        )
    return store
