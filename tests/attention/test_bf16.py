"""The attention core in bfloat16: bf16 tensors and fp32 modules under ``torch.autocast``.

Every score (through ``Attention``), ``scaled_dot_product_attention`` on its
fused and weights paths, and ``MultiHeadAttention`` (self, causal, cross,
padding, additive masks, need_weights on and off) are compared with float32
on the same (bf16-rounded) inputs. Scores and the softmax are computed in
float32 and the weights returned in the input's dtype, so the stated
tolerance is that of a few bf16 roundings of unit-scale values
(bf16 keeps 8 significant bits, ``eps = 2**-7``):

* outputs, contexts and weights: within ``ATOL = 2e-2`` of float32;
* every row of weights sums to 1 within ``SUM_TOL = 1e-2`` (0 when fully masked);
* a fully masked row has weights and context exactly 0 (bitwise).
"""

from __future__ import annotations

import pytest
import torch

from attnkit import SCORES, Attention, MultiHeadAttention, scaled_dot_product_attention
from attnkit.attention.functional import dot_scores
from mha_helpers import seeded_mha
from score_helpers import WIDTHS, build_score

# batch row 1 of every padding mask here is all padding, on purpose (warned once per process)
pytestmark = pytest.mark.filterwarnings("ignore:key_padding_mask masks every key")

ATOL = 2e-2
SUM_TOL = 1e-2
BF16 = torch.bfloat16


def bf16_round(*tensors):
    """The tensors rounded to bf16 and back, so both sides see the same inputs."""
    return [t.to(BF16).float() for t in tensors]


def key_mask(batch=3, tk=6):
    """Padding mask ``(B, Tk)``; batch row 1 has no key at all (fully masked)."""
    lengths = torch.tensor([tk, 0, tk - 2])[:batch]
    return torch.arange(tk)[None, :] < lengths[:, None]


def assert_weights_ok(weights, fully_masked_rows=None):
    """Rows sum to 1 within SUM_TOL; the fully masked rows (an index on dim 0) are exactly 0."""
    sums = weights.float().sum(-1)
    live = torch.ones_like(sums, dtype=torch.bool)
    if fully_masked_rows is not None:
        dead = weights[fully_masked_rows]
        assert torch.equal(dead, torch.zeros_like(dead))
        live[fully_masked_rows] = False
    torch.testing.assert_close(sums[live], torch.ones_like(sums[live]), atol=SUM_TOL, rtol=0)


@pytest.mark.parametrize("name", SCORES)
@pytest.mark.parametrize("steps", [None, 4], ids=["step-query", "all-queries"])
def test_every_score_in_bf16_matches_float32(name, steps):
    torch.manual_seed(0)
    dq, dk = WIDTHS[name]
    lead = (3,) if steps is None else (3, steps)
    query, keys = bf16_round(torch.randn(*lead, dq), torch.randn(3, 6, dk))
    mask = key_mask()
    reference = Attention(build_score(name, dq, dk))
    low = Attention(build_score(name, dq, dk)).to(BF16)
    low.load_state_dict({k: v.to(BF16) for k, v in reference.state_dict().items()})
    reference.load_state_dict({k: v.float() for k, v in low.state_dict().items()})
    ctx32, w32 = reference(query, keys, mask=mask)
    ctx16, w16 = low(query.to(BF16), keys.to(BF16), mask=mask)
    assert ctx16.dtype == w16.dtype == BF16
    torch.testing.assert_close(w16.float(), w32, atol=ATOL, rtol=0)
    torch.testing.assert_close(ctx16.float(), ctx32, atol=ATOL, rtol=0)
    assert_weights_ok(w16, 1)
    assert torch.equal(ctx16[1], torch.zeros_like(ctx16[1]))


@pytest.mark.parametrize("name", SCORES)
def test_every_score_under_autocast_matches_float32(name):
    torch.manual_seed(1)
    dq, dk = WIDTHS[name]
    attention = Attention(build_score(name, dq, dk))
    query, keys, mask = torch.randn(3, 4, dq), torch.randn(3, 6, dk), key_mask()
    ctx32, w32 = attention(query, keys, mask=mask)
    with torch.autocast("cpu", dtype=BF16):
        ctx16, w16 = attention(query, keys, mask=mask)
    torch.testing.assert_close(w16.float(), w32, atol=ATOL, rtol=0)
    torch.testing.assert_close(ctx16.float(), ctx32, atol=ATOL, rtol=0)
    assert_weights_ok(w16, 1)
    assert torch.equal(ctx16[1], torch.zeros_like(ctx16[1]))


