"""KVCache: the projected keys and values multi-head attention carries between decoding steps.

Notation: ``B`` batch, ``Hkv`` key/value heads, ``Tk`` cached positions, ``Dh`` head size.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

__all__ = ["KVCache"]


@dataclass(eq=False)  # a state that changes in place: one cache is itself, hashable
class KVCache:
    """Projected keys and values carried between incremental decoding steps.

    Pass one object, empty at first, to successive calls of
    :meth:`MultiHeadAttention.forward`; each successful call UPDATES IT IN PLACE
    (its fields are replaced by new tensors, never written into) and forward
    still returns only ``(output, weights)``. Nothing is stored on the module.

    - Self-attention (``key`` and ``value`` None on the first call): each call
      projects the new positions and appends them, so a step of ``Tq`` queries
      attends to every position seen so far.
    - Cross-attention (``key`` given on the first call): the encoder states are
      projected once, on the first call, and reused; on later calls ``key`` and
      ``value`` may be passed again or left None, and are not read.

    A step then computes ``softmax(q_t [K_cache; k_t]^T / sqrt(Dh)) [V_cache; v_t]``,
    the same numbers as the full causal pass of Vaswani et al. 2017 (sec. 3.2.3,
    masked decoder self-attention; eq. 1) without re-projecting earlier positions.

    The cache checks nothing itself; :meth:`MultiHeadAttention.forward` raises
    ValueError for a cache of another batch size, kind (self/cross) or
    key/value head layout, and for masks that allow a key it zeroed (``zeroed``).

    Attributes:
        key: projected keys ``(B, Hkv, Tk, Dh)``, or None before the first call; in
            the dtype the projections give (the parameters', or autocast's).
        value: projected values ``(B, Hkv, Tk, Dh)``, or None before the first call.
        steps: number of query positions processed so far.
        cross: None until the first call, then whether this is a cross-attention cache.
        zeroed: cross-attention only: the positions the first padding-only
            call's ``key_padding_mask`` masked were zeroed in ``key`` and ``value``
            then, so later steps skip the pass (a copy of both per step). Those
            keys are gone: a later mask may mask more keys, but one that allows
            a zeroed key is refused (ValueError, checked on CPU outside
            ``torch.compile``); start a new cache to change the source padding.
        kept: with ``zeroed``, the ``key_padding_mask`` ``(B, Tk)`` bool that did
            the zeroing (True = kept), or None where it is not known (then later
            masks are not checked). Passing this very tensor again skips the check.
    """

    key: Tensor | None = None
    value: Tensor | None = None
    steps: int = 0
    cross: bool | None = None
    zeroed: bool = False
    kept: Tensor | None = None

    def __repr__(self) -> str:
        return f"KVCache(length={self.length}, steps={self.steps}, cross={self.cross})"

    @property
    def length(self) -> int:
        """Number of cached key positions ``Tk`` (0 when empty)."""
        return 0 if self.key is None else self.key.shape[2]

    def index_select(self, index: Tensor) -> KVCache:
        """A new cache with batch rows ``index`` (e.g. to reorder beams).

        Args:
            index: ``(B',)`` int64 rows in ``[0, B)``; rows may repeat.

        Returns:
            a :class:`KVCache` with ``B'`` rows of ``key``, ``value`` and ``kept``;
            this one is left as it is.
        """
        pick = None if self.key is None else self.key.index_select(0, index)  # (B', Hkv, Tk, Dh)
        pick_v = None if self.value is None else self.value.index_select(0, index)
        kept = None if self.kept is None else self.kept.index_select(0, index)  # (B', Tk)
        return KVCache(pick, pick_v, self.steps, self.cross, self.zeroed, kept)
