"""The output layer and the label-smoothed cross-entropy over the vocabulary, fused by rows.

A training batch's logits are ``N x V`` (N target positions, V = 8,000 in the
presets): built whole, they are written and read again by every operator in
the chain (bias add, cast to float32, log-softmax, the loss's gather and mean,
and as many passes back). On a CPU that traffic, not the arithmetic, is most
of the output layer's time once the matrix products run in bf16.
:func:`linear_cross_entropy` computes ``CE(x W^T + b)`` a block of rows at a
time instead, so each block's logits stay in cache, and forms the gradients
in the same pass (the loss is a scalar, so its backward only scales them);
under bf16 autocast the weight's gradient is one product after the loop, over
the blocks' bf16 ``dL/dz`` kept in an ``N x V`` buffer (half the bytes of the
float32 logits), so the float32 ``V x D`` gradient is not cast once a block.
The loss and the softmax are float32 whatever the products' dtype; PAD rows
are dropped before the output layer. This is the approach of Liger Kernel's
fused linear cross-entropy (Hsu et al. 2024) and Cut Cross-Entropy
(Wijmans et al. 2025), written for PyTorch's own CPU/GPU operators.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ...attention.functional import autocast_dtype

__all__ = ["linear_cross_entropy"]

# Rows per block: 256 x 8,000 float32 logits are 8 MB, within a CPU's L2/L3 share.
BLOCK_ROWS = 256


def linear_cross_entropy(
    vectors: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    targets: Tensor,
    *,
    ignore_index: int,
    smoothing: float = 0.0,
    reduction: str = "mean",
    block_rows: int = BLOCK_ROWS,
) -> Tensor:
    """``F.cross_entropy(F.linear(vectors, weight, bias), targets, ...)`` without the logits.

    With ``z = x W^T + b`` and ``p = softmax(z)`` a row's loss is
    ``logsumexp(z) - (1 - eps) z_y - eps * mean(z)``, PyTorch's label smoothing
    (Szegedy et al. 2016 sec. 7), and its gradient ``dL/dz = p - (1 - eps)
    onehot(y) - eps / V``. Inside a CPU/CUDA autocast region the products run in
    the autocast dtype (bf16), with float32 logits, softmax and loss; the
    gradients of ``weight`` and ``bias`` are accumulated in their own dtype.

    Args:
        vectors: the output layer's input ``(N, D)`` (or ``(..., D)``), float.
        weight: ``(V, D)``; bias: ``(V,)`` or None.
        targets: ``(N,)`` (or ``(...)``) long; ``ignore_index`` rows count nowhere.
        smoothing: label smoothing ``eps`` in [0, 1).
        reduction: ``"mean"`` over the counted rows (0 if there are none) or ``"sum"``.
        block_rows: rows per block (memory/speed only: the result does not depend on it
            beyond float rounding).

    Returns:
        the loss, a float32 scalar, differentiable in ``vectors``, ``weight`` and ``bias``.

    Raises:
        ValueError: mismatched shapes, ``reduction`` or ``smoothing`` out of range.
    """
    if vectors.shape[:-1] != targets.shape or vectors.shape[-1] != weight.shape[-1]:
        raise ValueError(
            f"vectors (..., D={weight.shape[-1]}) must match targets {tuple(targets.shape)}, "
            f"got vectors {tuple(vectors.shape)} and weight {tuple(weight.shape)}"
        )
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    compute = autocast_dtype(vectors.device)
    rows = targets.reshape(-1) != ignore_index
    x = vectors.reshape(-1, vectors.shape[-1])[rows]  # (n, D): counted rows only
    y = targets.reshape(-1)[rows]  # (n,)
    scale = 1.0 / max(int(y.numel()), 1) if reduction == "mean" else 1.0
    with torch.autocast(vectors.device.type, enabled=False):
        if torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (x, weight, bias)
        ):
            options = (smoothing, scale, compute or weight.dtype, block_rows)
            return _FusedLoss.apply(x, weight, bias, y, *options)
        return _blocks(x, weight, bias, y, smoothing, compute or weight.dtype, block_rows) * scale


def _blocks(x, weight, bias, y, smoothing, dtype, block_rows, grads=None) -> Tensor:
    """The loss summed over the rows of ``x``, block by block; with ``grads`` a
    ``(grad_x, grad_weight, grad_bias)`` triple, also add each block's gradients into it."""
    w, x = weight.to(dtype), x.to(dtype)  # one cast per call, not per block
    b = None if bias is None else bias.to(dtype)
    total = torch.zeros((), dtype=torch.float32, device=x.device)
    # A (V, D) weight gradient in float32 from bf16 blocks would need a (V, D)
    # cast per block (about 5% of a bf16 Transformer step); instead keep the
    # blocks' bf16 dL/dz, (n, V), and form it with one product after the loop.
    low_dz = None
    if grads is not None and dtype != torch.float32:
        low_dz = torch.empty((x.shape[0], weight.shape[0]), dtype=dtype, device=x.device)
    for start in range(0, x.shape[0], block_rows):
        xs = x[start : start + block_rows]  # (c, D)
        ys = y[start : start + block_rows]  # (c,)
        z = (xs @ w.t() if b is None else torch.addmm(b, xs, w.t())).float()  # (c, V)
        z -= z.amax(dim=-1, keepdim=True)  # shifted logits: the loss does not change
        linear = (1.0 - smoothing) * z.gather(1, ys[:, None])[:, 0] + smoothing * z.mean(dim=-1)
        e = z.exp_()  # in place: one exponential pass serves the loss and the gradient
        sums = e.sum(dim=-1)  # (c,)
        total += (sums.log() - linear).sum()
        if grads is None:
            continue
        dz = e.div_(sums[:, None]).sub_(smoothing / e.shape[1])  # p - eps/V
        dz.scatter_add_(1, ys[:, None], dz.new_full((ys.numel(), 1), smoothing - 1.0))
        grad_x, grad_w, grad_b = grads
        low = dz if low_dz is None else low_dz[start : start + block_rows].copy_(dz)
        grad_x[start : start + block_rows] = low @ w  # (c, D)
        if low_dz is None:
            grad_w.addmm_(dz.t(), xs)  # (V, D), in place
        if grad_b is not None:
            grad_b += dz.sum(dim=0).to(grad_b.dtype)
    if low_dz is not None:
        grads[1].add_(low_dz.t() @ x)  # (V, D): one product, added in the weight's dtype
    return total


class _FusedLoss(torch.autograd.Function):
    """Loss and gradients in one blocked pass; backward scales the saved gradients."""

    @staticmethod
    def forward(ctx, x, weight, bias, y, smoothing, scale, dtype, block_rows):
        grads = (
            torch.empty_like(x),
            torch.zeros_like(weight),
            None if bias is None else torch.zeros_like(bias),
        )
        total = _blocks(x, weight, bias, y, smoothing, dtype, block_rows, grads)
        ctx.save_for_backward(*(g for g in grads if g is not None))
        ctx.has_bias, ctx.scale = bias is not None, scale
        return total * scale

    @staticmethod
    def backward(ctx, grad_output):
        saved = ctx.saved_tensors
        grad_x, grad_w = saved[0], saved[1]
        grad_b = saved[2] if ctx.has_bias else None
        g = grad_output * ctx.scale
        return (
            grad_x * g,
            grad_w * g,
            None if grad_b is None else grad_b * g,
            None, None, None, None, None,
        )  # fmt: skip
