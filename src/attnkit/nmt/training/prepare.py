"""The data a training run works on: corpora read, tokenizers trained (or loaded), ids encoded."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ...atomic import atomic_write_bytes
from ..config import DataConfig, RunConfig, TrainConfig
from ..data.batching import EpochBatches, Examples, bucket_batches, encode_examples
from ..data.corpus import ParallelCorpus, load_split, stream_split
from ..data.store import StoreCounts, TokenStore, file_identity, fingerprint
from ..data.subword_sampling import SampledSegmentation
from ..data.tokenizer import (
    DEFAULT_NORMALIZATION,
    Tokenizer,
    copy_tokenizers,
    load_tokenizers,
    save_tokenizers,
)
from ..data.training_split import (
    open_training_store,
    sample_pairs,
    train_on_sample,
    train_split_files,
    training_data_settings,
)
from ..runs.run_folder import RunFolder, changes_text
from ..runs.runlock import run_lock
from .distributed import Group
from .init_from import starting_point
from .interrupt import terminate_as_ctrl_c
from .objective import fitting
from .threads import set_threads, threads_restored

__all__ = [
    "EpochOrder",
    "TrainingData",
    "ValidationData",
    "prepare_data",
    "prepare_run",
    "sampled_epoch",
    "validation_data",
]


@dataclass(frozen=True)
class ValidationData:
    """What :func:`.objective.validate` scores a model on, with the run's tokenizers.

    Attributes:
        valid: validation pairs as token ids (no length limit).
        references: the validation targets as text, for BLEU.
        src_tok, tgt_tok: the run's tokenizers.
    """

    valid: Examples
    references: list[str]
    src_tok: Tokenizer
    tgt_tok: Tokenizer


def validation_data(config: RunConfig, src_tok: Tokenizer, tgt_tok: Tokenizer) -> ValidationData:
    """The run's validation split, encoded with its tokenizers.

    Raises:
        ValueError: the split has no sentence pairs (the message names its files).
    """
    return _encoded(_valid_corpus(config), src_tok, tgt_tok)


def _valid_corpus(config: RunConfig) -> ParallelCorpus:
    """The validation split as text; an empty one is an error naming its files."""
    corpus = load_split(config.data, "valid")
    if not len(corpus):
        raise ValueError(
            f"no valid sentence pairs{_where(config.data, 'valid')} "
            f"({corpus.skipped} skipped for an empty side)"
        )
    return corpus


def _encoded(corpus: ParallelCorpus, src_tok: Tokenizer, tgt_tok: Tokenizer) -> ValidationData:
    valid, _ = encode_examples(corpus.src, corpus.tgt, src_tok, tgt_tok)
    return ValidationData(valid, corpus.tgt, src_tok, tgt_tok)


@dataclass(frozen=True)
class TrainingData:
    """The encoded corpora and tokenizers of one run.

    Attributes:
        train: training pairs as token ids, within ``data.max_src_len/max_tgt_len``.
        valid: validation pairs as token ids (no length limit).
        references: the validation targets as text, for BLEU.
        src_tok, tgt_tok: the run's tokenizers.
        counts: the training store's pairs and tokens, and the pairs it left out
            (``dropped`` over the length limits, ``skipped`` with an empty side).
    """

    train: Examples
    valid: Examples
    references: list[str]
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    counts: StoreCounts

    @property
    def validation(self) -> ValidationData:
        """The validation split and tokenizers, as :func:`.objective.validate` scores them."""
        return ValidationData(self.valid, self.references, self.src_tok, self.tgt_tok)

    def summary(self) -> str:
        """The one-line ``data: ...`` report training prints."""
        return (
            f"data: {len(self.train)} training pairs ({self.counts.dropped} longer than the "
            f"length limits dropped, {self.counts.skipped} with an empty side skipped), "
            f"{len(self.valid)} validation pairs; vocabulary {self.src_tok.vocab_size} source / "
            f"{self.tgt_tok.vocab_size} target"
        )


def prepare_data(
    config: RunConfig,
    folder: RunFolder,
    *,
    resuming: bool,
    group: Group,
    echo: Callable[[str], None],
    progress_bar: bool = False,
) -> TrainingData:
    """Get the tokenizers and the training token store, encode the validation split, report.

    The training split is never held in memory: the tokenizer trains on a
    sample (``tokenizer.sample_sentences`` pairs) drawn in one pass over the
    files, and the split is encoded into a memory-mapped token store in
    ``folder`` (:mod:`attnkit.nmt.data.store`), built once and reused while the
    data, the files and the tokenizers stay the same. Rank 0 does both; the
    other ranks then load the tokenizers and map the same store as it is (a
    copy of the corpus on each machine, at the same path but with its own
    modification time, must not make them rebuild the shared store). A new run
    reuses tokenizers that ``attnkit prepare`` made for the same data and
    tokenizer settings, and a new run with ``train.init_from`` copies that run's
    (:mod:`.init_from`); a resumed run, and every other rank, loads them. The
    :meth:`TrainingData.summary` line goes to ``echo``.

    Raises:
        ValueError: a split has no sentence pairs, no training pair is left
            within the length limits, or no validation pair fits a Transformer's
            ``model.max_positions``.
    """
    valid_corpus = _valid_corpus(config)  # an empty split fails before any tokenizer trains
    threads = torch.get_num_threads()
    with group.main_first():  # rank 0 tokenizes once; the others then read what it wrote
        reuse = resuming or not group.is_main
        src_tok, tgt_tok = _tokenizers(config, folder, reuse=reuse, threads=threads, echo=echo)
        store = _mapped_after_rank_0(
            group,
            folder.store,
            lambda: _training_store(config, folder, src_tok, tgt_tok, threads, echo, progress_bar),
        )
    checked = _encoded(valid_corpus, src_tok, tgt_tok)
    train = Examples(store.src, store.tgt, store.links)
    data = TrainingData(train, checked.valid, checked.references, src_tok, tgt_tok, store.counts)
    echo(data.summary())
    if not len(train):
        raise ValueError(_no_pairs_left(config))
    _check_valid_fits_positions(config, checked.valid)
    return data


def _check_valid_fits_positions(config: RunConfig, valid: Examples) -> None:
    """At least one validation pair fits a Transformer's position tables: the validation
    loss leaves out the others (:func:`.objective.validate`), and over no pair it read
    ``valid loss 0.000, ppl 1.00``, a perfect model, at every validation.

    Raises:
        ValueError: every validation pair is too long for ``model.max_positions``.
    """
    positions = getattr(config.model, "max_positions", None)
    if positions is None or not len(valid) or fitting(valid, positions, positions).any():
        return
    raise ValueError(
        f"no validation pair fits model.max_positions ({positions}): each has more than "
        f"{positions - 1} source or target tokens, so the validation loss would cover no "
        "pair; raise model.max_positions, or validate on shorter pairs"
    )


def _no_pairs_left(config: RunConfig) -> str:
    """What to raise when no training pair is left: the length limits that dropped them, and
    a Transformer's ``model.max_positions`` where it lowered them (raising the limits alone
    would change nothing: :meth:`RunConfig._lengths_fit_positions` lowers them again)."""
    data = config.data
    limits = [
        f"data.{key} ({getattr(data, key)})"
        for key in ("max_src_len", "max_tgt_len")
        if getattr(data, key) is not None
    ]
    message = "no training pairs left after filtering"
    if limits:
        message += f"; raise {' and '.join(limits)}"
    positions = getattr(config.model, "max_positions", None)
    if positions is not None and positions - 1 in (data.max_src_len, data.max_tgt_len):
        message += (
            f", and model.max_positions ({positions}), which caps them at "
            f"{positions - 1} (one of its positions is </s> or <s>)"
        )
    return message


def _tokenizers(
    config: RunConfig, folder: RunFolder, *, reuse: bool, threads: int, echo
) -> tuple[Tokenizer, Tokenizer]:
    """The run's tokenizers: loaded from ``folder`` when they are its own, else copied from
    the run ``train.init_from`` names, else trained."""
    if config.train.init_from is not None and not reuse:
        return _parent_tokenizers(config, folder, echo)
    if reuse:  # the run's own: no key to check (its training files may be gone)
        return load_tokenizers(folder.path)
    key = _tokenizer_key(config)
    if _prepared_key(folder) in (key, _tokenizer_key(config, legacy=True)):
        echo(f"using the tokenizers prepared in {folder.path}")
        return load_tokenizers(folder.path)
    pairs = stream_split(config.data, "train")
    sample = sample_pairs(pairs, config.tokenizer.sample_sentences, config.train.seed)
    if not sample.total:
        raise ValueError(
            f"no train sentence pairs{_where(config.data, 'train')} "
            f"({pairs.skipped} skipped for an empty side)"
        )
    # said before it starts: on some machines sentencepiece takes minutes over a large sample
    part = f" (a sample of {sample.total:,})" if len(sample.src) < sample.total else ""
    echo(f"tokenizer: training {config.tokenizer.kind} on {len(sample.src):,} pairs{part}")
    start = time.perf_counter()
    src_tok, tgt_tok = train_on_sample(sample, config.tokenizer, threads)
    echo(f"tokenizer: trained in {time.perf_counter() - start:.1f} s")
    short = {
        side: tok.vocab_size
        for side, tok in (("source", src_tok), ("target", tgt_tok))
        if tok.vocab_size < config.tokenizer.vocab_size
    }
    if short:
        got = " / ".join(f"{n} {side}" for side, n in short.items())
        if len(short) == 2 and len(set(short.values())) == 1:  # one size (joint): said once
            got = str(short["source"])
        echo(
            f"tokenizer: vocabulary of {got} tokens, not tokenizer.vocab_size "
            f"{config.tokenizer.vocab_size}: the training text has no more distinct "
            f"{'pieces' if config.tokenizer.kind == 'sentencepiece' else 'words'}"
        )
    folder.path.mkdir(parents=True, exist_ok=True)
    save_tokenizers(folder.path, src_tok, tgt_tok)
    record = {
        "tokenizer_key": key,
        "sampled": len(sample.src),
        "total": sample.total,
        "config": config.name,  # names the config in the hint to start training here
    }
    atomic_write_bytes(folder.prepared, json.dumps(record, indent=2).encode("utf-8"))
    return src_tok, tgt_tok


def _parent_tokenizers(config: RunConfig, folder: RunFolder, echo) -> tuple[Tokenizer, Tokenizer]:
    """A fine-tuning run's tokenizers: its parent's files, copied into ``folder``
    (:mod:`.init_from`); a ``prepared.json`` left there names other tokenizers and goes."""
    folder.path.mkdir(parents=True, exist_ok=True)
    tokenizers = copy_tokenizers(config.train.init_from, folder.path)
    folder.prepared.unlink(missing_ok=True)
    echo(f"tokenizer: the tokenizers of {config.train.init_from} (train.init_from), copied")
    return tokenizers


def _tokenizer_key(config: RunConfig, *, legacy: bool = False) -> str:
    """What the tokenizers depend on: the data settings their sample is drawn with (no
    length limits, no valid or test files; ``legacy``: the whole data section, as before),
    the tokenizer section, the seed, the files."""
    data = training_data_settings(config.data, lengths=False, legacy=legacy)
    return fingerprint(
        {
            "data": data,
            "tokenizer": _tokenizer_settings(config),
            "seed": config.train.seed,
            "files": [file_identity(path) for path in train_split_files(config.data)],
        }
    )


def _tokenizer_settings(config: RunConfig) -> dict:
    settings = config.tokenizer.model_dump(mode="json")
    if settings["normalization"] == DEFAULT_NORMALIZATION:  # as keyed before it was a setting
        del settings["normalization"]
    return settings


def _prepared_key(folder: RunFolder) -> str | None:
    """The tokenizer key recorded with the tokenizers in ``folder``, if any is readable."""
    return _prepared(folder, "tokenizer_key")


def prepared_config_name(folder: RunFolder) -> str | None:
    """The name of the config ``attnkit prepare`` prepared ``folder`` with, if recorded."""
    return _prepared(folder, "config")


def _prepared(folder: RunFolder, key: str) -> str | None:
    try:
        value = json.loads(folder.prepared.read_text(encoding="utf-8"))[key]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, str) else None


def _training_store(config, folder, src_tok, tgt_tok, threads, echo, progress_bar) -> TokenStore:
    """Open the run's training store, building it (with progress and a rate) when needed."""
    meter = _BuildMeter(echo, progress_bar)
    store = open_training_store(
        config.data,
        folder.store,
        src_tok,
        tgt_tok,
        threads=threads,
        echo=echo,
        progress=meter.update,
        alignments=guided.file if (guided := config.train.guided_alignment) else None,
        words=guided.words if guided else "whitespace",
    )
    meter.close(store)
    return store


