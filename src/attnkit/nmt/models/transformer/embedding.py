"""Position vectors for the Transformer: sinusoidal (fixed) or learned.

Vaswani et al. 2017, sec. 3.4-3.5: the embedding of token ``y`` at position
``pos`` is ``sqrt(D) * E[y] + P[pos]`` with the sinusoids
``P[pos, 2i] = sin(pos / 10000^(2i/D))`` and ``P[pos, 2i+1] = cos(pos / 10000^(2i/D))``;
learned positions (Gehring et al. 2017) are an ``nn.Embedding`` instead.

Notation: ``B`` batch, ``T`` positions, ``D`` model width, ``V`` vocabulary.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

__all__ = ["Positions", "sinusoids"]


def sinusoids(positions: int, dim: int) -> Tensor:
    """The sinusoid table ``(positions, dim)``, float32 (Vaswani et al. 2017, sec. 3.5)."""
    pos = torch.arange(positions, dtype=torch.float32)[:, None]  # (T, 1)
    rates = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(positions, dim)
    table[:, 0::2] = torch.sin(pos * rates)  # (T, ceil(D/2))
    table[:, 1::2] = torch.cos(pos * rates[: dim // 2])  # (T, floor(D/2))
    return table


class Positions(nn.Module):
    """Position vectors ``P[start : start + T]``, sinusoidal or learned.

    The sinusoid table is a buffer left out of checkpoints, so it is rebuilt
    whenever the module is moved or cast (``.to``, ``.double()``, ``.to_empty()``):
    a model built on the ``meta`` device, given storage with ``to_empty`` and
    then its weights with ``load_state_dict``, has the real table, not the
    uninitialised memory ``to_empty`` leaves in a buffer no checkpoint fills
    (:meth:`place` does the same after ``load_state_dict(..., assign=True)``).

    Args:
        dim: D.
        max_positions: the longest sequence that can be embedded.
        kind: ``"sinusoidal"`` (a fixed table, a buffer not saved in checkpoints)
            or ``"learned"`` (an ``nn.Embedding``).
    """

    def __init__(self, dim: int, max_positions: int, kind: Literal["sinusoidal", "learned"]):
        super().__init__()
        self.max_positions = max_positions
        self.learned = nn.Embedding(max_positions, dim) if kind == "learned" else None
        if self.learned is None:
            self.register_buffer("table", sinusoids(max_positions, dim), persistent=False)

    def _apply(self, fn, recurse: bool = True):  # as nn.RNNBase, which re-flattens its weights
        before = getattr(self, "table", None)
        super()._apply(fn, recurse)
        table = getattr(self, "table", None)
        # a new tensor (to_empty, a cast, a move) is rebuilt; one changed in place
        # (share_memory_) or returned as it was (.float() of float32) is kept
        if table is not None and table is not before and table.device.type != "meta":
            self.table = sinusoids(*table.shape).to(device=table.device, dtype=table.dtype)
        return self

    def place(self, device: torch.device) -> None:
        """Build a sinusoid table still on the ``meta`` device on ``device`` (else nothing)."""
        table = getattr(self, "table", None)
        if table is not None and table.device.type == "meta":
            self.table = sinusoids(*table.shape).to(device=device, dtype=table.dtype)

    def extra_repr(self) -> str:
        if self.learned is not None:
            return ""  # the Embedding's repr gives its sizes
        return f"sinusoidal, max_positions={self.max_positions}, dim={self.table.shape[1]}"

    def forward(self, start: int, length: int) -> Tensor:
        """Positions ``start .. start+length-1`` -> ``(length, D)``.

        Raises:
            ValueError: a position at or beyond ``max_positions``.
        """
        end = start + length
        if end > self.max_positions:
            raise ValueError(
                f"position {end - 1} is beyond model.max_positions={self.max_positions}; "
                "translate shorter inputs or train with a larger max_positions"
            )
        if self.learned is None:
            return self.table[start:end]  # (T, D)
        return self.learned.weight[start:end]  # (T, D)
