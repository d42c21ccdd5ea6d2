"""attnkit: the attention mechanism of neural translation.

Scores, masks and scaled dot-product attention live in :mod:`attnkit.attention`
and are re-exported here.
"""

from .attention import (
    SCORES,
    AdditiveScore,
    Attention,
    ConcatScore,
    DotScore,
    GeneralScore,
    KVCache,
    MultiHeadAttention,
    ScaledDotScore,
    Score,
    causal_mask,
    combine_masks,
    invert_mask,
    make_score,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
)
from .lessons import explain

__version__ = "0.1.0"

__all__ = [
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
    "explain",
    "invert_mask",
    "make_score",
    "masked_softmax",
    "padding_mask",
    "scaled_dot_product_attention",
]