def _mapped_after_rank_0(group: Group, store: Path, build: Callable[[], TokenStore]) -> TokenStore:
    """Rank 0 builds the store at ``store`` (or finds it current); inside ``main_first`` the
    other ranks then map it as it is, never checking it against their own view of the corpus
    files (a copy on each machine has its own modification time)."""
    return build() if group.is_main else TokenStore.open(store)


class _BuildMeter:
    """Progress of a store build: a bar on a terminal (when ``bar``), else a line every
    30 s (a bar's carriage returns would make one endless line of a log); then the rate."""

    EVERY_S = 30.0

    def __init__(self, echo: Callable[[str], None], bar: bool) -> None:
        self.echo, self.bar_wanted = echo, bar and sys.stderr.isatty()
        self.bar = None
        self.start = self.last = time.monotonic()
        self.read = 0

    def update(self, read: int) -> None:
        if self.bar is None and self.bar_wanted:
            self.bar = tqdm(desc="token store", unit=" pairs", file=sys.stderr, leave=False)
        if self.bar is not None:
            self.bar.update(read - self.read)
        elif time.monotonic() - self.last >= self.EVERY_S:
            self.last = time.monotonic()
            self.echo(f"token store: {read:,} pairs read ({self._rate(read):,.0f} pairs/s)")
        self.read = read

    def close(self, store: TokenStore) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.read:  # built now, not reused
            size = sum(p.stat().st_size for p in store.folder.iterdir()) / 2**20
            self.echo(
                f"token store: {self.read:,} pairs read and encoded in "
                f"{time.monotonic() - self.start:.1f} s ({self._rate(self.read):,.0f} pairs/s); "
                f"{store.counts.pairs:,} kept, {size:,.1f} MB in {store.folder}"
            )

    def _rate(self, read: int) -> float:
        return read / max(time.monotonic() - self.start, 1e-9)


