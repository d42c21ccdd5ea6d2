"""Running a model for inference: eval mode and no autograd, its modes restored afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

__all__ = ["inference"]


@contextlib.contextmanager
def inference(model: nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and ``torch.no_grad`` inside the block.

    Every submodule's previous mode (train or eval) is restored on every exit,
    also when the block raises: not the top module's mode pushed down to all of
    them, which would put an :class:`~attnkit.nmt.decoding.ensemble.Ensemble`'s
    eval-mode members (the Ensemble itself is built in train mode, as any
    ``nn.Module``) or a submodule a caller had set to eval into train mode.
    """
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for module, training in modes:
            module.training = training
