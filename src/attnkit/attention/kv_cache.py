"""KVCache: the projected keys and values multi-head attention carries between decoding steps.

Notation: ``B`` batch, ``Hkv`` key/value heads, ``Tk`` cached positions, ``Dh`` head size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["KVCache"]

_MIN_CAPACITY = 16  # positions a fresh self-attention buffer holds before it must grow


@dataclass
class _Room:
    """Buffers ``(B, Hkv, capacity, Dh)`` whose first ``filled`` positions are written.

    A self-attention cache's ``key``/``value`` are views of the first positions
    of these buffers, so the next step's keys are written into the free room
    after them instead of copying the whole cache with ``torch.cat``.
    """

    key: Tensor
    value: Tensor
    filled: int

    @classmethod
    def empty(cls, key: Tensor, value: Tensor, batch: int, capacity: int) -> _Room:
        """Unwritten buffers of ``batch`` rows and ``capacity`` positions, dtype of ``key``."""
        heads = key.shape[1]
        return cls(
            key.new_empty(batch, heads, capacity, key.shape[-1]),
            value.new_empty(batch, heads, capacity, value.shape[-1]),
            0,
        )

    @property
    def capacity(self) -> int:
        return self.key.shape[2]


@dataclass
class KVCache:
    """Projected keys and values carried between incremental decoding steps.

    Pass one object, empty at first, to successive calls of
    :meth:`MultiHeadAttention.forward`; each successful call UPDATES IT IN PLACE
    (its fields are replaced) and forward still returns only ``(output,
    weights)``. Nothing is stored on the module. A tensor a cache has handed
    out is never written into afterwards, so a copy of an earlier cache
    (``dataclasses.replace``) stays valid and may be extended again.

    - Self-attention (``key`` and ``value`` None on the first call): each call
      projects the new positions and appends them, so a step of ``Tq`` queries
      attends to every position seen so far. ``key``/``value`` are views of
      buffers with free room after them (:attr:`room`), where the next
      positions are written; a buffer grows by doubling, so a step costs a
      copy of the new position, not of the whole cache.
    - Cross-attention (``key`` given on the first call): the encoder states are
      projected once, on the first call, and reused; on later calls ``key`` and
      ``value`` may be passed again or left None, and are not read.

    Attributes:
        key: projected keys ``(B, Hkv, Tk, Dh)``, or None before the first call.
        value: projected values ``(B, Hkv, Tk, Dh)``, or None before the first call.
        steps: number of query positions processed so far.
        cross: None until the first call, then whether this is a cross-attention cache.
        zeroed: cross-attention only: the positions the first call's
            ``key_padding_mask`` masked were zeroed in ``key`` and ``value`` then,
            so later steps with that mask skip the pass (a copy of both per step).
        room: self-attention only: the buffers ``key``/``value`` are views of
            (internal; None for cross-attention and before the first call).
    """

    key: Tensor | None = None
    value: Tensor | None = None
    steps: int = 0
    cross: bool | None = None
    zeroed: bool = False
    room: _Room | None = None

    def __repr__(self) -> str:
        return f"KVCache(length={self.length}, steps={self.steps}, cross={self.cross})"

    @property
    def length(self) -> int:
        """Number of cached key positions ``Tk`` (0 when empty)."""
        return 0 if self.key is None else self.key.shape[2]

    def appended(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """The cached keys and values followed by ``key``, ``value`` ``(B, Hkv, Tq, Dh)``.

        Written into the free room after this cache's positions when no other
        cache has written there since (the views of earlier states never
        cover it, so they stay valid); otherwise copied into new buffers with
        room to grow. Updates :attr:`room`, not :attr:`key`/:attr:`value`.
        When autograd records (inputs that require grad), or for a cache built
        from plain tensors, it concatenates instead: writing into a buffer
        would change tensors an earlier step saved for the backward pass.
        """
        if key.requires_grad or value.requires_grad or self.room is None and self.key is not None:
            return self._concatenated(key, value)  # autograd must see each step's own tensors
        t, tq = self.length, key.shape[2]
        room = self.room
        if room is None or room.filled != t or t + tq > room.capacity:
            room = _Room.empty(key, value, key.shape[0], max(2 * (t + tq), _MIN_CAPACITY))
            if t:
                room.key[:, :, :t] = self.key
                room.value[:, :, :t] = self.value
        room.key[:, :, t : t + tq] = key
        room.value[:, :, t : t + tq] = value
        room.filled, self.room = t + tq, room
        return room.key[:, :, : t + tq], room.value[:, :, : t + tq]  # (B, Hkv, Tk, Dh)

    def _concatenated(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """``torch.cat`` of the cached and new positions, without room (gradients flow)."""
        if self.key is None:
            return key, value
        return torch.cat([self.key, key], dim=2), torch.cat([self.value, value], dim=2)

    def index_select(self, index: Tensor) -> KVCache:
        """A new cache with batch rows ``index`` (e.g. to reorder beams); ``index`` is ``(B',)``."""
        if self.key is None:
            return KVCache(None, None, self.steps, self.cross, self.zeroed)
        if self.room is None:  # cross-attention: the source never grows
            pick = (self.key.index_select(0, index), self.value.index_select(0, index))
            return KVCache(*pick, self.steps, self.cross, self.zeroed)
        t = self.length
        room = _Room.empty(self.key, self.value, index.shape[0], self.room.capacity)
        torch.index_select(self.key, 0, index, out=room.key[:, :, :t])
        torch.index_select(self.value, 0, index, out=room.value[:, :, :t])
        room.filled = t
        views = (room.key[:, :, :t], room.value[:, :, :t])
        return KVCache(*views, self.steps, self.cross, self.zeroed, room)
