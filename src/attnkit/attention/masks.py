"""Attention masks: the builders, and the ONE place masks are resolved for the kernels.

Mask convention: a boolean mask is True where attention is ALLOWED (as in
``torch.nn.functional.scaled_dot_product_attention``, and as a lower-triangular
causal mask of ones). ``torch.nn.MultiheadAttention`` uses the opposite
polarity; :func:`invert_mask` converts at that boundary.

Notation: ``B`` batch, ``T`` positions, ``Tq`` queries, ``Tk`` keys; ``...``
is any number of leading batch or head dims.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = [
    "ResolvedMask",
    "broadcast_shape",
    "causal_mask",
    "check_device",
    "check_float_mask",
    "combine_masks",
    "forward_ad_active",
    "functorch_active",
    "host_can_read",
    "values_unreadable",
    "invert_mask",
    "padding_mask",
    "resolve_mask",
]


# Integer dtypes whose min and max torch does not implement on the CPU.
_UNREDUCIBLE = (torch.uint16, torch.uint32, torch.uint64)


def padding_mask(
    lengths: Tensor | Sequence[int],
    max_len: int | None = None,
    *,
    device: torch.device | None = None,
) -> Tensor:
    """Boolean padding mask, True at the real (non-pad) positions.

    ``mask[b, t] = t < lengths[b]``.

    Args:
        lengths: ``(B,)`` integer lengths, each in ``[0, max_len]``, any integer
            dtype (the unsigned 16-64-bit ones included, as a token store keeps them).
        max_len: ``T``; defaults to ``max(lengths)`` (0 for an empty batch).
        device: where to build the mask; defaults to the device of ``lengths``.

    Returns:
        mask ``(B, T)``, bool. Use ``mask[:, None, :]`` to broadcast over queries.

    Raises:
        ValueError: ``lengths`` is not 1-D, has a negative entry, or exceeds
            ``max_len``; a negative ``max_len``. The entries are not read inside
            ``torch.compile`` when ``max_len`` is given, so that the mask traces into
            one graph (``fullgraph=True``), nor under ``torch.func`` transforms
            (``vmap``); there they are not checked.
        TypeError: ``lengths`` is not integer-valued, or ``max_len`` is not an int.
    """
    lengths = torch.as_tensor(lengths, device=device)
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (B,), got shape {tuple(lengths.shape)}")
    if lengths.numel() == 0:  # torch.as_tensor([]) is float32: an empty batch has no lengths
        lengths = lengths.long()
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must hold integers, got dtype {lengths.dtype}")
    if lengths.dtype in _UNREDUCIBLE:  # e.g. a token store's uint16 lengths
        lengths = lengths.long()
    if max_len is not None and not _is_int(max_len):
        raise TypeError(f"max_len must be an int, got {max_len!r}")
    if max_len is not None and max_len < 0:
        raise ValueError(f"max_len must be >= 0, got {max_len}")
    # reading values breaks a graph, and has no answer for a vmapped batch of lengths
    if max_len is None or not (torch.compiler.is_compiling() or values_unreadable()):
        max_len = _check_lengths(lengths, max_len)
    positions = torch.arange(max_len, device=lengths.device)  # (T,)
    return positions[None, :] < lengths[:, None]  # (B, T)


def _check_lengths(lengths: Tensor, max_len: int | None) -> int:
    """``max_len``, or ``max(lengths)`` when None, after checking every length is in
    ``[0, max_len]`` (reads the values on the host)."""
    longest = int(lengths.max()) if lengths.numel() else 0
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")
    if max_len is None:
        return longest
    if longest > max_len:
        raise ValueError(f"lengths has a length {longest} greater than max_len={max_len}")
    return max_len


def causal_mask(tq: int, tk: int | None = None, *, device: torch.device | None = None) -> Tensor:
    """Boolean causal mask, aligned bottom-right.

    ``mask[i, j] = j <= i + (tk - tq)``: the last query sees every key. With
    ``tk == tq`` (the default) this is the lower triangle including the diagonal.

    Args:
        tq: number of queries ``Tq`` (>= 0).
        tk: number of keys ``Tk`` (>= 0); defaults to ``tq``.
        device: where to build the mask.

    Returns:
        mask ``(Tq, Tk)``, bool, True = may attend.

    Raises:
        TypeError: a size that is not an integer (a float, a bool, a string).
        ValueError: a negative size.
    """
    tk = tq if tk is None else tk
    if not (_is_int(tq) and _is_int(tk)):
        raise TypeError(f"causal_mask needs int sizes, got tq={tq!r}, tk={tk!r}")
    if tq < 0 or tk < 0:
        raise ValueError(f"causal_mask needs tq >= 0 and tk >= 0, got tq={tq}, tk={tk}")
    return torch.ones(tq, tk, dtype=torch.bool, device=device).tril(diagonal=tk - tq)


def _is_int(size: object) -> bool:
    """An integer of any kind (Python, numpy, a torch integer scalar), but not a bool."""
    if isinstance(size, bool):
        return False
    if isinstance(size, int | torch.SymInt):  # a traced size is not specialised
        return True
    try:
        operator.index(size)
    except TypeError:
        return False
    return True


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """The shape ``shapes`` broadcast to together (NumPy's rules), None if they do not.

    Compared in plain Python, dim by dim from the right (each equal, or 1), about
    2 us a call: ``torch.broadcast_shapes`` gives the same answer through
    ``torch._refs`` and its symbolic-shape guards, 15-30 times slower, and every
    attention call of a decoder step checks its masks.

    Args:
        shapes: any number of shapes (tuples or ``torch.Size``), each of any rank.

    Returns:
        the broadcast shape, of the largest rank; ``()`` for no shapes; None when
        two sizes of one dim differ and neither is 1.
    """
    rank = 0
    for shape in shapes:  # a loop, not max(genexpr, default=0): torch.compile traces this
        rank = max(rank, len(shape))
    out = [1] * rank
    for shape in shapes:
        offset = rank - len(shape)  # aligned from the right
        for i, size in enumerate(shape):
            if out[offset + i] == 1:
                out[offset + i] = size
            elif size != 1 and size != out[offset + i]:
                return None
    return tuple(out)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of boolean masks with broadcasting; ``None`` entries are skipped.

    Returns None when every mask is None.

    Raises:
        TypeError: a mask is not a bool tensor.
        ValueError: the masks do not broadcast together.
    """
    present = [m for m in masks if m is not None]
    for i, m in enumerate(present):
        if not isinstance(m, Tensor):
            raise TypeError(f"combine_masks takes bool masks, mask {i} is a {type(m).__name__}")
        if m.dtype != torch.bool:
            raise TypeError(f"combine_masks takes bool masks, mask {i} has dtype {m.dtype}")
    if not present:
        return None
    if len(present) > 1 and broadcast_shape(*(m.shape for m in present)) is None:
        shapes = ", ".join(str(tuple(m.shape)) for m in present)
        raise ValueError(f"combine_masks: masks of shapes {shapes} do not broadcast")
    combined = present[0]
    for m in present[1:]:
        combined = combined & m
    return combined


def invert_mask(mask: Tensor | None) -> Tensor | None:
    """Convert between the two boolean mask polarities.

    ``torch.nn.MultiheadAttention`` (``key_padding_mask``, bool ``attn_mask``)
    uses True = IGNORE; attnkit uses True = may attend. This flips a bool mask
    either way. Float masks are additive in both APIs and come back unchanged;
    None stays None.

    Raises:
        TypeError: ``mask`` is not a tensor, or neither bool nor floating.
    """
    if mask is not None and not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
    if mask is None or mask.is_floating_point():
        return mask
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be bool or floating, got dtype {mask.dtype}")
    return ~mask


def check_device(name: str, tensor: Tensor, device: torch.device, owner: str) -> None:
    """``tensor`` (the argument ``name``) must be on ``device``, that of ``owner``.

    Without this, PyTorch stops inside a product or a ``torch.where`` with a message
    that names neither argument (e.g. a mask from :func:`padding_mask`, built on the
    CPU by default, with queries on a GPU).

    Raises:
        ValueError: naming both devices and how to move ``tensor``.
    """
    if tensor.device != device:
        raise ValueError(
            f"{name} is on {tensor.device}, {owner} on {device}: pass {name}.to('{device}')"
        )


def functorch_active() -> bool:
    """Whether a ``torch.func`` transform (``grad``, ``vmap``, ``jacrev``, ...) is running."""
    return torch._C._are_functorch_transforms_active()


def forward_ad_active() -> bool:
    """Whether forward-mode AD is running: inside ``torch.autograd.forward_ad.dual_level``
    (``torch.func.jvp`` is a ``torch.func`` transform: see :func:`functorch_active`)."""
    return torch.autograd.forward_ad._current_level >= 0


def values_unreadable() -> bool:
    """Whether input checks must leave tensor values unread: while ``torch.export``
    traces (the exported program would depend on the example input) or a ``torch.func``
    transform runs (under ``vmap`` a batched tensor has no one value to read)."""
    return torch.compiler.is_exporting() or functorch_active()


def host_can_read(tensor: Tensor) -> bool:
    """Whether a check may read ``tensor``'s values on the host (``bool(...)``, ``.item()``).

    Only a CPU tensor outside ``torch.compile`` and ``torch.func`` transforms: on a
    GPU the read is a synchronisation that stalls it, in a compiled graph a graph
    break, and under ``vmap`` an error (a batched tensor has no one value).
    """
    return (
        tensor.device.type == "cpu" and not torch.compiler.is_compiling() and not functorch_active()
    )


def check_float_mask(name: str, mask: Tensor, dtype: torch.dtype) -> None:
    """Refuse a float mask holding NaN, a number above ``dtype``'s largest (``+inf``
    included), or 0s and 1s and nothing else (both present).

    A float mask is added to the scores: finite numbers shift them and ``-inf``
    blocks a key, but NaN (e.g. ``(~keep).float() * -inf``, where ``0 * -inf``
    is NaN at every allowed key) or ``+inf`` would make whole rows NaN. A mask
    of 0.0 and 1.0 only (``torch.tril(torch.ones(T, T))``, the causal mask of
    many tutorials, meant as 1 = may attend) would add 1 to the allowed scores
    and mask nothing. A mask of one value only (all 0.0, or all 1.0) shifts
    every score alike, so it changes no weight and passes; a negative number
    beyond ``dtype``'s range becomes ``-inf`` there and blocks its key. Checked
    with one reduction (``aminmax``), where :func:`host_can_read` allows it (CPU,
    outside ``torch.compile`` and ``torch.func`` transforms); elsewhere such
    masks act as PyTorch's do (NaN rows, a bias of +1).

    Args:
        name: the argument's name, for the message.
        mask: any tensor; only a floating one is checked.
        dtype: the dtype the mask is cast to (the queries').

    Raises:
        ValueError: naming the first offending entry and its index, or saying
            that a 0/1 mask should be a bool one.
    """
    if not mask.is_floating_point() or mask.numel() == 0 or not host_can_read(mask):
        return
    low, high = torch.aminmax(mask)  # NaN when any entry is
    if high <= torch.finfo(dtype).max:  # False for NaN
        if low == 0 and high == 1 and bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError(
                f"{name} holds only 0.0 and 1.0: a float mask is added to the scores, so it "
                f"would mask nothing; for 1 = may attend pass {name}.bool(), or put -inf "
                "where attention is not allowed"
            )
        return
    bad = mask.isnan() | (mask > torch.finfo(dtype).max)
    index = tuple(bad.nonzero()[0].tolist())
    raise ValueError(
        f"{name} has {mask[index].item()} at {index}; a float mask is added to the "
        f"scores: use finite numbers within {dtype}'s range, and -inf where attention "
        "is not allowed"
    )


def key_mask_for_queries(mask: Tensor | None, batch: int, tk: int) -> Tensor | None:
    """A ``(B, Tk)`` key mask as ``(B, 1, Tk)``, so that it applies to any number of queries.

    For :class:`~attnkit.Attention`, whose keys are always per sentence
    (``keys (B, Tk, Dk)``), a 2-D mask is a key mask such as
    ``padding_mask(lengths)``: True = that key may be attended, for every query
    of the sentence. Masks of other ranks are returned unchanged (a 3-D mask
    is ``(B, Tq, Tk)`` or broadcastable; a 1-D mask ``(Tk,)`` broadcasts as is).

    Args:
        mask: None, or bool ``(B, Tk)`` / ``(1, Tk)``, or any other rank.
        batch: ``B``, the batch size of the queries.
        tk: ``Tk``, the number of keys.

    Raises:
        ValueError: a 2-D mask whose shape is not ``(B, Tk)`` or ``(1, Tk)``.
    """
    if mask is None or not isinstance(mask, Tensor) or mask.dim() != 2:
        return mask
    if mask.shape[0] not in (1, batch) or mask.shape[1] != tk:
        raise ValueError(
            f"mask has shape {tuple(mask.shape)}; a 2-D mask is a key mask (B, Tk) = "
            f"{(batch, tk)} (pass a (B, Tq, Tk) mask to mask queries differently)"
        )
    return mask.unsqueeze(-2)  # (B, 1, Tk)


class ResolvedMask(NamedTuple):
    """The user's masks as the attention kernels need them; built by :func:`resolve_mask`.

    Attributes:
        allowed: bool, broadcastable to ``(..., Tq, Tk)``, True = may attend, the
            causal mask merged in; None when nothing is masked (bar ``is_causal``).
        bias: float added to the scores, 0 at blocked positions, broadcastable to
            ``(..., Tq, Tk)``; None without a float mask.
        is_causal: the causal mask is left to the fused kernel's flag (only with
            no other mask, ``Tq == Tk`` and the fused path).
        row_has_key: bool ``(..., Tq, 1)``, False on query rows with no allowed
            key; None when the shapes alone say every row has one.
        fused: resolved for PyTorch's fused kernel (True) or for the explicit
            weights path (False), which needs every mask, causal included, as
            a tensor.
    """

    allowed: Tensor | None
    bias: Tensor | None
    is_causal: bool
    row_has_key: Tensor | None
    fused: bool


def resolve_mask(
    *masks: Tensor | None, query: Tensor, tk: int, is_causal: bool = False, fused: bool = True
) -> ResolvedMask:
    """Resolve masks, the causal flag and the sizes into what the kernels need.

    The ONE place masks are combined: bool masks are AND-ed, a float mask is
    split into its ``-inf`` entries (blocked) and a finite additive bias, and
    the bottom-right causal mask (:func:`causal_mask`) is merged in unless the
    fused kernel can take it as a flag. Branch-free on tensor values: no host
    synchronisation, so it traces into one graph under ``torch.compile``.

    Args:
        masks: each None, bool (True = may attend) or floating (added to the
            scores, ``-inf`` = masked), broadcastable to ``(..., Tq, Tk)``.
        query: the queries ``(..., Tq, D)``; only their ``Tq``, dtype (a float
            mask is cast to it) and device (of the causal mask) are read.
        tk: number of keys ``Tk``.
        is_causal: also apply the bottom-right causal mask.
        fused: the fused kernel will run (it may take ``is_causal`` as a flag).

    Returns:
        a :class:`ResolvedMask`.

    Raises:
        TypeError: a mask that is not a tensor, or neither bool nor floating.
        ValueError: masks that do not broadcast together.
    """
    tq, device = query.shape[-2], query.device
    allowed, bias = None, None
    for mask in masks:
        if mask is not None:
            part, extra = _split_mask(mask, query.dtype)
            allowed = combine_masks(allowed, part)
            if extra is not None:
                bias = extra if bias is None else bias + extra
    if tq <= 1:  # bottom-right aligned, a single query sees every key: nothing to mask
        is_causal = False
    if is_causal and (not fused or allowed is not None or tq != tk):
        allowed = combine_masks(allowed, causal_mask(tq, tk, device=device))  # (..., Tq, Tk)
        is_causal = False
    row_has_key = None
    if tk == 0:  # no key at all: every row is empty
        row_has_key = torch.zeros(tq, 1, dtype=torch.bool, device=device)  # (Tq, 1)
    elif allowed is not None:
        row_has_key = allowed.any(dim=-1, keepdim=True)  # (..., Tq|1, 1)
    return ResolvedMask(allowed, bias, is_causal, row_has_key, fused)


def _split_mask(mask: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
    """One user mask as (allowed bool mask, finite additive bias or None), each at least 2-D.

    A key mask ``(Tk,)`` becomes ``(1, Tk)`` and a 0-D mask ``(1, 1)``: they
    broadcast the same, and PyTorch's fused kernel refuses a mask of rank below 2.
    """
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
    mask = torch.atleast_2d(mask)  # (Tk,) -> (1, Tk), () -> (1, 1)
    if mask.dtype == torch.bool:
        return mask, None
    if not mask.is_floating_point():
        raise TypeError(
            f"mask must be bool (True = may attend) or floating (added to the scores), "
            f"got dtype {mask.dtype}"
        )
    mask = mask.to(dtype)
    blocked = torch.isneginf(mask)
    return ~blocked, mask.masked_fill(blocked, 0.0)
