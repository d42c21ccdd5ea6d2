"""attnkit: the attention mechanism of neural translation.

Scores, masks and scaled dot-product attention live in :mod:`attnkit.attention`
and are re-exported here, with :func:`attnkit.lessons.explain`. They are
imported on first use (PEP 562): ``import attnkit`` alone, and so the
``attnkit`` command's start-up, does not load torch.
"""

from __future__ import annotations

from .lazy import lazy_exports

__version__ = "0.1.0"

_ATTENTION = (
    "SCORES",
    "AdditiveScore",
    "Attention",
    "ConcatScore",
    "DotScore",
    "GeneralScore",
    "KVCache",
    "MultiHeadAttention",
    "ScaledDotScore",
    "Score",
    "causal_mask",
    "combine_masks",
    "invert_mask",
    "make_score",
    "masked_softmax",
    "padding_mask",
    "scaled_dot_product_attention",
)
_LAZY = {**dict.fromkeys(_ATTENTION, ".attention"), "explain": ".lessons"}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