def prepare_run(
    config: RunConfig,
    folder: RunFolder,
    *,
    progress_bar: bool = True,
    echo: Callable[[str], None] = print,
) -> TrainingData:
    """``attnkit prepare``: the tokenizers and the training token store in ``folder``, no training.

    Useful before a long or distributed job: ``attnkit train`` with the same
    config and folder then starts from what is there. In a folder that holds a
    run already, its own tokenizers are kept and only a missing or stale store
    is rebuilt; ``config`` may then differ from the run's only where ``--resume``
    allows it. A new run with ``train.init_from`` checks that run first and
    copies its tokenizers (:mod:`.init_from`). Holds the folder's lock
    (:mod:`attnkit.nmt.runs.runlock`) meanwhile.
    Uses ``train.threads`` threads (torch's setting, :func:`~.threads.set_threads`),
    as training does: the encoding workers, and sentencepiece, whose model
    depends on its thread count, so ``prepare`` then ``train`` equals ``train``;
    torch's thread count is the caller's again when it returns.

    Raises:
        RunInUse: a training holds the folder.
        ValueError: ``folder`` holds a run trained with another config (the
            message lists the keys); nothing in it is changed.
        ValueError, FileNotFoundError: as :func:`prepare_data`, and as
            :func:`.init_from.load_parent` for a run's ``train.init_from``.
        WriteError: the folder or a file in it cannot be written (it is named).
    """
    with (
        terminate_as_ctrl_c(),  # SIGTERM stops at once, as Ctrl-C does
        threads_restored(),
        run_lock(folder.path, warn=echo, work="attnkit prepare"),
    ):  # the lock makes the folder
        resuming = folder.has_run()
        config, _ = starting_point(config, folder, new_run=not resuming, echo=echo)
        if resuming and (fixed := folder.fixed_changes(config)):
            raise ValueError(
                f"{folder.path} holds a run trained with another config ({changes_text(fixed)}); "
                "prepare into another --out folder, or start that run over with attnkit train "
                "--overwrite"
            )
        set_threads(config.train.threads)
        return prepare_data(
            config,
            folder,
            resuming=resuming,
            group=Group(),
            echo=echo,
            progress_bar=progress_bar,
        )


