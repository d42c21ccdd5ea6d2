"""Fine-tuning: a new run whose model starts from a trained run's checkpoint (``train.init_from``).

Domain adaptation by continued training (Luong & Manning 2015, "Stanford
Neural Machine Translation Systems for Spoken Language Domains", sec. 3:
a model trained on general text, trained on in-domain text), as Joey NMT's
``load_model`` with ``reset_best_ckpt``/``reset_scheduler``/``reset_optimizer``,
fairseq's ``--finetune-from-model`` and OpenNMT-py's ``-train_from`` with
``-reset_optim all`` offer it. The new run's model weights are those of the
parent's checkpoint (``train.init_checkpoint``, ``auto`` resolved as
:func:`attnkit.nmt.runs.loaded_run.load_run` resolves it), checked against its
SHA-256; everything else starts fresh: the optimizer, the learning-rate
schedule (warm-up again), the step and epoch counters, the best BLEU, early
stopping and the snapshots. The run takes the parent's tokenizers (copied into
its folder, so it stands alone; :func:`.prepare.prepare_data`) and records the
parent's ``tokenizer`` section in its config; its ``model`` section must be the
parent's but for :data:`FREE_MODEL_KEYS`, which shape no weight. The checkpoint
taken is named, with its checksum, in ``RUN/init_from.json``.

Every rank of a ``torchrun`` job loads the same checkpoint before the model is
wrapped for DDP. A resumed fine-tuning run continues from its own ``last``
checkpoint and never reads the parent again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from pydantic import ValidationError
from torch import Tensor

from ...atomic import atomic_write_bytes
from ..config import RunConfig, config_changes
from ..data.tokenizer import load_tokenizers
from ..models.registry import weights_misfit
from ..runs.checkpoint import load_checkpoint
from ..runs.run_folder import RunFolder, checkpoint_step

__all__ = [
    "FREE_MODEL_KEYS",
    "Parent",
    "load_parent",
    "load_weights",
    "record_parent",
    "starting_point",
]

# model keys a fine-tuning run may change: regularisation, no weight depends on them
FREE_MODEL_KEYS = ("model.dropout", "model.attention_dropout")
SETTING = "train.init_from"


@dataclass(frozen=True)
class Parent:
    """The trained run a new run's weights start from.

    Attributes:
        folder: the parent's run folder (absolute).
        config: its config.
        checkpoint: the checkpoint taken (``auto`` resolved: ``best``, ``last``, ``averaged``).
        record: that checkpoint's JSON record.
        sha256: the SHA-256 of its weights file, checked when it was loaded.
        step: the step it was saved at (None when its record gives none).
        weights: its model weights (float32).
    """

    folder: Path
    config: RunConfig
    checkpoint: str
    record: Path
    sha256: str
    step: int | None
    weights: dict[str, Tensor]

    def line(self) -> str:
        """``initialised from RUN (checkpoint best, step 1200)``."""
        return f"initialised from {self.folder} (checkpoint {self.checkpoint}, step {self.step})"

    def provenance(self) -> dict:
        """The JSON of ``RUN/init_from.json``."""
        return {
            "run": str(self.folder),
            "checkpoint": self.checkpoint,
            "record": str(self.record),
            "sha256": self.sha256,
            "step": self.step,
        }


def starting_point(
    config: RunConfig, folder: RunFolder, *, new_run: bool, echo: Callable[[str], None]
) -> tuple[RunConfig, Parent | None]:
    """The config to train and, for a new run with ``train.init_from``, its :class:`Parent`.

    A new run's config gets the parent's ``tokenizer`` section (one line to
    ``echo`` when its own differed). A run being resumed (``new_run`` False)
    keeps the ``tokenizer`` section saved in ``folder`` where it was started
    from the same parent, and reads nothing of the parent. Without
    ``init_from`` the config comes back as it is.

    Raises:
        ValueError: ``init_from`` names ``folder`` itself.
        ValueError, FileNotFoundError: as :func:`load_parent`.
    """
    if config.train.init_from is None:
        return config, None
    if not new_run:
        return _own_tokenizer_section(config, folder), None
    if Path(config.train.init_from).resolve() == folder.path.resolve():
        raise ValueError(
            f"{SETTING}: {folder.path} is this run's own folder; a fine-tuning run goes into "
            "another --out folder"
        )
    parent = load_parent(config)
    changes = [c for c in config_changes(parent.config, config) if c[0].startswith("tokenizer.")]
    if changes:
        given = "; ".join(
            f"{key} {json.dumps(b)} given, {json.dumps(a)} there" for key, a, b in changes
        )
        echo(
            f"note: {SETTING}: the run takes the tokenizers of {parent.folder} and records "
            f"their tokenizer section ({given})"
        )
    return _with_tokenizer(config, parent.config, parent.folder), parent


def load_parent(config: RunConfig) -> Parent:
    """The run folder ``config.train.init_from`` names, its checkpoint
    ``config.train.init_checkpoint`` loaded and checked, before any data is read.

    Raises:
        FileNotFoundError: the folder, its ``config.yaml``, its tokenizers or the
            checkpoint is missing (one line naming ``train.init_from``).
        ValueError: its config or checkpoint is damaged, ``config.model`` differs
            from its model in a key outside :data:`FREE_MODEL_KEYS` (the message
            lists each key with both values), or its weights do not fit its model
            and its tokenizers' vocabularies (the tensors are named).
    """
    folder = _parent_folder(Path(config.train.init_from))
    parent_config = _named(lambda: RunConfig.load(folder.config))
    _check_model(parent_config, config, folder.path)
    name = folder.resolve_checkpoint(config.train.init_checkpoint)
    record = _checkpoint_record(folder, name, config.train.init_checkpoint)
    ckpt = _named(lambda: load_checkpoint(record))
    src_tok, tgt_tok = _named(lambda: load_tokenizers(folder.path))
    _check_weights(ckpt.model, config, (src_tok.vocab_size, tgt_tok.vocab_size), record)
    step = checkpoint_step(ckpt.state)
    return Parent(folder.path, parent_config, name, record, ckpt.sha256, step, ckpt.model)


def record_parent(folder: RunFolder, parent: Parent) -> None:
    """Write ``RUN/init_from.json`` (:meth:`Parent.provenance`), atomically."""
    text = json.dumps(parent.provenance(), indent=2) + "\n"
    atomic_write_bytes(folder.init_record, text.encode("utf-8"))


def load_weights(model: torch.nn.Module, parent: Parent) -> None:
    """Copy ``parent``'s weights into ``model`` (a model of the same shapes); they are handed
    over: ``parent.weights`` is empty afterwards, so a run does not hold them twice.

    Raises:
        ValueError: they do not fit (one line naming ``train.init_from``).
    """
    try:
        model.load_state_dict(parent.weights)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[0]
        raise ValueError(f"{SETTING}: {parent.record} does not fit the model: {first}") from None
    parent.weights.clear()


def _parent_folder(path: Path) -> RunFolder:
    """``path`` as a run folder: it exists and holds a ``config.yaml``."""
    if not path.exists():
        raise FileNotFoundError(f"{SETTING}: {path} does not exist; give a trained run folder")
    folder = RunFolder(path.absolute())
    if not path.is_dir() or not folder.config.is_file():
        raise FileNotFoundError(
            f"{SETTING}: {path} is not a run folder (no config.yaml in it); give the folder "
            "'attnkit train' wrote"
        )
    return folder


def _named(load):
    """``load()``, its FileNotFoundError or ValueError made one line naming the setting."""
    try:
        return load()
    except (FileNotFoundError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise type(err)(f"{SETTING}: {first}") from None


def _check_model(parent: RunConfig, config: RunConfig, where: Path) -> None:
    """``config.model`` is ``parent.model`` but for :data:`FREE_MODEL_KEYS`.

    Raises:
        ValueError: naming each other key that differs, with both values (only
            ``model.arch`` when the architectures differ).
    """
    changes = [
        change
        for change in config_changes(parent, config)
        if change[0].startswith("model.") and change[0] not in FREE_MODEL_KEYS
    ]
    if parent.model.arch != config.model.arch:
        changes = [("model.arch", parent.model.arch, config.model.arch)]
    if changes:
        listed = "; ".join(
            f"{key}: {json.dumps(a)} in {where}, {json.dumps(b)} given" for key, a, b in changes
        )
        raise ValueError(
            f"{SETTING}: the model section must be that of {where} (only "
            f"{', '.join(FREE_MODEL_KEYS)} may differ): {listed}"
        )


def _checkpoint_record(folder: RunFolder, name: str, asked: str) -> Path:
    """``RUN/NAME.json``; a missing one is one line naming the checkpoints there are."""
    record = folder.checkpoint(name)
    if record.is_file():
        return record
    there = [n for n in ("best", "last", "averaged") if folder.checkpoint(n).is_file()]
    have = f"it has {', '.join(there)}" if there else "it has no checkpoint (not trained yet?)"
    chosen = f" (train.init_checkpoint {asked})" if asked != name else ""
    raise FileNotFoundError(
        f"{SETTING}: checkpoint not found: {record}{chosen}; {have}: set train.init_checkpoint"
    )


def _check_weights(
    weights: dict[str, Tensor], config: RunConfig, vocab: tuple[int, int], record: Path
) -> None:
    """``weights`` have the tensors, of the shapes, that ``config.model`` over the
    ``vocab`` (source, target) sizes has (:func:`~..models.registry.weights_misfit`).

    Raises:
        ValueError: naming up to three tensors that differ, and the vocabulary sizes.
    """
    differ = weights_misfit(config.model, *vocab, weights)
    if differ:
        raise ValueError(
            f"{SETTING}: {record}'s weights do not fit the model and the vocabularies of its "
            f"run's tokenizers ({vocab[0]} source / {vocab[1]} target tokens): "
            f"{'; '.join(differ[:3])}"
        )


def _with_tokenizer(config: RunConfig, source: RunConfig, where: Path | str) -> RunConfig:
    """``config`` with ``source``'s tokenizer section, validated again.

    Raises:
        ValueError: the section does not go with the rest of ``config`` (e.g.
            ``train.subword_sampling`` with a word tokenizer).
    """
    raw = {**config.model_dump(mode="json"), "tokenizer": source.tokenizer.model_dump(mode="json")}
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as err:
        why = err.errors()[0]["msg"].removeprefix("Value error, ")
        raise ValueError(
            f"{SETTING}: the run takes the tokenizers of {where}, whose tokenizer section "
            f"does not go with this config: {why}"
        ) from None


def _own_tokenizer_section(config: RunConfig, folder: RunFolder) -> RunConfig:
    """A resumed run's config with the tokenizer section it was started with, where it was
    started from the same ``init_from`` (else as it is: resuming then names the change)."""
    try:
        saved = RunConfig.load(folder.config)
    except (OSError, ValueError):
        return config
    if saved.train.init_from != config.train.init_from:
        return config
    return _with_tokenizer(config, saved, folder.path)
