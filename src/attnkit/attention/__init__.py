"""The attention core: score functions, masks, scaled dot-product attention."""

from .functional import (
    ResolvedMask,
    causal_mask,
    combine_masks,
    invert_mask,
    masked_softmax,
    padding_mask,
    resolve_mask,
    scaled_dot_product_attention,
)
from .layer import Attention
from .multihead import KVCache, MultiHeadAttention
from .scores import (
    SCORES,
    AdditiveScore,
    ConcatScore,
    DotScore,
    GeneralScore,
    ScaledDotScore,
    Score,
    make_score,
)

__all__ = [
    "SCORES",
    "AdditiveScore",
    "Attention",
    "ConcatScore",
    "DotScore",
    "GeneralScore",
    "KVCache",
    "MultiHeadAttention",
    "ResolvedMask",
    "ScaledDotScore",
    "Score",
    "causal_mask",
    "combine_masks",
    "invert_mask",
    "make_score",
    "masked_softmax",
    "padding_mask",
    "resolve_mask",
    "scaled_dot_product_attention",
]
