"""Dropout (Srivastava et al. 2014) with a cheaper random mask on the CPU.

``nn.Dropout`` draws one Bernoulli variable per element from PyTorch's
Mersenne Twister; on a CPU that draw costs more than the matrix products
around it once they run in bf16 (a 128 x 20 x 1024 feed-forward activation:
31 ms for ``F.dropout`` against 9 ms with the mask cut from 64-bit words).
:class:`Dropout` draws one 64-bit word per four elements and compares each
16-bit lane with ``p``: the same distribution with ``p`` rounded to a multiple
of 1/65536, from the same seeded generator (so runs and resumes stay exact).
The mask and the scale are applied in one pass forward and one backward.
On other devices, inside ``torch.compile`` (which cannot trace the
in-place draw and fuses its own) and under ``torch.func`` transforms
(``grad``, ``vmap``, ...), it is ``F.dropout``. The attention core uses
it for the attention weights (:mod:`attnkit.attention.functional`), the
translators for their layers.
"""

from __future__ import annotations

import numbers

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .masks import functorch_active

__all__ = ["Dropout", "check_rate", "dropout"]

LANES = 65536  # values of a 16-bit lane


def dropout(x: Tensor, p: float) -> Tensor:
    """Zero each element of ``x`` with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    ``p`` is rounded to ``k / 65536``, at most ``65535 / 65536`` (a rate just
    below 1 must keep something for the scale to exist); the kept elements are
    scaled by ``65536 / (65536 - k)``, so the expectation is exactly ``x``. Same
    shape and dtype.
    """
    if x.device.type != "cpu" or torch.compiler.is_compiling() or functorch_active():
        # a compiled graph makes its own mask; torch.func cannot run the in-place draw,
        # nor _MaskScale (an autograd Function without setup_context)
        return F.dropout(x, p, training=True)
    dropped = min(round(p * LANES), LANES - 1)
    if dropped == 0:
        return x
    words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64).random_(-(2**63), 2**63 - 1)
    lanes = words.view(torch.int16)[: x.numel()].view(x.shape)  # uniform in [-2^15, 2^15)
    # keep = lanes >= low + 1, probability 1 - dropped / 65536, as 0/1 in x's dtype.
    # A comparison writes bool element by element; clamping is vectorized (2x faster).
    low = dropped - LANES // 2 - 1
    keep = lanes.clamp_(low, low + 1).sub_(low).to(x.dtype)
    return _MaskScale.apply(x, keep, LANES / (LANES - dropped))


class _MaskScale(torch.autograd.Function):
    """``x * keep * scale`` and its gradient (and tangent, for forward-mode AD) in one pass
    each, rounded once (as the two products were: ``keep`` is 0 or 1), instead of two
    passes and a temporary."""

    @staticmethod
    def forward(ctx, x: Tensor, keep: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(keep)
        ctx.save_for_forward(keep)
        ctx.scale = scale
        return _mask_scale(x, keep, scale)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return _mask_scale(grad, keep, ctx.scale), None, None

    @staticmethod
    def jvp(ctx, x_tangent: Tensor, _keep_tangent: None, _scale_tangent: None) -> Tensor:
        (keep,) = ctx.saved_tensors
        return _mask_scale(x_tangent, keep, ctx.scale)


def _mask_scale(x: Tensor, keep: Tensor, scale: float) -> Tensor:
    """``x * keep * scale`` in one pass."""
    return torch.addcmul(x.new_zeros(()), x, keep, value=scale)


def check_rate(name: str, p: object) -> float:
    """``p``, the dropout rate given as the argument ``name``, as a float in [0, 1).

    Raises:
        TypeError: ``p`` is not a real number (e.g. the string ``"0.1"``).
        ValueError: ``p`` is outside [0, 1) or NaN.
    """
    if not isinstance(p, numbers.Real):
        raise TypeError(f"{name} must be a number in [0, 1), got {p!r}")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {p}")
    return float(p)


class Dropout(nn.Module):
    """``nn.Dropout(p)`` through :func:`dropout`: active in training mode only.

    Raises:
        TypeError: ``p`` is not a number.
        ValueError: ``p`` outside [0, 1).
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = check_rate("dropout probability", p)

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        return dropout(x, self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"
