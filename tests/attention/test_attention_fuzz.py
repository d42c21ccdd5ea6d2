"""Property tests for the attention modules: every score in ``Attention``, and
``MultiHeadAttention``, over random shapes, dtypes (float32, float64, bfloat16),
masks with fully masked rows, and extreme input magnitudes.

Invariants: outputs finite; weights in [0, 1]; masked positions get exactly 0;
a row with an allowed key sums to 1; a row with none has zero weights and a
zero output (DESIGN.md, "A query row whose keys are all masked...").
"""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit import Attention, MultiHeadAttention, make_score
from attnkit.attention.functional import causal_mask
from attnkit.attention.scores import SCORES

DTYPES = [torch.float32, torch.float64, torch.bfloat16]
MAGNITUDES = [1.0, 1e2, 1e4]
SAME_WIDTH = {"dot", "scaled_dot"}


def tolerance(dtype):
    return 3e-2 if dtype == torch.bfloat16 else 1e-5


def random_mask(gen, shape, keep, dead_row):
    """Bool mask, True = may attend; ``dead_row`` fully masks the first query row."""
    mask = torch.rand(shape, generator=gen) < keep
    if dead_row and shape[0] > 0:
        mask[0, ...] = False
    return mask


def check_weights(weights, allowed, tol):
    """weights and allowed: (..., Tk); returns the rows that had no allowed key."""
    w = weights.float()
    assert torch.isfinite(w).all()
    assert torch.all((w >= 0) & (w <= 1 + tol))
    assert torch.all(w[~allowed] == 0)
    has_key = allowed.any(-1)
    sums = w.sum(-1)
    assert torch.all((sums[has_key] - 1).abs() <= tol)
    assert torch.all(sums[~has_key] == 0)
    return ~has_key


@st.composite
def layer_case(draw):
    name = draw(st.sampled_from(sorted(SCORES)))
    b, tq, tk = draw(st.integers(0, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 6))
    dq = draw(st.integers(1, 6))
    dk = dq if name in SAME_WIDTH else draw(st.integers(1, 6))
    return dict(
        name=name,
        sizes=(b, tq, tk, dq, dk, draw(st.integers(1, 4))),
        dtype=draw(st.sampled_from(DTYPES)),
        magnitude=draw(st.sampled_from(MAGNITUDES)),
        keep=draw(st.sampled_from([0.0, 0.3, 0.7, 1.0])),
        dead_row=draw(st.booleans()),
        step=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
    )


@settings(max_examples=80, deadline=None)
@given(layer_case())
def test_attention_layer_every_score_finite_and_valid(case):
    b, tq, tk, dq, dk, dv = case["sizes"]
    dtype, gen = case["dtype"], torch.Generator().manual_seed(case["seed"])
    torch.manual_seed(case["seed"])
    layer = Attention(make_score(case["name"], dq, dk, hidden_dim=5)).to(dtype)
    tq = 1 if case["step"] else tq
    query = (torch.randn(b, tq, dq, generator=gen) * case["magnitude"]).to(dtype)
    keys = (torch.randn(b, tk, dk, generator=gen) * case["magnitude"]).to(dtype)
    values = torch.randn(b, tk, dv, generator=gen).to(dtype)
    mask = random_mask(gen, (b, tq, tk), case["keep"], case["dead_row"])
    if case["step"]:
        context, weights = layer(query[:, 0], keys, values, mask[:, 0])
        context, weights = context[:, None], weights[:, None]  # back to (B, 1, ...)
    else:
        context, weights = layer(query, keys, values, mask)
    assert context.shape == (b, tq, dv) and weights.shape == (b, tq, tk)
    assert context.dtype == dtype and weights.dtype == dtype
    assert torch.isfinite(context).all()
    dead = check_weights(weights, mask, tolerance(dtype))
    assert torch.all(context[dead] == 0)


@st.composite
def multihead_case(draw):
    kv_heads = draw(st.integers(1, 3))
    heads = kv_heads * draw(st.integers(1, 2))
    cross = draw(st.booleans())
    tq = draw(st.integers(1, 5))
    return dict(
        heads=heads,
        kv_heads=kv_heads,
        head_dim=draw(st.integers(1, 4)),
        b=draw(st.integers(0, 3)),
        tq=tq,
        tk=draw(st.integers(1, 6)) if cross else tq,
        cross=cross,
        kdim=draw(st.integers(1, 5)) if cross else None,
        causal=draw(st.booleans()),
        need_weights=draw(st.booleans()),
        dtype=draw(st.sampled_from(DTYPES)),
        magnitude=draw(st.sampled_from(MAGNITUDES)),
        keep=draw(st.sampled_from([0.0, 0.4, 1.0])),
        dead_row=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
    )


def allowed_keys(case, padding):
    """(B, Tq, Tk) bool: what every head may attend to."""
    allowed = padding[:, None, :].expand(case["b"], case["tq"], case["tk"])
    if case["causal"]:
        allowed = allowed & causal_mask(case["tq"], case["tk"])
    return allowed


@settings(max_examples=80, deadline=None)
@given(multihead_case())
def test_multihead_attention_finite_and_valid(case):
    dtype, gen = case["dtype"], torch.Generator().manual_seed(case["seed"])
    b, tq, tk = case["b"], case["tq"], case["tk"]
    embed = case["heads"] * case["head_dim"]
    torch.manual_seed(case["seed"])
    mha = MultiHeadAttention(
        embed, case["heads"], kdim=case["kdim"], vdim=case["kdim"], num_kv_heads=case["kv_heads"]
    ).to(dtype)
    query = (torch.randn(b, tq, embed, generator=gen) * case["magnitude"]).to(dtype)
    key = None
    if case["cross"]:
        key = (torch.randn(b, tk, case["kdim"], generator=gen) * case["magnitude"]).to(dtype)
    padding = torch.rand(b, tk, generator=gen) < case["keep"]  # (B, Tk)
    if case["dead_row"] and b:
        padding[0] = False
    out, weights = mha(
        query,
        key,
        key_padding_mask=padding,
        is_causal=case["causal"],
        need_weights=case["need_weights"],
    )
    assert out.shape == (b, tq, embed) and out.dtype == dtype
    assert torch.isfinite(out).all()
    allowed = allowed_keys(case, padding)
    dead = ~allowed.any(-1)  # (B, Tq)
    assert torch.all(out[dead] == 0)
    if case["need_weights"]:
        assert weights.shape == (b, tq, tk)
        check_weights(weights, allowed, tolerance(dtype))