@pytest.mark.parametrize("name", SCORES)
def test_score_dtypes_are_the_documented_ones(name):
    # Score.forward: float32 for bf16 inputs; under autocast the product scores
    # come in its dtype; Attention: the weights and context in the values' dtype
    dq, dk = WIDTHS[name]
    score = build_score(name, dq, dk)
    query, keys = torch.randn(3, 4, dq), torch.randn(3, 6, dk)
    assert score.to(BF16)(query.to(BF16), keys.to(BF16)).dtype == torch.float32
    with torch.autocast("cpu", dtype=BF16):
        scores = score.float()(query, keys)
    product = name in ("dot", "scaled_dot", "general")
    assert scores.dtype == (BF16 if product else torch.float32)
    context, weights = Attention(score.float())(query, keys, keys.double())
    assert context.dtype == weights.dtype == torch.float64


def sdpa_masks(tq=5, tk=5):
    """Bool (row 2 of every batch fully masked), causal and an fp32 additive mask."""
    allowed = torch.rand(2, 1, tq, tk, generator=torch.Generator().manual_seed(3)) > 0.3
    allowed[..., 2, :] = False
    bias = torch.randn(tq, tk)
    bias[2] = float("-inf")  # an additive mask in float32 beside bf16 scores
    return {"bool": (allowed, False), "causal": (None, True), "additive": (bias, False)}


@pytest.mark.parametrize("kind", ["bool", "causal", "additive"])
def test_sdpa_fused_and_weights_paths_agree_in_bf16_and_with_float32(kind):
    torch.manual_seed(2)
    q, k, v = bf16_round(*(torch.randn(2, 3, 5, 8) for _ in range(3)))
    mask, causal = sdpa_masks()[kind]
    ref = scaled_dot_product_attention(q, k, v, mask, is_causal=causal)
    low = [t.to(BF16) for t in (q, k, v)]
    fused = scaled_dot_product_attention(*low, mask, is_causal=causal)
    out, weights = scaled_dot_product_attention(*low, mask, is_causal=causal, return_weights=True)
    assert fused.dtype == out.dtype == weights.dtype == BF16
    torch.testing.assert_close(fused.float(), out.float(), atol=ATOL, rtol=0)
    torch.testing.assert_close(out.float(), ref, atol=ATOL, rtol=0)
    if kind == "causal":
        assert_weights_ok(weights)
    else:
        assert_weights_ok(weights.transpose(0, 2), 2)  # query row 2 is fully masked
        for o in (fused, out):
            assert torch.equal(o[:, :, 2], torch.zeros_like(o[:, :, 2]))


