"""The ``data`` and ``tokenizer`` sections: where the parallel text comes from, and how it
is cut into tokens."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .section import Seed, _Section

# sentencepiece's trainer refuses a lower character_coverage (trainer_interface.cc's
# spec check: 0.98 <= character_coverage <= 1.0)
MIN_CHARACTER_COVERAGE = 0.98


class SplitFiles(_Section):
    """One split of a user corpus: two line-aligned files, or one TSV.

    Paths may be gzipped; relative paths are relative to the config file (given on the
    command line, ``--data.train.src FILE``, to the current folder). ``src_column`` and
    ``tgt_column`` (0-based) pick a TSV's columns; beside ``src`` and ``tgt`` files, which
    they would not change, any but the defaults (0, 1) is an error.
    """

    src: str | None = None
    tgt: str | None = None
    tsv: str | None = None
    src_column: int = Field(0, ge=0)
    tgt_column: int = Field(1, ge=0)

    @model_validator(mode="after")
    def _one_layout(self) -> SplitFiles:
        pair = self.src is not None and self.tgt is not None
        if pair == (self.tsv is not None) or (self.src is None) != (self.tgt is None):
            raise ValueError("give either both 'src' and 'tgt' files or one 'tsv' file")
        if self.tsv is not None and self.src_column == self.tgt_column:
            raise ValueError(f"src_column and tgt_column must differ, both are {self.src_column}")
        if self.tsv is None and (self.src_column, self.tgt_column) != (0, 1):
            raise ValueError(
                f"src_column={self.src_column} and tgt_column={self.tgt_column} pick the "
                "columns of a 'tsv' file, and this split has 'src' and 'tgt' files, which "
                "they would not change: to translate the other way, swap the files"
            )
        return self


class ToyConfig(_Section):
    """A synthetic task (see :mod:`attnkit.nmt.data.toy`): copy or reverse a symbol sequence."""

    task: Literal["copy", "reverse"]
    num_symbols: int = Field(20, gt=0, le=10000)
    min_len: int = Field(3, gt=0)
    max_len: int = Field(12, gt=0)
    train_size: int = Field(5000, gt=0)
    valid_size: int = Field(200, gt=0)
    test_size: int = Field(200, gt=0)
    seed: Seed = 0

    @model_validator(mode="after")
    def _lengths(self) -> ToyConfig:
        if self.min_len > self.max_len:
            raise ValueError(f"min_len ({self.min_len}) must be <= max_len ({self.max_len})")
        return self


class DataConfig(_Section):
    """Where the parallel text comes from and which direction to translate.

    Exactly one of ``bundled`` (Multi30k Task 1), ``toy`` or user files
    (``train`` + ``valid``, optional ``test``; ``valid``/``test`` beside
    ``bundled`` or ``toy`` are an error, not silently ignored). ``src_lang -> tgt_lang`` is the
    direction; for the bundled data they pick the files (``de`` or ``en``).
    Training pairs longer than ``max_src_len`` / ``max_tgt_len`` tokens are
    dropped (null: no limit); for a Transformer the limits are at most its
    ``model.max_positions`` less the one position ``</s>`` or ``<s>`` takes (a
    larger limit, or null, is lowered to that). ``max_train_pairs`` keeps only
    the first N training pairs.
    ``valid_holdout: N`` (user files without ``valid``) takes N training pairs,
    evenly spread (every ``len(train) // N``-th pair), out of training as the
    validation split: for a corpus that comes as one file, such as Tatoeba.
    """

    bundled: Literal["multi30k"] | None = None
    toy: ToyConfig | None = None
    train: SplitFiles | None = None
    valid: SplitFiles | None = None
    test: SplitFiles | None = None
    src_lang: str = "de"
    tgt_lang: str = "en"
    max_src_len: int | None = Field(50, gt=0)
    max_tgt_len: int | None = Field(50, gt=0)
    max_train_pairs: int | None = Field(None, gt=0)
    valid_holdout: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _one_source(self) -> DataConfig:
        chosen = [f"data.{k}" for k in ("bundled", "toy", "train") if getattr(self, k) is not None]
        if not chosen:
            raise ValueError("no data source: set data.bundled, data.toy or data.train")
        if len(chosen) > 1:
            raise ValueError(f"got both {' and '.join(chosen)} (set only one data source)")
        if self.valid_holdout is not None and (self.train is None or self.valid is not None):
            raise ValueError("valid_holdout needs 'train' files and no 'valid' files")
        if self.train is not None and self.valid is None and self.valid_holdout is None:
            raise ValueError("'valid' files (or valid_holdout) are required with 'train' files")
        for split in ("valid", "test"):  # they belong to data.train; elsewhere never read
            if self.train is None and getattr(self, split) is not None:
                raise ValueError(
                    f"got both {chosen[0]} and data.{split} (data.{split} files go with "
                    f"data.train; {chosen[0]} has its own {split} split)"
                )
        if self.bundled == "multi30k" and {self.src_lang, self.tgt_lang} != {"de", "en"}:
            raise ValueError(
                f"multi30k has languages de and en, got src_lang={self.src_lang!r} "
                f"tgt_lang={self.tgt_lang!r}"
            )
        return self

    @property
    def direction(self) -> str:
        """What the run translates, for people: ``de → en``, or ``toy copy task`` for a toy
        task (whose ``src_lang``/``tgt_lang`` are left at their defaults and mean nothing)."""
        if self.toy is not None:
            return f"toy {self.toy.task} task"
        return f"{self.src_lang} → {self.tgt_lang}"


class TokenizerConfig(_Section):
    """Subword (sentencepiece) or word-level tokenization, trained on the training split.

    ``joint: true`` trains one model on source + target text; ``false`` one per side.
    ``character_coverage`` is the share of the text's characters that get a piece of
    their own (the rarest others read as ``<unk>``); sentencepiece accepts 0.98 to 1
    (:data:`MIN_CHARACTER_COVERAGE`), the range its authors suggest for alphabetic and
    CJK text alike (0.9995 for Chinese or Japanese).
    It trains on at most ``sample_sentences`` training pairs, drawn uniformly at
    random (seeded by ``train.seed``) in one pass over the corpus; on all of them,
    in order, when the corpus is smaller.
    ``normalization`` is the rule sentencepiece rewrites text with before it learns
    or encodes, so also the form translations come out in: ``nmt_nfkc`` (its
    default: Unicode NFKC plus whitespace clean-up) turns ``…`` into ``...``, ``½``
    into ``1⁄2`` and full-width ``，！？`` into ``,!?``, which costs BLEU against
    references that keep them (Chinese, Japanese); ``identity`` keeps the text as it
    is; ``nfkc`` is NFKC alone; ``*_cf`` also case-folds (lower-cases) it.
    """

    kind: Literal["sentencepiece", "word"] = "sentencepiece"
    vocab_size: int = Field(8000, ge=8)
    joint: bool = True
    model_type: Literal["unigram", "bpe"] = "unigram"
    character_coverage: float = Field(1.0, ge=MIN_CHARACTER_COVERAGE, le=1)
    sample_sentences: int = Field(1_000_000, gt=0)
    normalization: Literal["nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf", "identity"] = "nmt_nfkc"

    def unused_keys(self) -> list[str]:
        """The sentencepiece settings (``model_type``, ``character_coverage``,
        ``normalization``) this section sets off their defaults (in the file or an
        override) with ``kind: word``, which splits at whitespace and reads none."""
        if self.kind != "word":
            return []
        fields = type(self).model_fields
        return [
            k
            for k in ("model_type", "character_coverage", "normalization")
            if k in self.model_fields_set and getattr(self, k) != fields[k].default
        ]
