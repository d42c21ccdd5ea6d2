"""Masked softmax and scaled dot-product attention (Vaswani et al. 2017, eq. 1).

Notation: ``B`` batch, ``Tq`` queries, ``Tk`` keys, ``D`` query/key width,
``Dv`` value width; ``...`` is any number of leading batch or head dims.

Mask convention: a boolean mask is True where attention is ALLOWED (as in
``torch.nn.functional.scaled_dot_product_attention``). A query row with no
allowed key gets weights of 0 and a context of 0, never NaN. The mask
builders and the one place masks are resolved live in :mod:`attnkit.attention.masks`
(their names are importable from here too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .dropout import check_rate, dropout
from .masks import (
    ResolvedMask,
    broadcast_shape,
    causal_mask,
    check_device,
    check_float_mask,
    combine_masks,
    forward_ad_active,
    functorch_active,
    host_can_read,
    invert_mask,
    padding_mask,
    resolve_mask,
)

__all__ = [
    "ResolvedMask",
    "attend",
    "AUTOCAST_CASTS",
    "autocast_dtype",
    "autocast_mixes",
    "causal_mask",
    "combine_masks",
    "invert_mask",
    "masked_softmax",
    "padding_mask",
    "resolve_mask",
    "scaled_dot_product_attention",
    "score_dtype",
    "takes_fused_kernel",
    "default_scale",
    "dot_scores",
    "zero_dead_keys",
]

_LOW_PRECISION = (torch.float16, torch.bfloat16)
# Training in bf16 on a CPU: up to this many keys the explicit path is faster
# than PyTorch's fused kernel (see _explicit_is_faster).
EXPLICIT_MAX_KEYS = 128


def masked_softmax(scores: Tensor, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """Softmax over ``dim`` restricted to the allowed positions of ``mask``.

    ``w_j = exp(s_j - m) / sum_{k allowed} exp(s_k - m)`` for allowed ``j``, where
    ``m`` is the row maximum (the shift that keeps ``exp`` finite); ``w_j = 0``
    for masked ``j``. A score of ``-inf`` counts as masked (the additive-mask
    convention: ``scores.masked_fill(~mask, -inf)`` then ``masked_softmax(scores)``
    is the same as ``masked_softmax(scores, mask)``). A row with no allowed
    position gives all-zero weights and zero gradients, not ``torch.softmax``'s
    NaN. Masked scores are replaced, not added to, so a NaN or inf score at a
    masked position cannot reach the weights. float16/bfloat16 scores are
    reduced in float32 and the result is cast back.

    Args:
        scores: alignment scores, any shape, floating dtype.
        mask: bool, broadcastable to ``scores``; True = may attend.
        dim: the dimension to normalise over (the keys).

    Returns:
        weights with the shape and dtype of ``scores``; each row sums to 1, or to
        0 when fully masked.

    Raises:
        TypeError: ``scores`` is not a floating-point tensor or ``mask`` not a
            bool one.
        ValueError: ``mask`` does not broadcast to ``scores``, or is on another device.
    """
    if not isinstance(scores, Tensor):
        raise TypeError(f"scores must be a torch.Tensor, got {type(scores).__name__}")
    if not scores.is_floating_point():
        raise TypeError(f"scores must be a floating-point tensor, got dtype {scores.dtype}")
    work = scores.to(score_dtype(scores.dtype))
    if mask is not None and not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a bool torch.Tensor or None, got {type(mask).__name__}")
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
    if mask is not None:
        _check_broadcast("mask", mask.shape, scores.shape)
        check_device("mask", mask, scores.device, "scores")
    mask = _without_dead_rows(work, mask, dim)
    if mask is None:  # no row of -inf only: torch.softmax gives -inf scores weight 0 itself
        return torch.softmax(work, dim=dim).to(scores.dtype)
    # A dtype-derived floor instead of -inf keeps fully masked rows finite
    # (uniform), so neither the forward nor the backward pass produces NaN; the
    # final `where` then sets every masked weight, and so those rows, to 0.
    floor = torch.finfo(work.dtype).min
    weights = torch.softmax(work.masked_fill(~mask, floor), dim=dim)
    return torch.where(mask, weights, weights.new_zeros(())).to(scores.dtype)


def _without_dead_rows(scores: Tensor, mask: Tensor | None, dim: int) -> Tensor | None:
    """``mask`` with the rows whose scores are all ``-inf`` masked too (softmax would make
    them NaN); None when there is no mask and no such row.

    Only such rows need it: in any other row a ``-inf`` score gets weight 0 from the
    softmax (from the floor's row maximum where every allowed score is ``-inf``). Where
    :func:`~attnkit.attention.masks.host_can_read` allows (CPU, outside ``torch.compile``
    and ``torch.func`` transforms), one reduction finds them, so the usual case costs
    no full-size mask (the weights path's peak memory is a naive softmax's); elsewhere
    (a GPU, a compiled graph, ``vmap``) every ``-inf`` is masked.
    """
    if not host_can_read(scores):
        finite = ~torch.isneginf(scores)
        return finite if mask is None else mask & finite
    dead = torch.isneginf(scores).all(dim=dim, keepdim=True)  # (..., 1, ...): a row's verdict
    if not bool(dead.any()):
        return mask
    return ~dead if mask is None else mask & ~dead


def score_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype scores are formed and reduced in: float32 for float16/bfloat16 inputs.

    A float16 ``q . k`` overflows above 65504 long before softmax would care, so
    reduced-precision inputs are multiplied and normalised in float32 (as
    PyTorch's fused kernels accumulate); other dtypes are kept.
    """
    return torch.float32 if dtype in _LOW_PRECISION else dtype


def default_scale(width: int) -> float:
    """``1/sqrt(D)`` (Vaswani et al. 2017, eq. 1); 1 for ``D = 0``, where every
    score ``q . k`` is 0 whatever the scale (PyTorch's fused kernel agrees)."""
    return 1.0 / math.sqrt(width) if width else 1.0


def dot_scores(query: Tensor, key: Tensor, scale: float = 1.0) -> Tensor:
    """Dot-product scores ``S = scale * Q K^T`` that cannot overflow in reduced precision.

    float16/bfloat16 inputs are multiplied in float32 with the scale applied to
    ``Q`` before the product: a float16 ``q . k`` overflows above 65504, and
    bfloat16 shares float32's range, so only scaling first keeps a scaled score
    that fits from passing through an unscaled one that does not. Other dtypes
    are multiplied as given and scaled in place after the product (no second
    ``(Tq, Tk)`` buffer; the same numbers as the worked examples of
    :mod:`attnkit.lessons`). Inside an autocast region whose dtype is the
    keys' (bf16 training and decoding), the product runs in that dtype as
    autocast's other products do: ``Q`` is scaled in float32, rounded once,
    and multiplied with the keys as they are, the numbers autocast would give
    the float32 product, without copying the keys up to float32 and back down
    at every decoder step.

    Args:
        query: ``(..., Tq, D)``, floating.
        key: ``(..., Tk, D)``, same dtype.
        scale: factor on ``Q K^T`` (Vaswani et al. 2017, eq. 1: ``1/sqrt(D)``).

    Returns:
        scores ``(..., Tq, Tk)`` in :func:`score_dtype` of the inputs' dtype,
        or in the autocast dtype inside autocast.
    """
    if query.dtype not in _LOW_PRECISION:
        scores = query @ key.transpose(-2, -1)  # (..., Tq, Tk)
        return scores if scale == 1.0 else scores.mul_(scale)
    if autocast_dtype(key.device) == key.dtype:  # autocast would round float32 back down
        query = query if scale == 1.0 else query.float() * scale  # (..., Tq, D)
        return query.to(key.dtype) @ key.transpose(-2, -1)  # (..., Tq, Tk), autocast dtype
    query = query.float() if scale == 1.0 else query.float() * scale  # (..., Tq, D)
    return query @ key.float().transpose(-2, -1)  # (..., Tq, Tk), float32


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The dtype autocast runs products in on ``device``, None outside autocast.

    None too on a device autocast does not know (``meta``, where shapes are
    worked out), which ``torch.is_autocast_enabled`` would refuse with a
    RuntimeError.
    """
    if not torch.amp.is_autocast_available(device.type):
        return None
    if not torch.is_autocast_enabled(device.type):
        return None
    return torch.get_autocast_dtype(device.type)


# The dtypes autocast casts to its own for a product (it leaves float64 as it is).
AUTOCAST_CASTS = (torch.float16, torch.bfloat16, torch.float32)


def autocast_mixes(device: torch.device, *dtypes: torch.dtype) -> bool:
    """Whether autocast is on for ``device`` and casts each of ``dtypes`` itself, so that
    tensors of these mixed dtypes meet in its dtype (a bf16 activation and float32
    weights, a float32 query and bf16 keys), as in autocast's own products."""
    return autocast_dtype(device) is not None and set(dtypes) <= set(AUTOCAST_CASTS)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    *,
    scale: float | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    return_weights: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Scaled dot-product attention, ``softmax(Q K^T * scale + M) V``.

    Vaswani et al. 2017, eq. 1, with ``scale = 1/sqrt(D)`` by default.

    When weights are not requested the work goes to PyTorch's fused kernel
    (``torch.nn.functional.scaled_dot_product_attention``); otherwise the
    weights are computed explicitly with :func:`masked_softmax`, from scores
    formed by :func:`dot_scores` (scaled before the product, float32 for
    float16/bfloat16 inputs, so a raw ``q . k`` beyond the dtype's range cannot
    turn into NaN). Both paths give the same output, and a query row with no
    allowed key gives a zero output on both (PyTorch alone would give NaN).

    Causal masking is aligned bottom-right: query ``i`` may attend to key ``j``
    when ``j <= i + (Tk - Tq)``, so the last query sees every key, as in
    incremental decoding where the queries are the newest positions. For
    ``Tq == Tk`` this is the usual lower triangle; for ``Tq > Tk`` the first
    ``Tq - Tk`` rows see nothing and come out as zeros.

    Masked keys and values: a key that no query may attend to (padding) is
    replaced by zeros before any product (its key and its value, on both
    paths), so a NaN or inf there reaches no output and no gradient. The
    trade-off: whenever a mask is given this costs a ``torch.where`` over ``V``
    and ``K``, i.e. new ``(..., Tk, D)``
    buffers, a memory-bound pass that does not shrink with the kernel's work:
    its share falls as ``1/Tq`` and is smaller still inside
    :class:`~attnkit.attention.multihead.MultiHeadAttention`, whose projections
    dominate (``zero_dead_keys_cost`` in ``benchmarks/bench_compile.py`` measures it
    on your machine: ``attnkit bench --only compile``). We take it: a padded position holding NaN
    (uninitialised padding, an upstream overflow) would otherwise turn every
    output of its batch row into NaN. A key masked for only some queries
    (causal, per-query masks) is still read by the queries that may see it; its
    score is replaced on the weights path, but a non-finite value there (or key,
    on the fused path) would reach the other rows as ``0 * inf``.

    Dropout is applied to the weights whenever ``dropout_p > 0``, as in PyTorch;
    modules pass ``dropout_p`` only in training mode. The weights returned are
    the ones that made the output, after dropout and its ``1/(1-p)`` rescaling,
    so ``output == weights @ value`` on every path and in every mode.

    Args:
        query: ``(..., Tq, D)``, floating.
        key: ``(..., Tk, D)``, same dtype and leading dims as ``query`` (inside
            ``torch.autocast`` the dtypes may mix, as in PyTorch's kernel: autocast
            casts them to its own).
        value: ``(..., Tk, Dv)``, same dtype and leading dims.
        mask: broadcastable to ``(..., Tq, Tk)``; bool (True = may attend) or a
            float tensor added to the scores (``-inf`` = masked).
        scale: factor applied to ``Q K^T``; ``1/sqrt(D)`` when None (1 for ``D = 0``).
        is_causal: also apply the bottom-right causal mask.
        dropout_p: dropout probability on the attention weights, in [0, 1).
        return_weights: also return the attention weights.

    Returns:
        output ``(..., Tq, Dv)``, or ``(output, weights)`` with weights
        ``(..., Tq, Tk)`` when ``return_weights`` is True; both in the dtype of
        ``query``. Inside ``torch.autocast``, for a float32, float16 or bfloat16
        ``query``, the output is in autocast's dtype (the product's, as PyTorch's
        kernel gives it) while the weights stay in the dtype of ``query``.

    Raises:
        ValueError: wrong ranks, mismatched widths, lengths or leading dims,
            ``key``, ``value`` or ``mask`` on another device than ``query``, a
            mask that does not broadcast, a float mask holding NaN or ``+inf``
            or 0.0 and 1.0 only, both present (pass a bool mask for 1 = may attend; checked on
            CPU: :func:`~attnkit.attention.masks.check_float_mask`),
            a ``scale`` that is NaN or infinite, or ``dropout_p`` outside [0, 1).
        TypeError: non-floating inputs, mixed dtypes outside autocast, a mask that is neither
            bool nor floating, or a ``scale`` or ``dropout_p`` that is not a number.
    """
    _check_qkv(query, key, value)
    dropout_p = check_rate("dropout_p", dropout_p)
    tk = key.shape[-2]
    if isinstance(mask, Tensor):
        _check_broadcast("mask", mask.shape, (*query.shape[:-1], tk))
        check_device("mask", mask, query.device, "query")
        check_float_mask("mask", mask, query.dtype)
    scale = default_scale(query.shape[-1]) if scale is None else _as_scale(scale)
    fused = takes_fused_kernel(query, key, value, dropout_p, return_weights)
    resolved = resolve_mask(mask, query=query, tk=tk, is_causal=is_causal, fused=fused)
    output, weights = attend(query, key, value, resolved, scale, dropout_p, return_weights)
    return (output, weights) if return_weights else output


def attend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    resolved: ResolvedMask,
    scale: float,
    dropout_p: float,
    return_weights: bool,
    *,
    dead_keys_zeroed: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """The kernels behind :func:`scaled_dot_product_attention`, on checked inputs.

    Shapes as there; ``resolved`` from :func:`resolve_mask` with
    ``fused=takes_fused_kernel(...)``, whose choice of kernel it carries. ``dead_keys_zeroed``:
    the caller has already zeroed every key and value position no query may see
    (:func:`zero_dead_keys`), e.g. once for encoder states reused at every
    decoding step, so the pass is skipped. Returns ``(output, weights or None)``.
    """
    if key.shape[-2] == 0:  # no key at all: every row is fully masked
        # Products over an empty dim are zeros that stay in the graph (zero
        # gradients, as PyTorch's kernel gives), unlike a detached new_zeros.
        weights = query @ key.transpose(-2, -1)  # (..., Tq, 0)
        return weights @ value, weights if return_weights else None  # (..., Tq, Dv) zeros
    explicit = return_weights or not resolved.fused
    if resolved.allowed is not None and not dead_keys_zeroed:
        # Keys no query may see cannot reach any output or gradient, even when NaN: the
        # weights path replaces their scores, but dQ = dS K would still read the key.
        key, value = zero_dead_keys(resolved.allowed, key, value)
    if explicit:
        output, weights = _explicit_attention(query, key, value, resolved, scale, dropout_p)
        return output, weights if return_weights else None
    return _fused_attention(query, key, value, resolved, scale, dropout_p), None


def takes_fused_kernel(
    query: Tensor, key: Tensor, value: Tensor, dropout_p: float, return_weights: bool
) -> bool:
    """Whether :func:`attend` will call PyTorch's fused kernel: not when the weights are
    wanted, nor where the explicit path is faster (:func:`_explicit_is_faster`), nor
    under forward-mode AD (``torch.func.jvp``, ``torch.autograd.forward_ad``), which
    PyTorch's fused CPU kernels do not implement.

    Decided before the masks are resolved (``resolve_mask(..., fused=...)``),
    since only the fused kernel takes the causal mask as a flag.
    """
    if return_weights or _forward_mode():
        return False
    return not _explicit_is_faster(query, key, value, dropout_p)


def _forward_mode() -> bool:
    """Whether forward-mode AD may be running: a dual level, or a ``torch.func`` transform
    (which of them, ``jvp`` or ``grad`` or ``vmap``, only private PyTorch API tells)."""
    return forward_ad_active() or functorch_active()


def _explicit_is_faster(query: Tensor, key: Tensor, value: Tensor, dropout_p: float) -> bool:
    """True where :func:`_explicit_attention` beats the fused kernel: bf16/fp16 training, CPU.

    That kernel has no dropout on the CPU: with ``dropout_p > 0`` it falls back
    to the same products and softmax as the explicit path, plus float32 copies
    of the bf16 inputs and a per-element Bernoulli draw, which the explicit
    path with :func:`~attnkit.attention.dropout.dropout`'s mask avoids. Without
    dropout, its bf16 backward pass is slow for short sequences, so training
    takes the explicit path up to :data:`EXPLICIT_MAX_KEYS` keys. In float32
    the fused kernel is as fast or faster and stays.
    ``python -m benchmarks.run --only attention`` (the training-mode table) measures both.
    """
    if query.device.type != "cpu" or query.dtype not in _LOW_PRECISION:
        return False
    if dropout_p > 0:
        return True
    training = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    return training and key.shape[-2] <= EXPLICIT_MAX_KEYS


def zero_dead_keys(
    allowed: Tensor, key: Tensor, value: Tensor, *, keys_too: bool = True
) -> tuple[Tensor, Tensor]:
    """Zero the key (and value) positions that no query may attend to.

    Args:
        allowed: bool mask broadcastable to ``(..., Tq, Tk)``, True = may attend.
        key: ``(..., Tk, D)``.
        value: ``(..., Tk, Dv)``.
        keys_too: also zero ``key`` (else it comes back unchanged).

    Returns:
        ``(key, value)`` with zeros at the dead positions; one tensor for both when
        ``value`` is ``key`` (values that default to the keys are zeroed once).
    """
    live = allowed.any(dim=-2) if allowed.dim() > 1 else allowed  # (..., Tk)
    live = live.unsqueeze(-1)  # (..., Tk, 1)
    zeroed_value = torch.where(live, value, 0.0)  # (..., Tk, Dv)
    if keys_too:
        key = zeroed_value if key is value else torch.where(live, key, 0.0)  # (..., Tk, D)
    return key, zeroed_value


def _explicit_attention(
    query: Tensor, key: Tensor, value: Tensor, r: ResolvedMask, scale: float, dropout_p: float
) -> tuple[Tensor, Tensor]:
    """``(weights @ V, weights)`` with the weights computed and returned."""
    scores = dot_scores(query, key, scale)  # (..., Tq, Tk), float32 for fp16/bf16
    if r.bias is not None:
        scores.add_(r.bias)  # in place: no second (Tq, Tk) buffer
    weights = masked_softmax(scores, r.allowed).to(query.dtype)  # (..., Tq, Tk)
    del scores  # the softmax keeps only its output; free the (Tq, Tk) scores now
    if dropout_p > 0:
        weights = dropout(weights, dropout_p)  # these weights make the output
    return weights @ value, weights  # (..., Tq, Dv), (..., Tq, Tk)


def _fused_attention(
    query: Tensor, key: Tensor, value: Tensor, r: ResolvedMask, scale: float, dropout_p: float
) -> Tensor:
    """PyTorch's fused kernel, with fully masked rows mapped to zero output.

    Branch-free: empty rows are let attend everywhere (a finite forward and
    backward pass), then their output is selected away with ``torch.where``.
    That pass is skipped for a key-only mask (``Tq`` dim of 1, e.g. key
    padding): there an empty row's keys are all dead, and :func:`attend` has
    zeroed their values, so its output is already exactly 0.
    """
    attn_mask = None
    if r.allowed is not None:
        attn_mask = r.allowed | ~r.row_has_key  # (..., Tq, Tk)
    if r.bias is not None:
        attn_mask = r.bias.masked_fill(~attn_mask, -math.inf)  # (..., Tq, Tk)
    output = F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attn_mask,
        dropout_p=dropout_p,
        is_causal=r.is_causal,
        scale=scale,
    )  # (..., Tq, Dv)
    if r.row_has_key is None or r.allowed.dim() < 2 or r.allowed.shape[-2] == 1:
        return output
    return torch.where(r.row_has_key, output, 0.0)  # (..., Tq, Dv)


def _check_qkv(query: Tensor, key: Tensor, value: Tensor) -> None:
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(
                f"{name} must have shape (..., T, D) with at least 2 dims, got {tuple(t.shape)}"
            )
        if not t.is_floating_point():
            raise TypeError(f"{name} must be floating point, got dtype {t.dtype}")
    check_device("key", key, query.device, "query")
    check_device("value", value, query.device, "query")
    same = key.dtype == query.dtype == value.dtype
    if not same and not autocast_mixes(query.device, query.dtype, key.dtype, value.dtype):
        raise TypeError(
            "query, key and value must share a dtype, got "
            f"{query.dtype}, {key.dtype}, {value.dtype}"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"key has D={key.shape[-1]} but query has D={query.shape[-1]} "
            f"(query {tuple(query.shape)}, key {tuple(key.shape)})"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"value has Tk={value.shape[-2]} but key has Tk={key.shape[-2]} "
            f"(key {tuple(key.shape)}, value {tuple(value.shape)})"
        )
    if not query.shape[:-2] == key.shape[:-2] == value.shape[:-2]:
        raise ValueError(
            "query, key and value must share their leading (batch/head) dims, got "
            f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        )


def _as_scale(scale: float) -> float:
    """``scale`` as a float; NaN or an infinity would make every weight NaN."""
    try:
        value = float(scale)
    except (TypeError, ValueError):
        raise TypeError(f"scale must be a real number or None, got {scale!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"scale must be a finite number, got {value}")
    return value


def _check_broadcast(name: str, shape: Sequence[int], target: Sequence[int]) -> None:
    """``shape`` (the argument ``name``'s) must broadcast to exactly ``target``
    (:func:`~attnkit.attention.masks.broadcast_shape`: plain Python, as a decoder step
    checks its mask twice)."""
    target, shape = tuple(target), tuple(shape)
    if broadcast_shape(shape, target) != target:
        raise ValueError(
            f"{name} has shape {shape}, which does not broadcast to {target}"
            + _key_mask_hint(name, shape, target)
        )


def _key_mask_hint(name: str, shape: tuple[int, ...], target: tuple[int, ...]) -> str:
    """How to pass a key padding mask ``(B, Tk)`` against ``(B, ..., Tq, Tk)`` scores."""
    if len(shape) != 2 or len(target) < 3 or shape != (target[0], target[-1]):
        return ""
    axes = ", ".join(["None"] * (len(target) - 2))
    return f"; a key padding mask (B, Tk) applies to every query as {name}[:, {axes}, :]"
