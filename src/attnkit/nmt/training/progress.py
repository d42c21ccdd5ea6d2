"""Where a training run stands, as each checkpoint saves it, and the error that ends a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Progress", "TrainSummary", "TrainingError"]


@dataclass
class Progress:
    """Where training stands; saved in each checkpoint for resuming.

    ``finished`` and ``stop_reason`` are the record of the stop decision
    (:class:`~.stopping.StopRules`) at the time of the save: ``finished`` is
    True once nothing is left to train under the run's config.
    """

    epoch: int = 0  # epochs started
    step: int = 0  # optimizer steps taken
    epoch_batches_done: int = 0  # batches of the current epoch already trained
    best_bleu: float = -1.0
    best_step: int = 0
    bad_validations: int = 0
    elapsed_s: float = 0.0
    finished: bool = False
    stop_reason: str = ""
    pending_loss: float = 0.0  # summed training loss since the last validation
    pending_tokens: int = 0  # target tokens behind pending_loss
    pending_alignment: float = 0.0  # the same for the guided-alignment term alone
    nonfinite_streak: int = 0  # skipped steps in a row
    skipped_steps: int = 0  # all steps skipped for a non-finite loss or gradient
    step_budget: int = 0  # the max_steps chosen for train.max_steps auto (0: not chosen)

    def stepped(self, loss: float, tokens: int, alignment: float = 0.0) -> None:
        """Count an optimizer step of mean loss ``loss`` over ``tokens`` target tokens
        (``alignment``: its guided-alignment term, 0 without guidance)."""
        self.step += 1
        self.nonfinite_streak = 0
        self.pending_loss += loss * tokens
        self.pending_alignment += alignment * tokens
        self.pending_tokens += tokens

    def skipped(self) -> None:
        """Count a step skipped for a non-finite loss or gradient."""
        self.nonfinite_streak += 1
        self.skipped_steps += 1

    def validated(self, bleu: float) -> bool:
        """Count a validation of BLEU ``bleu``; True when it is a new best (at this step)."""
        improved = bleu > self.best_bleu
        if improved:
            self.best_bleu, self.best_step, self.bad_validations = bleu, self.step, 0
        else:
            self.bad_validations += 1
        return improved


@dataclass
class TrainSummary:
    """What a call to :func:`~.loop.train` did."""

    run_dir: Path
    progress: Progress
    reused: bool = False
    history: list[dict] = field(default_factory=list)
    interrupted: bool = False
    main: bool = True  # False on the other ranks of a torchrun job (they report nothing)


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss stays non-finite); the last checkpoint is kept."""
