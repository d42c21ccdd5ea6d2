"""Learning-rate schedules: plateau decay, inverse-square-root warm-up, linear decay to a budget.

* ``plateau``: multiply the rate by ``lr_decay`` when validation BLEU has not
  improved for more than ``lr_patience`` validations in a row
  (``ReduceLROnPlateau``: with ``lr_patience: 1``, at the second), down to
  ``min_lr``. Any gain counts as an improvement, as for the ``best`` checkpoint
  and early stopping (:meth:`.progress.Progress.validated`), not only one of
  more than ReduceLROnPlateau's default 0.01% (its ``threshold``).
* ``inverse_sqrt``: Vaswani et al. 2017, eq. 3,
  ``lr_t = d^-0.5 * min(t^-0.5, t * warmup^-1.5)``, written with its peak
  ``lr`` explicit: ``lr_t = lr * min(t / warmup, sqrt(warmup / t))`` at
  optimizer step ``t >= 1``.
* ``linear``: the same warm-up, then a straight line down to ``min_lr`` at
  step ``T = max_steps`` (with ``max_steps: auto``, ``T`` is chosen before
  warm-up ends and given with :meth:`Schedule.set_total`, :mod:`.step_budget`):
  ``lr_t = min_lr + (lr - min_lr) * (T - t) / (T - warmup)`` for ``t > warmup``.
  Under a fixed step budget a rate that reaches its floor exactly when the
  budget ends trains better than one that waits for a plateau (Li, Yumer &
  Ramanan 2020, "Budgeted Training", sec. 4: linear decay to zero).

Both are PyTorch schedulers whose state is saved in each checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..config import TrainConfig

__all__ = ["Schedule", "inverse_sqrt_factor", "linear_decay_factor"]


def inverse_sqrt_factor(step: int, warmup: int) -> float:
    """``min(t / warmup, sqrt(warmup / t))`` for optimizer step ``t = step + 1``."""
    t = step + 1
    return min(t / warmup, math.sqrt(warmup / t))


def linear_decay_factor(step: int, warmup: int, total: int | None, floor: float) -> float:
    """``t / warmup`` up to the peak, then linear from 1 at ``warmup`` to ``floor`` at ``total``.

    From ``total`` on the factor is ``floor``; that covers a ``total`` of
    ``warmup`` itself, which ``max_steps: auto`` chooses when the warm-up took
    the time cap (:func:`.step_budget.fit_steps`: one more step), and which has
    no line to draw.

    Raises:
        RuntimeError: ``total`` is None (not chosen yet) past the warm-up.
    """
    t = step + 1
    if t <= warmup:
        return t / warmup
    if total is None:
        raise RuntimeError(f"linear schedule: step {t} is past warm-up and max_steps is unknown")
    if t >= total:
        return floor
    return max(floor, floor + (1.0 - floor) * (total - t) / (total - warmup))


class Schedule:
    """The learning-rate schedule of one training run.

    Call :meth:`after_step` after every optimizer step and
    :meth:`after_validation` after every validation.

    Args:
        optimizer: the optimizer whose rate is scheduled (its ``lr`` is the peak).
        config: ``lr_schedule``, ``warmup_steps``, ``max_steps``, ``lr_decay``,
            ``lr_patience``, ``min_lr``.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, config: TrainConfig) -> None:
        self.per_step = config.lr_schedule != "plateau"
        self.total = config.max_steps if isinstance(config.max_steps, int) else None
        if self.per_step:
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(
                optimizer, self._per_step_factor(config, optimizer.param_groups[0]["lr"])
            )
        else:
            self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer,
                mode="max",
                factor=config.lr_decay,
                patience=config.lr_patience,
                threshold=0.0,  # a new best BLEU is a gain here as it is for best/early stopping
                min_lr=config.min_lr,
            )

    def set_total(self, total: int) -> None:
        """The linear schedule's last step ``T``, when ``max_steps`` is ``auto``."""
        self.total = total

    def after_step(self) -> None:
        if self.per_step:
            self.scheduler.step()

    def after_validation(self, bleu: float) -> None:
        if not self.per_step:
            self.scheduler.step(bleu)

    def state_dict(self) -> dict:
        return self.scheduler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.scheduler.load_state_dict(state)

    def resync(self) -> None:
        """Set the optimizer's rate to this schedule's at the step it resumes from.

        The rate restored with the optimizer's state is the old config's; after a
        budget raised on resume (``max_steps`` 30 -> 60 of a linear schedule) the
        first step would take it and only the next the new line's. With the same
        config the value is the same (computed as ``LambdaLR`` computes it).
        """
        if not self.per_step:
            return
        s = self.scheduler
        for group, base, factor in zip(
            s.optimizer.param_groups, s.base_lrs, s.lr_lambdas, strict=True
        ):
            group["lr"] = base * factor(s.last_epoch)

    def _per_step_factor(self, config: TrainConfig, peak: float) -> Callable[[int], float]:
        warmup = config.warmup_steps
        if config.lr_schedule == "inverse_sqrt":
            return lambda step: inverse_sqrt_factor(step, warmup)
        floor = min(1.0, config.min_lr / peak)
        return lambda step: linear_decay_factor(step, warmup, self.total, floor)
