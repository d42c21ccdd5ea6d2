"""``train.max_steps: auto``: a step budget sized to the time cap, chosen when warm-up ends.

A linear schedule (:mod:`.schedule`) must know its last step ``T`` before
the rate starts to fall, but how many steps fit in ``train.max_minutes``
depends on the machine: the same preset takes 2,900 steps in an hour in
float32 and twice as many in bfloat16 on a CPU with AMX. With
``max_steps: auto`` the loop times the warm-up (from step
``warmup_steps // 10``, past the first steps' allocations, or from where a
resumed run began) and the validations in it, and at step
``warmup_steps - 1`` fixes

    T = t + floor((FILL * max_minutes * 60 - elapsed - v) / (s + v / valid_every))

where ``t`` is the current step, ``s`` the seconds a training step took,
``v`` the seconds a validation took (0 while none has run) and
``valid_every`` the steps between validations (an epoch's batches when it
is not set); the trailing ``- v`` leaves room for the validation at the end.
``FILL = 0.95`` keeps a margin for a machine that gets busier later: the
time cap still ends such a run, and training says so (:mod:`.stopping`).
The warm-up rate does not depend on ``T``, so deciding at its end changes
nothing already trained. The chosen ``T`` is saved in every checkpoint
(``Progress.step_budget``), so a resumed run keeps it and repeats exactly.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from ..config import TrainConfig
from .progress import Progress

__all__ = ["FILL", "StepBudget", "fit_steps", "resolved"]

FILL = 0.95


def fit_steps(
    step: int,
    elapsed_s: float,
    budget_s: float,
    step_s: float,
    valid_s: float,
    valid_every: int,
) -> int:
    """The last step ``T`` that ends training within ``budget_s`` (module docstring).

    Never less than ``step + 1``: a run whose time is already spent takes one
    more step and stops, with its learning rate at the floor.
    """
    per_step = step_s + valid_s / max(valid_every, 1)
    left = budget_s - elapsed_s - valid_s
    return step + max(1, math.floor(left / per_step))


def resolved(config: TrainConfig, progress: Progress) -> TrainConfig:
    """``config`` with ``max_steps: auto`` replaced by the budget ``progress`` records.

    Until the budget is chosen (or for a number or None) ``config`` is returned as is.
    """
    if config.max_steps != "auto" or not progress.step_budget:
        return config
    return config.model_copy(update={"max_steps": progress.step_budget})


@dataclass
class _Window:
    step: int
    at: float
    valid_s: float = 0.0  # validation time inside the window
    validations: int = 0


class StepBudget:
    """Times the warm-up of a ``max_steps: auto`` run and chooses its step budget.

    Call :meth:`stepped` after every optimizer step, :meth:`validated` with
    each validation's duration, and :meth:`due` to learn whether to call
    :meth:`choose` now.

    Args:
        config: the run's training settings (``max_steps``, ``max_minutes``,
            ``warmup_steps``, ``valid_every``).
    """

    def __init__(self, config: TrainConfig) -> None:
        self.auto = config.max_steps == "auto"
        self.config = config
        self.start = max(1, config.warmup_steps // 10)
        self.window: _Window | None = None

    def begin(self, step: int) -> None:
        """Training starts (or resumes) after ``step`` steps."""
        self.window = None
        self.stepped(step)

    def stepped(self, step: int) -> None:
        if self.auto and self.window is None and step >= self.start:
            self.window = _Window(step, time.monotonic())

    def validated(self, seconds: float) -> None:
        if self.window is not None:
            self.window.valid_s += seconds
            self.window.validations += 1

    def due(self, p: Progress) -> bool:
        """Whether to choose the budget now: an auto run's step before its rate may fall.

        The rate of step ``warmup_steps + 1`` is the first that needs ``T``; the
        scheduler computes it after step ``warmup_steps``.
        """
        w = self.window
        ready = w is not None and p.step > w.step
        return self.auto and ready and not p.step_budget and p.step >= self.config.warmup_steps - 1

    def choose(self, p: Progress, elapsed_s: float, epoch_steps: int) -> tuple[int, str]:
        """The step budget and the line that explains it, from the window timed so far."""
        w, cfg = self.window, self.config
        seconds = time.monotonic() - w.at
        valid_s = w.valid_s / w.validations if w.validations else 0.0
        step_s = (seconds - w.valid_s) / (p.step - w.step)
        every = cfg.valid_every or epoch_steps
        budget_s = FILL * cfg.max_minutes * 60
        steps = fit_steps(p.step, elapsed_s, budget_s, step_s, valid_s, every)
        valid = f", {valid_s:.0f} s a validation every {every} steps" if w.validations else ""
        return steps, (
            f"train.max_steps auto: {steps} steps ({step_s:.3f} s a step over steps "
            f"{w.step}-{p.step}{valid}; {FILL:.0%} of max_minutes={cfg.max_minutes:g})"
        )
