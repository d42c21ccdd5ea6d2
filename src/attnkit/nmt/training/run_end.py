"""The end of a training run: the ``averaged`` checkpoint, then the choice of checkpoint.

Rank 0 writes both once the last step is saved (:func:`finish_run`), or, when a
finished run is reused and its end was cut short (killed, Ctrl-C, a full disk
while averaging or choosing), the next ``--resume`` writes them
(:func:`finish_cut_short`), as the uninterrupted end would have. Ctrl-C here
stops at once: the steps are saved, and resuming finishes the run.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..config import RunConfig
from ..data.tokenizer import load_tokenizers
from ..precision import Precision
from ..runs.run_folder import RunFolder
from .averaged import write_averaged
from .checkpoint_choice import choose_checkpoint
from .messages import resume_command
from .prepare import ValidationData, validation_data

__all__ = ["finish_cut_short", "finish_run"]


def finish_run(
    folder: RunFolder,
    config: RunConfig,
    data: ValidationData,
    device: torch.device,
    precision: Precision,
    echo: Callable[[str], None],
) -> None:
    """The ``averaged`` checkpoint (``train.average_last``), then the choice of
    ``--checkpoint auto`` (:mod:`.checkpoint_choice`), scored on ``data``; a line each.

    Raises:
        KeyboardInterrupt: Ctrl-C, after a line saying how to finish the run.
    """
    try:
        _average_and_choose(folder, config, data, device, precision, echo)
    except KeyboardInterrupt:
        echo(
            "interrupted after the last step, which is saved; finish the run (its averaged "
            f"checkpoint and choice of checkpoint) with: {resume_command(folder.path)}"
        )
        raise


def finish_cut_short(
    folder: RunFolder,
    config: RunConfig,
    device: torch.device,
    precision: Precision,
    echo: Callable[[str], None],
) -> None:
    """:func:`finish_run` for a finished run that has no ``choice.json``, on its validation
    split encoded with its saved tokenizers."""
    echo(f"{folder.choice} not found: the end of training was cut short; finishing it")
    data = validation_data(config, *load_tokenizers(folder.path))
    finish_run(folder, config, data, device, precision, echo)


def _average_and_choose(folder, config, data, device, precision, echo) -> None:
    where = {"device": device, "precision": precision}
    count = config.train.average_last
    kept = len(folder.snapshots.steps())
    if count and min(count, kept) < 2:
        echo(
            f"train.average_last {count}: {kept} snapshot(s) kept; averaging needs 2 or "
            "more, so no averaged checkpoint was written"
        )
    elif count:
        count = min(count, kept)
        echo(write_averaged(folder, config, data, count=count, **where).line())
    echo(choose_checkpoint(folder, config, data, **where).line())
