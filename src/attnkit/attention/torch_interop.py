"""The boundary with ``torch.nn.MultiheadAttention``: masks and weights, both ways.

PyTorch's module takes bool masks with the opposite polarity (True = ignore)
and packs the input projections into one ``in_proj_weight`` when the widths
agree; :class:`TorchInterop` converts both for :class:`MultiHeadAttention`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from .masks import invert_mask

if TYPE_CHECKING:
    from .multihead import MultiHeadAttention

__all__ = ["TorchInterop"]


class TorchInterop:
    """Conversions to and from ``torch.nn.MultiheadAttention`` (mixed into MultiHeadAttention).

    Reads the host module's ``embed_dim``, ``num_heads``, ``num_kv_heads``,
    ``kdim``, ``vdim``, ``dropout`` and its four projections ``q_proj``,
    ``k_proj``, ``v_proj``, ``out_proj``.
    """

    @staticmethod
    def to_torch_masks(
        key_padding_mask: Tensor | None = None, attn_mask: Tensor | None = None
    ) -> dict[str, Tensor | None]:
        """attnkit masks as keyword arguments for ``torch.nn.MultiheadAttention``.

        Flips bool masks to PyTorch's True = ignore (float masks are additive in
        both APIs and pass unchanged) and reshapes a per-head ``attn_mask``
        ``(B, H, Tq, Tk)`` to PyTorch's ``(B*H, Tq, Tk)``, and one shared by
        every row and head, ``(1, 1, Tq, Tk)``, to ``(Tq, Tk)``. PyTorch does not
        broadcast a 3-D mask: expand a ``(B, 1, Tq, Tk)`` or ``(1, H, Tq, Tk)``
        mask to ``(B, H, Tq, Tk)`` first (unless that size-1 dim is really 1).

        Args:
            key_padding_mask: ``(B, Tk)`` bool, True = real token, or None.
            attn_mask: ``(Tq, Tk)`` or ``(B|1, H|1, Tq, Tk)``, bool (True = may
                attend) or float (added to the scores), or None.

        Returns:
            ``{"key_padding_mask": ..., "attn_mask": ...}``.

        Raises:
            TypeError: a mask that is not a tensor, or neither bool nor floating.
        """
        masks = {"key_padding_mask": key_padding_mask, "attn_mask": attn_mask}
        for name, mask in masks.items():
            if mask is not None and not isinstance(mask, Tensor):
                raise TypeError(f"{name} must be a torch.Tensor or None, got {type(mask).__name__}")
        if attn_mask is not None and attn_mask.dim() == 4:
            shared = attn_mask.shape[:2] == (1, 1)
            attn_mask = attn_mask[0, 0] if shared else attn_mask.flatten(0, 1)  # (B*H|., Tq, Tk)
        # Boundary: attnkit True = may attend; nn.MultiheadAttention True = ignore.
        return {
            "key_padding_mask": invert_mask(key_padding_mask),
            "attn_mask": invert_mask(attn_mask),
        }

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """A copy of ``module``'s weights as a :class:`MultiHeadAttention`.

        The result is batch first whatever ``module.batch_first`` is, takes
        masks in attnkit's polarity (see :meth:`to_torch_masks`), and is in
        ``module``'s training mode (as :meth:`to_torch` keeps this one's), so that
        an eval-mode module is not copied into one whose dropout is active.

        Raises:
            TypeError: ``module`` is not a ``torch.nn.MultiheadAttention``.
            ValueError: ``module`` uses ``add_bias_kv`` or ``add_zero_attn``.
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(
                f"module must be a torch.nn.MultiheadAttention, got {type(module).__name__}"
            )
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("from_torch does not support add_bias_kv or add_zero_attn")
        weight = module.out_proj.weight
        mha = cls(
            module.embed_dim,
            module.num_heads,
            kdim=module.kdim,
            vdim=module.vdim,
            bias=module.in_proj_bias is not None,
            dropout=module.dropout,
            device=weight.device,
            dtype=weight.dtype,
        )
        with torch.no_grad():
            for ours, theirs in mha._paired_with(module):
                ours.copy_(theirs)
        return mha.train(module.training)

    def to_torch(self) -> nn.MultiheadAttention:
        """A ``torch.nn.MultiheadAttention`` (batch_first=True) with these weights.

        Raises:
            ValueError: grouped-query attention (``num_kv_heads != num_heads``),
                which PyTorch's module cannot express.
        """
        if self.num_kv_heads != self.num_heads:
            raise ValueError(
                f"to_torch needs num_kv_heads == num_heads, got num_kv_heads="
                f"{self.num_kv_heads}, num_heads={self.num_heads}"
            )
        weight = self.q_proj.weight
        module = nn.MultiheadAttention(
            self.embed_dim,
            self.num_heads,
            dropout=self.dropout,
            bias=self.q_proj.bias is not None,
            kdim=self.kdim,
            vdim=self.vdim,
            batch_first=True,
            device=weight.device,
            dtype=weight.dtype,
        )
        with torch.no_grad():
            for ours, theirs in self._paired_with(module):
                theirs.copy_(ours)
        return module.train(self.training)

    def _paired_with(self, module: nn.MultiheadAttention) -> list[tuple[Tensor, Tensor]]:
        """(our tensor, PyTorch's tensor or a view of it) for every parameter."""
        if module._qkv_same_embed_dim:
            weights = module.in_proj_weight.chunk(3)  # 3 x (E, E) views
        else:
            weights = (module.q_proj_weight, module.k_proj_weight, module.v_proj_weight)
        projections = (self.q_proj, self.k_proj, self.v_proj)
        pairs = [(p.weight, w) for p, w in zip(projections, weights, strict=True)]
        pairs.append((self.out_proj.weight, module.out_proj.weight))
        if module.in_proj_bias is not None:
            biases = module.in_proj_bias.chunk(3)  # 3 x (E,) views
            pairs += [(p.bias, w) for p, w in zip(projections, biases, strict=True)]
            pairs.append((self.out_proj.bias, module.out_proj.bias))
        return pairs
