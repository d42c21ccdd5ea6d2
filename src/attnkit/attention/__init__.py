"""The attention core: score functions, masks, scaled dot-product attention."""

from .functional import masked_softmax, scaled_dot_product_attention
from .kv_cache import KVCache
from .layer import Attention
from .masks import (
    ResolvedMask,
    causal_mask,
    combine_masks,
    invert_mask,
    padding_mask,
    resolve_mask,
)
from .multihead import MultiHeadAttention
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