def sampled_epoch(
    config: RunConfig,
    folder: RunFolder,
    data: TrainingData,
    epoch: int,
    group: Group,
    echo: Callable[[str], None],
) -> Examples:
    """The training pairs of ``epoch`` in a newly sampled segmentation (``train.subword_sampling``).

    They are encoded into their own token store (``RUN/store/sampled``), which
    replaces the previous epoch's, with the run's tokenizers and length limits;
    a pair whose sampled segmentation is over the limits is left out of this epoch.
    The store stays until the next epoch replaces it, so a run resumed
    mid-epoch trains on the pairs it left (:mod:`attnkit.nmt.data.subword_sampling`).
    Rank 0 encodes; the other ranks map what it wrote. One line to ``echo``
    says how long that took (or that the epoch's sample was kept) and how many
    pairs and tokens the epoch has.
    """
    sampling = SampledSegmentation.for_epoch(config.train.subword_sampling, epoch)
    start, read = time.perf_counter(), []
    with group.main_first():
        store = _mapped_after_rank_0(
            group,
            folder.sampled_store,
            lambda: open_training_store(
                config.data,
                folder.sampled_store,
                data.src_tok,
                data.tgt_tok,
                threads=torch.get_num_threads(),
                progress=read.append,  # called only while a new sample is encoded
                sampling=sampling,
            ),
        )
    counts = store.counts
    how = f"in {time.perf_counter() - start:.1f} s" if read else f"kept in {folder.sampled_store}"
    over = f", {counts.dropped} over the length limits left out" if counts.dropped else ""
    echo(
        f"epoch {epoch}: sampled segmentation {how}, {counts.pairs:,} pairs, "
        f"{counts.src_tokens:,} source / {counts.tgt_tokens:,} target tokens{over}"
    )
    return Examples(store.src, store.tgt)


class EpochOrder:
    """The batches of each epoch, in an order drawn from a generator seeded with ``seed``.

    :attr:`state` is the generator's state at the start of the current epoch
    (a uint8 tensor, saved in checkpoints): the same state gives the same
    batches, so a run resumed mid-epoch skips exactly the batches it trained.
    """

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)
        self.state = self.generator.get_state()

    def batches(self, examples: Examples, config: TrainConfig) -> EpochBatches:
        """The current epoch's batches (arrays of example indices), by :func:`bucket_batches`."""
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
