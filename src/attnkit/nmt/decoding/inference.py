"""Running a model for inference: eval mode and no autograd, its mode restored afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

__all__ = ["inference"]


@contextlib.contextmanager
def inference(model: nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and ``torch.no_grad`` inside the block.

    The model's previous mode (train or eval) is restored on every exit,
    also when the block raises.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)
