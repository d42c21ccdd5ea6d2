"""Loading a run folder back: its config, tokenizers and a checkpoint, as a model ready to use.

A run folder (written by :func:`attnkit.nmt.training.loop.train`) holds
``config.yaml``, the tokenizer files and the ``best``/``last`` checkpoints.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import RunConfig
from ..data.tokenizer import Tokenizer, load_tokenizers
from ..device import resolve_device
from ..models.registry import translator_for_weights, weights_misfit
from ..models.translator import Translator
from ..precision import Precision, resolve_precision
from .checkpoint import load_checkpoint
from .run_folder import AUTO, AVERAGED, CHECKPOINTS, RunFolder

__all__ = ["LoadedRun", "load_run"]

_CHECKPOINTS = (AUTO, *CHECKPOINTS)  # the names load_run takes


@dataclass
class LoadedRun:
    """A trained model with its config and tokenizers, ready to translate.

    ``precision`` is the arithmetic to decode in: enter ``precision.autocast()``
    around the work, in the thread that does it (the weights stay float32).
    """

    folder: Path
    config: RunConfig
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    model: Translator
    device: torch.device
    precision: Precision


def load_run(
    folder: str | Path,
    *,
    checkpoint: str = "auto",
    device: str = "cpu",
    precision: str = "fp32",
    option: str = "precision",
) -> LoadedRun:
    """Load ``folder/config.yaml``, its tokenizers and the named checkpoint (``best``,
    ``last``, ``averaged``: the mean of the last snapshots, ``train.average_last``, or
    ``auto``, the default as on the command line: the one chosen on the whole
    validation set when training ended,
    :meth:`~attnkit.nmt.runs.run_folder.RunFolder.resolve_checkpoint`).

    The checkpoint is float32 whatever precision the run trained in; ``precision``
    (``auto``, ``fp32``, ``bf16``: :func:`attnkit.nmt.precision.resolve_precision`,
    ``option`` naming it in messages; fp32 by default, where the command line's
    default is ``auto``, so that a script's output does not depend on the CPU) is
    the one it will decode in:
    :func:`~attnkit.nmt.decoding.translate.translate_lines` applies it; code that
    calls the model or the search itself enters ``run.precision.autocast()``.
    Loading draws nothing from torch's global RNG.

    Raises:
        FileNotFoundError: ``folder`` is not a run folder or lacks the checkpoint.
        ValueError: a file in it is invalid (the message names it), the checkpoint's
            weights do not fit the model its config describes (the tensors are named;
            checked before the model is built, so a config asking for a huge model is
            refused, not allocated), ``checkpoint``
            is none of those names, ``device`` is unknown or not on this machine
            (:func:`.device.resolve_device`), or ``precision`` is unknown or
            impossible on it.
    """
    if checkpoint not in _CHECKPOINTS:
        raise ValueError(f"checkpoint must be one of {', '.join(_CHECKPOINTS)}, got {checkpoint!r}")
    run = RunFolder(Path(folder))
    where = resolve_device(device, "device")  # before any loading: a bad name fails fast
    arithmetic = resolve_precision(precision, where, option=option)
    if not run.config.is_file():
        raise FileNotFoundError(f"{run.config} not found; is {run.path} a training run folder?")
    config = RunConfig.load(run.config)
    src_tok, tgt_tok = load_tokenizers(run.path)
    path = _checkpoint_path(run, run.resolve_checkpoint(checkpoint))
    ckpt = load_checkpoint(path)
    vocab = (src_tok.vocab_size, tgt_tok.vocab_size)
    if differ := weights_misfit(config.model, *vocab, ckpt.model):  # before any allocation
        raise ValueError(
            f"{path} does not fit the model in {run.config} and the vocabularies of its "
            f"tokenizers ({vocab[0]} source / {vocab[1]} target tokens): {'; '.join(differ[:3])}"
        )
    model = translator_for_weights(config.model, *vocab)
    model.load_state_dict(ckpt.model)
    model.to(where).eval()
    return LoadedRun(run.path, config, src_tok, tgt_tok, model, where, arithmetic)


def _checkpoint_path(run: RunFolder, checkpoint: str) -> Path:
    """``RUN/CHECKPOINT.json``; a missing one is an error that says what else is there."""
    path = run.checkpoint(checkpoint)
    if path.is_file():
        return path
    if checkpoint == AVERAGED:
        raise FileNotFoundError(_no_averaged(run, path))
    other = "last" if checkpoint == "best" else "best"
    if run.checkpoint(other).is_file():
        hint = f"{run.checkpoint(other)} exists: use checkpoint {other!r} (--checkpoint {other})"
    else:
        hint = f"there is no {other}.json either (training stopped before its first save)"
    when = "the first validation" if checkpoint == "best" else "the first checkpoint"
    raise FileNotFoundError(
        f"checkpoint not found: {path} (written at {when}); {hint}; "
        f"or resume training: attnkit train --resume {shlex.quote(str(run.path))}"
    )


def _no_averaged(run: RunFolder, path: Path) -> str:
    """Why ``RUN/averaged.json`` is missing, and the command that makes it."""
    kept, average = len(run.snapshots.steps()), f"attnkit average {shlex.quote(str(run.path))}"
    if kept >= 2:
        how = f"{run.path} keeps {kept} snapshots: make it with '{average}'"
    else:
        how = (
            f"it needs snapshots of 2 or more validations and {run.path} keeps {kept}: train "
            "with --train.average_last N (N >= 2; also on --resume), whose end writes it, "
            f"or run '{average}' once snapshots are kept"
        )
    return f"checkpoint not found: {path} (the mean of the last snapshots); {how}"
