"""Learning-rate schedules: plateau decay (the RNN presets) and inverse-square-root warm-up.

* ``plateau``: multiply the rate by ``lr_decay`` when validation BLEU has not
  improved for ``lr_patience`` validations (``ReduceLROnPlateau``), down to
  ``min_lr``.
* ``inverse_sqrt``: Vaswani et al. 2017, eq. 3,
  ``lr_t = d^-0.5 * min(t^-0.5, t * warmup^-1.5)``, written with its peak
  ``lr`` explicit: ``lr_t = lr * min(t / warmup, sqrt(warmup / t))`` at
  optimizer step ``t >= 1``.

Both are PyTorch schedulers whose state is saved in each checkpoint.
"""

from __future__ import annotations

import math

import torch

from ..config import TrainConfig

__all__ = ["Schedule", "inverse_sqrt_factor"]


def inverse_sqrt_factor(step: int, warmup: int) -> float:
    """``min(t / warmup, sqrt(warmup / t))`` for optimizer step ``t = step + 1``."""
    t = step + 1
    return min(t / warmup, math.sqrt(warmup / t))


class Schedule:
    """The learning-rate schedule of one training run.

    Call :meth:`after_step` after every optimizer step and
    :meth:`after_validation` after every validation.

    Args:
        optimizer: the optimizer whose rate is scheduled (its ``lr`` is the peak).
        config: ``lr_schedule``, ``warmup_steps``, ``lr_decay``, ``lr_patience``, ``min_lr``.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, config: TrainConfig) -> None:
        self.per_step = config.lr_schedule == "inverse_sqrt"
        if self.per_step:
            warmup = config.warmup_steps
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(
                optimizer, lambda step: inverse_sqrt_factor(step, warmup)
            )
        else:
            self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer,
                mode="max",
                factor=config.lr_decay,
                patience=config.lr_patience,
                min_lr=config.min_lr,
            )

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
