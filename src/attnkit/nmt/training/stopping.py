"""When training stops: every stop rule, and the one decision they make.

The rules, strongest first:

1. ``train.max_nonfinite`` skipped steps in a row (non-finite loss or
   gradient) raise :class:`~.progress.TrainingError`; the last good checkpoint is kept.
2. Early stopping: ``train.early_stopping`` validations without a new best
   BLEU. It ends the run even when a stop request came first (the validation
   at the end of an epoch can decide it after the request).
3. A stop request (SIGINT/SIGTERM, on any rank): training stops after the
   current step and the run goes on when resumed.
4. The budgets ``train.max_steps`` (with ``auto``, the number chosen when
   warm-up ends: :mod:`.step_budget`) and ``train.max_minutes`` (the whole
   run's training time, earlier sessions included).
5. ``train.epochs`` done, checked where an epoch would begin.

Rules 3 and 4 are agreed by all ranks of a torchrun job in one all-reduce,
so a signal that reached some ranks, or a clock that ran out on one, stops
all of them at the same step.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..config import TrainConfig
from .distributed import Group
from .interrupt import StopRequest
from .messages import resume_command
from .progress import Progress, TrainingError
from .step_budget import step_limit

__all__ = ["StopRules", "cut_short_note", "spent_budget"]


class StopRules:
    """The stop decision of one training run: :meth:`reason_to_stop` and its state.

    Args:
        config: the run's training settings.
        group: the ranks that must agree (a no-op group for one process).
        request: the signal handler that records a stop request.
        clock: the run's training time so far, in seconds.
        last_checkpoint: where the last good checkpoint is, for the error message.

    Attributes:
        reason: why training stops ('' while it goes on); once set it changes
            only to an early stop.
        interrupted: the reason is a stop request: the run is saved to go on.
    """

    def __init__(
        self,
        config: TrainConfig,
        group: Group,
        request: StopRequest,
        clock: Callable[[], float],
        last_checkpoint: Path,
    ) -> None:
        self.config, self.group, self.request, self.clock = config, group, request, clock
        self.last_checkpoint = last_checkpoint
        self.reason, self.interrupted = "", False
        self._closed = False

    def reason_to_stop(self, p: Progress) -> str:
        """Why training must stop now ('' = go on), the same on every rank.

        Every rank calls this at the same points (where an epoch would begin,
        after each step): until a reason is found it takes part in an
        all-reduce.

        Raises:
            TrainingError: ``max_nonfinite`` steps in a row were skipped.
        """
        limit = self.config.max_nonfinite
        if p.nonfinite_streak >= limit:
            raise TrainingError(
                f"{limit} non-finite losses/gradients in a row at step {p.step}: training "
                f"stopped. The last good checkpoint is kept in {self.last_checkpoint}; "
                "check the data, or lower train.lr or set train.clip (keys --resume may not "
                "change: start over with --overwrite, or in another --out with "
                f"train.init_from: {Path(self.last_checkpoint).parent} and "
                "train.init_checkpoint: last to keep what it learnt)"
            )
        early = _early_stop(self.config, p)
        if early:
            self.reason, self.interrupted = early, False
        elif not self.reason:
            self.reason, self.interrupted = self._agreed(p)
            self.reason = self.reason or _epochs_done(self.config, p)
        return self.reason

    def close(self, p: Progress) -> str:
        """The run ends (not interrupted): its final reason; saves record it as finished."""
        self._closed = True
        return self.reason_to_stop(p)

    def record(self, p: Progress) -> None:
        """Write the decision into ``p.stop_reason`` and ``p.finished`` for a checkpoint.

        An interrupted run records no reason (it goes on when resumed); a run is
        finished once closed, or from the validation that stops it early.
        """
        early = _early_stop(self.config, p)
        p.stop_reason = early or ("" if self.interrupted else self.reason)
        p.finished = bool(early) or self._closed

    def _agreed(self, p: Progress) -> tuple[str, bool]:
        """The stop request or budget reason of any rank, and whether it is a request."""
        mine = _budget_spent(self.config, step_limit(self.config, p), p.step, self.clock())
        budget, signalled = self.group.any(bool(mine), bool(self.request.requested))
        if signalled:
            return self.request.requested or "a stop request to another process", True
        if budget and not mine:  # only the clock differs between ranks
            mine = f"max_minutes={self.config.max_minutes} reached"
        return mine, False


def spent_budget(config: TrainConfig, p: Progress) -> list[tuple[str, str]]:
    """Why a finished run may not train on under ``config``: each budget still spent, with
    the setting whose larger value lifts it (``("max_minutes=25 reached",
    "train.max_minutes")``); empty when it may (its budget was raised on resume)."""
    checks = (
        ("train.epochs", _epochs_done(config, p)),
        ("train.max_steps", _steps_spent(step_limit(config, p), p.step)),
        ("train.max_minutes", _time_spent(config, p.elapsed_s)),
        ("train.early_stopping", _early_stop(config, p)),
    )
    return [(reason, key) for key, reason in checks if reason]


def cut_short_note(config: TrainConfig, p: Progress, run_dir: Path) -> str:
    """A plain warning when the time cap, not the step budget, ended a run that has both; or
    when ``train.epochs`` ended a linear schedule before its line reached ``min_lr``, or a
    warm-up schedule before its rate reached ``train.lr``."""
    if warm_up := _epochs_inside_warm_up(config, p, run_dir):
        return warm_up
    limit = step_limit(config, p)
    if limit is None or p.step >= limit:
        return ""
    if p.stop_reason.startswith("max_minutes"):
        return (
            f"note: the time cap (train.max_minutes={config.max_minutes:g}) stopped training at "
            f"step {p.step} of train.max_steps={limit}: this machine was slower or busier than "
            "the config assumes, so the result will fall short of the one recorded for it; "
            f"`{resume_command(run_dir)} --train.max_minutes N` with a larger N "
            "finishes the budget"
        )
    if p.stop_reason.startswith("epochs") and config.lr_schedule == "linear":
        return (
            f"note: train.epochs={config.epochs} ended training at step {p.step} of "
            f"train.max_steps={limit}, before the linear schedule's rate fell to "
            f"train.min_lr={config.min_lr:g}; `{resume_command(run_dir)} --train.epochs "
            "N` with a larger N finishes the budget (or set max_steps to the steps of the epochs)"
        )
    return ""


def _epochs_inside_warm_up(config: TrainConfig, p: Progress, run_dir: Path) -> str:
    if not (
        p.stop_reason.startswith("epochs")
        and config.lr_schedule != "plateau"  # the one schedule without a warm-up
        and p.step < config.warmup_steps
    ):
        return ""
    return (
        f"note: train.epochs={config.epochs} ended training at step {p.step}, inside the "
        f"warm-up (train.warmup_steps={config.warmup_steps}): the rate never reached "
        f"train.lr={config.lr:g}; `{resume_command(run_dir)} --train.epochs N` with a "
        "larger N trains on (or set a warm-up shorter than the epochs)"
    )


def _early_stop(config: TrainConfig, p: Progress) -> str:
    patience = config.early_stopping
    if patience is not None and p.bad_validations >= patience:
        return f"no BLEU gain in {patience} validations"
    return ""


def _budget_spent(config: TrainConfig, limit: int | None, step: int, elapsed_s: float) -> str:
    """Which budget is spent: ``limit`` steps (:func:`.step_budget.step_limit`) or the time."""
    return _steps_spent(limit, step) or _time_spent(config, elapsed_s)


def _steps_spent(limit: int | None, step: int) -> str:
    return f"max_steps={limit} reached" if limit is not None and step >= limit else ""


def _time_spent(config: TrainConfig, elapsed_s: float) -> str:
    if config.max_minutes is not None and elapsed_s >= config.max_minutes * 60:
        return f"max_minutes={config.max_minutes} reached"
    return ""


def _epochs_done(config: TrainConfig, p: Progress) -> str:
    """At an epoch boundary (no batch of the current epoch done), whether all epochs are."""
    if p.epoch_batches_done == 0 and p.epoch >= config.epochs:
        return f"epochs={config.epochs} done"
    return ""
