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
``FILL = 0.95`` keeps a margin. The warm-up rate does not depend on ``T``,
so deciding at its end changes nothing already trained.

Steps may slow down later (a machine that gets busier; on one Xeon the
Transformer preset's steps took 0.46 s in its warm-up and 0.52 s after it),
and a time cap that ends training early leaves the rate above its floor. So
at every validation after the choice, the steps and validations timed since
project when ``T`` would be reached; where that is past ``max_minutes``,
``T`` is lowered to fill ``FILL`` of it again (never raised: the rate would
climb back). The line is redrawn from the warm-up's end
to the new ``T``, a small step down in the rate. The budget is saved in every
checkpoint (``Progress.step_budget``): a resumed run keeps it and repeats
exactly up to its next revision.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from ..config import TrainConfig
from .progress import Progress

__all__ = ["FILL", "StepBudget", "fit_steps", "step_limit"]

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


def step_limit(config: TrainConfig, progress: Progress) -> int | None:
    """The step budget in force: ``max_steps``, or for ``auto`` the one ``progress``
    records (None until it is chosen, as for no ``max_steps``)."""
    if config.max_steps == "auto":
        return progress.step_budget or None
    return config.max_steps


@dataclass
class _Window:
    step: int
    at: float
    valid_s: float = 0.0  # validation time inside the window
    validations: int = 0


class StepBudget:
    """Times the warm-up of a ``max_steps: auto`` run and chooses its step budget.

    Call :meth:`begin` where training starts or resumes, :meth:`stepped` after
    every optimizer step, :meth:`validated` with each validation's duration,
    :meth:`due` to learn whether to call :meth:`choose` now, and
    :meth:`revise` after each validation.

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
        steps, step_s, valid_s, every = self._fit(p, elapsed_s, epoch_steps)
        self.window = _Window(p.step, time.monotonic())  # what revise() times
        valid = f", {valid_s:.0f} s a validation every {every} steps" if w.validations else ""
        return steps, (
            f"train.max_steps auto: {steps} steps ({step_s:.3f} s a step over steps "
            f"{w.step}-{p.step}{valid}; {FILL:.0%} of max_minutes={cfg.max_minutes:g})"
        )

    def revise(self, p: Progress, elapsed_s: float, epoch_steps: int) -> tuple[int, str] | None:
        """A lower budget and its line, where the steps timed since the choice (or the
        resume) would reach ``p.step_budget`` after ``max_minutes``; None otherwise."""
        w = self.window
        if not (self.auto and p.step_budget and w is not None and p.step > w.step):
            return None
        steps, step_s, valid_s, every = self._fit(p, elapsed_s, epoch_steps)
        left = p.step_budget - p.step
        ends_s = elapsed_s + left * (step_s + valid_s / max(every, 1)) + valid_s
        if ends_s <= self.config.max_minutes * 60 or steps >= p.step_budget:
            return None
        return steps, (
            f"train.max_steps auto: {steps} steps, down from {p.step_budget} (steps "
            f"{w.step}-{p.step} took {step_s:.3f} s each)"
        )

    def _fit(self, p: Progress, elapsed_s: float, epoch_steps: int):
        """:func:`fit_steps` from the window: (steps, s a step, s a validation, valid_every)."""
        w, cfg = self.window, self.config
        step_s = (time.monotonic() - w.at - w.valid_s) / (p.step - w.step)
        valid_s = w.valid_s / w.validations if w.validations else 0.0
        every = cfg.valid_every or epoch_steps
        budget_s = FILL * cfg.max_minutes * 60
        steps = fit_steps(p.step, elapsed_s, budget_s, step_s, valid_s, every)
        return steps, step_s, valid_s, every