CASES = {
    "self causal, padding": dict(is_causal=True),
    "self, padding": {},
    "self, additive": dict(attn_mask="bias"),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("autocast", [False, True], ids=["bf16-module", "autocast"])
def test_multihead_in_bf16_matches_float32(case, need_weights, autocast):
    mha = seeded_mha(16, 4)
    (x,) = bf16_round(torch.randn(3, 6, 16, generator=torch.Generator().manual_seed(4)))
    options = dict(CASES[case], key_padding_mask=key_mask(), need_weights=need_weights)
    if options.get("attn_mask") == "bias":
        options["attn_mask"] = torch.randn(6, 6, generator=torch.Generator().manual_seed(5))
    mha.load_state_dict({k: v.to(BF16).float() for k, v in mha.state_dict().items()})
    ref, w32 = mha(x, **options)
    if autocast:
        with torch.autocast("cpu", dtype=BF16):
            out, w16 = mha(x, **options)
    else:
        low = MultiHeadAttention(16, 4, dtype=BF16).eval()
        low.load_state_dict({k: v.to(BF16) for k, v in mha.state_dict().items()})
        out, w16 = low(x.to(BF16), **options)
    assert out.dtype == BF16
    torch.testing.assert_close(out.float(), ref, atol=ATOL, rtol=0)
    if need_weights:
        torch.testing.assert_close(w16.float(), w32, atol=ATOL, rtol=0)
        assert_weights_ok(w16, 1)  # batch row 1: every key is padding


def test_multihead_fused_and_weights_paths_agree_in_bf16_cross_attention():
    mha = seeded_mha(16, 4, kdim=12, vdim=12).to(BF16)
    g = torch.Generator().manual_seed(6)
    query, memory = torch.randn(3, 4, 16, generator=g), torch.randn(3, 6, 12, generator=g)
    query, memory = query.to(BF16), memory.to(BF16)
    options = dict(key_padding_mask=key_mask())
    fused, _ = mha(query, memory, memory, **options)
    weights_path, weights = mha(query, memory, memory, need_weights=True, **options)
    torch.testing.assert_close(fused.float(), weights_path.float(), atol=ATOL, rtol=0)
    assert_weights_ok(weights, 1)


@pytest.mark.parametrize("scale", [1.0, 0.125])
def test_dot_scores_of_bf16_inputs_under_autocast_are_autocasts_product_of_float32(scale):
    # the RNN decoder's bf16 query and prepared keys: multiplied in bf16 as they
    # are (no float32 copy of the keys and back), bit for bit what autocast gives
    # the float32 product, and within the bf16 tolerance of float32
    torch.manual_seed(2)
    query, keys = torch.randn(5, 1, 64).to(BF16), torch.randn(5, 9, 64).to(BF16)
    with torch.autocast("cpu", dtype=BF16):
        scores = dot_scores(query, keys, scale)
        autocast_of_float32 = (query.float() * scale) @ keys.float().transpose(-2, -1)
    assert scores.dtype == BF16
    assert torch.equal(scores, autocast_of_float32)
    exact = (query.float() @ keys.float().transpose(-2, -1)) * scale
    torch.testing.assert_close(scores.float(), exact, rtol=2e-2, atol=2e-2 * scale)


@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_under_autocast_takes_bf16_activations_with_float32_parameters(need_weights):
    # Inside autocast an nn.Linear hands on bf16: the next attention layer (float32
    # parameters, as nn.MultiheadAttention's) must take it, not raise a dtype error.
    mha = seeded_mha(16, 4, kdim=12, vdim=12)
    g = torch.Generator().manual_seed(7)
    query, memory = torch.randn(3, 4, 16, generator=g), torch.randn(3, 6, 12, generator=g)
    options = dict(key_padding_mask=key_mask(), need_weights=need_weights)
    with torch.autocast("cpu", dtype=BF16):
        out, weights = mha(query.to(BF16), memory.to(BF16), **options)
        # autocast rounds float32 inputs to bf16 itself: bf16 inputs give the same numbers
        ref, ref_weights = mha(*bf16_round(query, memory), **options)
    assert out.dtype == BF16
    assert torch.equal(out, ref)
    if need_weights:
        assert torch.equal(weights, ref_weights)


def test_multihead_under_autocast_still_refuses_float64_inputs():
    mha = seeded_mha(16, 4)
    with torch.autocast("cpu", dtype=BF16), pytest.raises(TypeError, match="query has dtype"):
        mha(torch.randn(2, 3, 16, dtype=torch.float64))  # autocast does not cast float64


@pytest.mark.parametrize("return_weights", [False, True], ids=["fused", "weights"])
@pytest.mark.parametrize("low", ["query", "keys"])
def test_sdpa_under_autocast_takes_mixed_float32_and_bf16_inputs(return_weights, low):
    # A float32 query (a layer norm's output) meets bf16 keys and values (a Linear's),
    # as PyTorch's own kernel takes them there; autocast meets them in bf16 (a bf16
    # query is scaled before the product: a rounding apart from the float32 query's).
    g = torch.Generator().manual_seed(8)
    query, keys = bf16_round(torch.randn(2, 4, 8, generator=g), torch.randn(2, 5, 8, generator=g))
    mask = key_mask(2, 5)[:, None, :]
    mixed = (
        (query.to(BF16), keys, keys) if low == "query" else (query, keys.to(BF16), keys.to(BF16))
    )
    with torch.autocast("cpu", dtype=BF16):
        got = scaled_dot_product_attention(*mixed, mask, return_weights=return_weights)
        ref = scaled_dot_product_attention(query, keys, keys, mask, return_weights=return_weights)
    for ours, theirs in zip(*(r if return_weights else (r,) for r in (got, ref)), strict=True):
        torch.testing.assert_close(ours.float(), theirs.float(), atol=ATOL, rtol=0)
    output = got[0] if return_weights else got
    assert output.dtype == BF16 and torch.equal(output[1], torch.zeros_like(output[1]))


def test_sdpa_refuses_mixed_dtypes_outside_autocast():
    q = torch.randn(2, 4, 8)
    with pytest.raises(TypeError, match="must share a dtype"):
        scaled_dot_product_attention(q, q.to(BF16), q.to(BF16))
