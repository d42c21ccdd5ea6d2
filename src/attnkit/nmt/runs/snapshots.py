"""Snapshots: the model weights of a run's last validations, kept for checkpoint averaging.

With ``train.average_last N`` the training loop keeps, at every validation,
the model weights alone (no optimizer, no RNG state) as a checkpoint of
:mod:`.checkpoint` in ``RUN/snapshots/``: ``step-00000020.json`` and its
safetensors file, one per validation step, the newest N kept. Each record's
state is ``{"epoch", "step", "valid_loss", "valid_ppl", "valid_bleu"}``.
:mod:`.averaging` turns them into the ``averaged`` checkpoint.

A resumed run drops the snapshots of steps after the checkpoint it resumes
from (as it drops those steps' ``metrics.jsonl`` rows) and redoes them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor

from .checkpoint import Checkpoint, delete_checkpoint, load_checkpoint, record_path, save_checkpoint

__all__ = ["Snapshots"]

_NAME = re.compile(r"step-(\d+)")


@dataclass(frozen=True)
class Snapshots:
    """The snapshots in ``folder`` (``RUN/snapshots``), by training step.

    Attributes:
        folder: where they are (created by the first :meth:`add`).
    """

    folder: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "folder", Path(self.folder))

    @staticmethod
    def name(step: int) -> str:
        """The checkpoint name of the snapshot of ``step``: ``step-00000020``."""
        return f"step-{step:08d}"

    def path(self, step: int) -> Path:
        """The record of the snapshot of ``step``: ``folder/step-00000020.json``."""
        return record_path(self.folder, self.name(step))

    def steps(self) -> list[int]:
        """The steps of the snapshots there, oldest first (``[]`` without a folder)."""
        if not self.folder.is_dir():
            return []
        found = (_NAME.fullmatch(path.stem) for path in self.folder.glob("step-*.json"))
        return sorted(int(match.group(1)) for match in found if match)

    def add(self, step: int, model_state: dict[str, Tensor], state: dict[str, Any]) -> Path:
        """Save ``model_state`` as the snapshot of ``step`` (atomically); returns its record.

        ``state`` (epoch, scores) is stored with ``step`` added.

        Raises:
            WriteError: it could not be written (the message names the file).
        """
        return save_checkpoint(self.folder, self.name(step), model_state, {**state, "step": step})

    def keep_last(self, count: int) -> list[int]:
        """Delete all but the newest ``count`` snapshots; returns the steps deleted."""
        steps = self.steps()
        old = steps[: max(len(steps) - count, 0)]
        for step in old:
            delete_checkpoint(self.folder, self.name(step))
        return old

    def drop_after(self, step: int) -> list[int]:
        """Delete the snapshots of steps after ``step`` (a resumed run redoes them)."""
        later = [s for s in self.steps() if s > step]
        for s in later:
            delete_checkpoint(self.folder, self.name(s))
        return later

    def load_last(self, count: int | None = None) -> list[Checkpoint]:
        """The newest ``count`` snapshots (default: all), loaded, oldest first.

        Raises:
            ValueError: ``count`` < 1 or more than the snapshots there (the message
                says how many there are), or a snapshot is damaged (it is named).
            FileNotFoundError: a snapshot's weights file is missing.
        """
        steps = self.steps()
        count = len(steps) if count is None else count
        if count < 1 or count > len(steps):
            raise ValueError(
                f"cannot average the last {count} snapshots: {self.folder} holds "
                f"{len(steps)} (steps {', '.join(map(str, steps)) or 'none'})"
            )
        return [load_checkpoint(self.path(step)) for step in steps[-count:]]
