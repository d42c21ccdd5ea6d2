"""attnkit: the attention mechanism of neural translation.

Scores, masks and scaled dot-product attention live in :mod:`attnkit.attention`
and are re-exported here, with :func:`attnkit.lessons.explain`. They are
imported on first use (PEP 562): ``import attnkit`` alone, and so the
``attnkit`` command's start-up, does not load torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ imports them
    from .attention import SCORES as SCORES
    from .attention import AdditiveScore as AdditiveScore
    from .attention import Attention as Attention
    from .attention import ConcatScore as ConcatScore
    from .attention import DotScore as DotScore
    from .attention import GeneralScore as GeneralScore
    from .attention import KVCache as KVCache
    from .attention import MultiHeadAttention as MultiHeadAttention
    from .attention import ScaledDotScore as ScaledDotScore
    from .attention import Score as Score
    from .attention import causal_mask as causal_mask
    from .attention import combine_masks as combine_masks
    from .attention import invert_mask as invert_mask
    from .attention import make_score as make_score
    from .attention import masked_softmax as masked_softmax
    from .attention import padding_mask as padding_mask
    from .attention import scaled_dot_product_attention as scaled_dot_product_attention
    from .lessons import explain as explain

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
