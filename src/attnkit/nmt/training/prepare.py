"""The data a training run works on: corpora read, tokenizers trained (or loaded), ids encoded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..config import DataConfig, RunConfig, TrainConfig
from ..data.batching import Examples, bucket_batches, encode_examples
from ..data.corpus import ParallelCorpus, load_split
from ..data.tokenizer import Tokenizer, load_tokenizers, save_tokenizers, train_tokenizers
from ..runs.run_folder import RunFolder
from .distributed import Group

__all__ = ["EpochOrder", "TrainingData", "prepare_data"]


@dataclass(frozen=True)
class TrainingData:
    """The encoded corpora and tokenizers of one run.

    Attributes:
        train: training pairs as token ids, within ``data.max_src_len/max_tgt_len``.
        valid: validation pairs as token ids (no length limit).
        references: the validation targets as text, for BLEU.
        src_tok, tgt_tok: the run's tokenizers.
        dropped: training pairs dropped for the length limits.
        skipped: training pairs skipped for an empty side.
    """

    train: Examples
    valid: Examples
    references: list[str]
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    dropped: int
    skipped: int

    def summary(self) -> str:
        """The one-line ``data: ...`` report training prints."""
        return (
            f"data: {len(self.train)} training pairs ({self.dropped} longer than the length "
            f"limits dropped, {self.skipped} with an empty side skipped), {len(self.valid)} "
            f"validation pairs; vocabulary {self.src_tok.vocab_size} source / "
            f"{self.tgt_tok.vocab_size} target"
        )


def prepare_data(
    config: RunConfig,
    folder: RunFolder,
    *,
    resuming: bool,
    group: Group,
    echo: Callable[[str], None],
) -> TrainingData:
    """Read the train/valid splits, get the tokenizers, encode both splits and report them.

    A new run's tokenizers are trained on the training split by rank 0 and
    saved in ``folder``; a resumed run, and every other rank, loads them from
    there. The :meth:`TrainingData.summary` line goes to ``echo``.

    Raises:
        ValueError: a split has no sentence pairs, or no training pair is left
            within the length limits.
    """
    train_corpus = load_split(config.data, "train")
    valid_corpus = load_split(config.data, "valid")
    for split, corpus in (("train", train_corpus), ("valid", valid_corpus)):
        if not len(corpus):
            raise ValueError(
                f"no {split} sentence pairs{_where(config.data, split)} "
                f"({corpus.skipped} skipped for an empty side)"
            )
    with group.main_first():  # rank 0 trains the tokenizer once; the others then load it
        if resuming or not group.is_main:
            src_tok, tgt_tok = load_tokenizers(folder.path)
        else:
            src_tok, tgt_tok = _train_tokenizers(config, train_corpus)
            save_tokenizers(folder.path, src_tok, tgt_tok)
    train, dropped = encode_examples(
        train_corpus.src,
        train_corpus.tgt,
        src_tok,
        tgt_tok,
        max_src_len=config.data.max_src_len,
        max_tgt_len=config.data.max_tgt_len,
    )
    valid, _ = encode_examples(valid_corpus.src, valid_corpus.tgt, src_tok, tgt_tok)
    data = TrainingData(
        train, valid, valid_corpus.tgt, src_tok, tgt_tok, dropped, train_corpus.skipped
    )
    echo(data.summary())
    if not len(train):
        raise ValueError(
            "no training pairs left after filtering; raise data.max_src_len/max_tgt_len"
        )
    return data


class EpochOrder:
    """The batches of each epoch, in an order drawn from a generator seeded with ``seed``.

    :attr:`state` is the generator's state at the start of the current epoch
    (a uint8 tensor, saved in checkpoints): the same state gives the same
    batches, so a run resumed mid-epoch skips exactly the batches it trained.
    """

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)
        self.state = self.generator.get_state()

    def batches(self, examples: Examples, config: TrainConfig) -> list[list[int]]:
        """The current epoch's batches (lists of example indices), by :func:`bucket_batches`."""
        self.generator.set_state(self.state)
        return bucket_batches(
            examples, config.batch_size, generator=self.generator, pool_batches=config.pool_batches
        )

    def next_epoch(self) -> None:
        """The current epoch is done: the next one draws on from here."""
        self.state = self.generator.get_state()


def _where(data: DataConfig, split: str) -> str:
    """`` in FILES`` for a split read from the user's files; '' for a toy or bundled corpus."""
    files = getattr(data, split) if data.train is not None else None
    return "" if files is None else f" in {files.tsv or f'{files.src} / {files.tgt}'}"


def _train_tokenizers(config: RunConfig, corpus: ParallelCorpus) -> tuple[Tokenizer, Tokenizer]:
    tok = config.tokenizer
    return train_tokenizers(
        corpus.src,
        corpus.tgt,
        kind=tok.kind,
        vocab_size=tok.vocab_size,
        joint=tok.joint,
        model_type=tok.model_type,
        character_coverage=tok.character_coverage,
        threads=torch.get_num_threads(),
    )
