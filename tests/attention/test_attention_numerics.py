"""Reduced-precision scores and non-finite masked keys.

- Scores are scaled before the product and formed in float32 for float16 /
  bfloat16 inputs, so a raw ``q . k`` beyond the dtype's range (80000 > 65504
  in float16) cannot turn the weights into NaN when the scaled score fits.
- Keys and values that no query may attend to cannot influence any output,
  even when they hold NaN, on every path (fused, weights, Attention, MHA,
  cached decoding).
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit import Attention, DotScore, KVCache, ScaledDotScore, make_score
from attnkit import scaled_dot_product_attention as sdpa
from mha_helpers import identity_mha

NAN = float("nan")


# --- float16 overflow of the raw q . k ----------------------------------------------


def fp16_case():
    q = torch.tensor([[[200.0, 200.0]]], dtype=torch.float16)  # (B=1, Tq=1, D=2)
    k = torch.tensor([[[200.0, 200.0], [0.0, 0.0]]], dtype=torch.float16)  # (1, Tk=2, 2)
    v = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]], dtype=torch.float16)  # (1, 2, 2)
    return q, k, v


def fp16_weights_path(q, k, v):
    return sdpa(q, k, v, return_weights=True)


def fp16_attention(q, k, v):
    return Attention(ScaledDotScore())(q, k, v)


def fp16_mha(q, k, v):
    return identity_mha(2, dtype=q.dtype)(q, k, v, need_weights=True)


@pytest.mark.parametrize("path", [fp16_weights_path, fp16_attention, fp16_mha])
def test_float16_raw_dot_above_65504_gives_one_hot_weights_not_nan(path):
    q, k, v = fp16_case()
    context, weights = path(q, k, v)
    expected = torch.tensor([[[1.0, 0.0]]], dtype=torch.float16)
    assert weights.dtype == context.dtype == torch.float16
    torch.testing.assert_close(weights, expected, rtol=0, atol=0)
    torch.testing.assert_close(context, expected, rtol=0, atol=0)
    torch.testing.assert_close(sdpa(q, k, v), expected, rtol=0, atol=0)


def test_score_modules_form_reduced_precision_scores_in_float32():
    q, k, _ = fp16_case()
    assert DotScore()(q, k)[0, 0].tolist() == [80000.0, 0.0]
    scaled = ScaledDotScore()(q, k)
    assert scaled.dtype == torch.float32
    assert scaled[0, 0, 0].item() == pytest.approx(80000 / math.sqrt(2), rel=1e-6)
    for name in ("general", "concat", "additive"):
        score = make_score(name, 2).to(torch.bfloat16)
        assert score(q.bfloat16(), k.bfloat16()).dtype == torch.float32


# Magnitudes whose raw q . k = 2 a^2 overflows the format while the scaled score
# sqrt(2) a^2 fits: float16 max 65504; bfloat16 (and float32) max ~3.39e38.
NEAR_LIMIT = {torch.float16: (182.0, 214.0), torch.bfloat16: (1.31e19, 1.54e19)}


@st.composite
def near_limit_case(draw):
    dtype = draw(st.sampled_from(sorted(NEAR_LIMIT, key=str)))
    low, high = NEAR_LIMIT[dtype]
    a = draw(st.floats(low, high))
    sign = draw(st.sampled_from([1.0, -1.0]))
    fraction = draw(st.floats(-0.99, 0.99))  # second key's alignment, never a tie
    q = torch.tensor([[[sign * a, sign * a]]], dtype=dtype)
    k = torch.tensor([[[a, a], [fraction * a, fraction * a]]], dtype=dtype)
    v = torch.tensor([[[1.0, -2.0], [3.0, 0.5]]], dtype=dtype)
    return q, k, v


def reference(q, k, v):
    """Float64 softmax(q k^T / sqrt(D)) V on the same (rounded) inputs."""
    q, k, v = q.double(), k.double(), v.double()
    weights = torch.softmax((q / math.sqrt(q.shape[-1])) @ k.transpose(-2, -1), -1)
    return weights @ v, weights


@settings(max_examples=40, deadline=None)
@given(case=near_limit_case())
def test_near_limit_magnitudes_stay_finite_and_exact_on_both_paths(case):
    q, k, v = case
    want_context, want_weights = reference(q, k, v)
    context, weights = sdpa(q, k, v, return_weights=True)
    layer_context, layer_weights = Attention(ScaledDotScore())(q, k, v)
    fused = sdpa(q, k, v)
    for got in (context, weights, layer_context, layer_weights, fused):
        assert got.dtype == q.dtype and torch.isfinite(got).all()
    tol = dict(rtol=0, atol=2e-2)
    torch.testing.assert_close(weights.double(), want_weights, **tol)
    torch.testing.assert_close(layer_weights.double(), want_weights, **tol)
    for got in (context, layer_context, fused):
        torch.testing.assert_close(got.double(), want_context, **tol)


# --- a NaN in a masked-out key or value must not leak ---------------------------


def nan_case():
    qkv = torch.arange(8.0).reshape(1, 2, 4)  # [[0, 1, 2, 3], [4, 5, 6, 7]]: B=1, T=2, D=4
    keep = torch.tensor([[[True, False], [True, False]]])  # (B, Tq, Tk)
    return qkv, keep


EXPECTED = torch.tensor([[[0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]]])


@pytest.mark.parametrize("poisoned", ["key", "value"])
@pytest.mark.parametrize("weights", [False, True])
def test_nan_in_masked_key_or_value_does_not_reach_sdpa_output(poisoned, weights):
    qkv, keep = nan_case()
    k, v = qkv.clone(), qkv.clone()
    (k if poisoned == "key" else v)[0, 1, 0] = NAN
    out = sdpa(qkv, k, v, keep, return_weights=weights)
    out, w = out if weights else (out, None)
    torch.testing.assert_close(out, EXPECTED, rtol=0, atol=0)
    if weights:
        torch.testing.assert_close(w, keep.float(), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nan_in_a_masked_key_does_not_reach_the_query_gradient(dtype):
    # the weights path (and bf16 training on a CPU) replaced the NaN key's score but
    # kept the key, so the backward product dQ = dS K made every query gradient NaN
    qkv, keep = nan_case()
    k = qkv.clone()
    k[0, 1] = NAN
    grads = []
    for weights in (False, True):
        q = qkv.to(dtype).requires_grad_()
        out = sdpa(q, k.to(dtype), qkv.to(dtype), keep, return_weights=weights)
        (out[0] if weights else out).sum().backward()
        grads.append(q.grad)
    clean = qkv.to(dtype).requires_grad_()
    sdpa(clean, qkv.to(dtype), qkv.to(dtype), keep).sum().backward()
    for grad in grads:
        torch.testing.assert_close(grad, clean.grad, rtol=0, atol=0)


def test_nan_in_masked_key_does_not_reach_output_with_a_float_mask_or_causal():
    qkv, keep = nan_case()
    k = qkv.clone()
    k[0, 1, :] = NAN
    bias = torch.zeros(1, 2, 2).masked_fill(~keep, -math.inf)
    torch.testing.assert_close(sdpa(qkv, k, k, bias), EXPECTED, rtol=0, atol=0)
    out = sdpa(qkv, k, k, keep[:, :1], is_causal=True)  # key padding (B, 1, Tk) + causal
    torch.testing.assert_close(out, EXPECTED, rtol=0, atol=0)


@pytest.mark.parametrize("score", ["dot", "scaled_dot", "general", "additive"])
def test_nan_in_masked_key_or_value_does_not_reach_attention_context(score):
    qkv, keep = nan_case()
    k = qkv.clone()
    k[0, 1] = NAN
    attend = Attention(make_score(score, 4)).eval()
    clean, _ = attend(qkv, qkv, qkv, keep)
    context, weights = attend(qkv, k, k, keep)
    torch.testing.assert_close(context, clean, rtol=0, atol=0)
    assert torch.all(weights[..., 1] == 0)
    step_context, _ = attend(qkv[:, 0], k, k, keep[:, 0])  # step query (B, Dq)
    torch.testing.assert_close(step_context, clean[:, 0], rtol=0, atol=0)


@pytest.mark.parametrize("score", ["dot", "general", "additive"])
def test_nan_in_a_masked_key_does_not_reach_the_attention_layers_gradients(score):
    # the layer replaced the key's score, but the backward pass still read the NaN key
    # (dS K, or tanh' of the additive hidden layer): NaN query and weight gradients
    qkv, keep = nan_case()
    k = qkv.clone()
    k[0, 1] = NAN
    torch.manual_seed(0)
    attend = Attention(make_score(score, 4))
    grads = []
    for keys in (k, qkv):  # poisoned, then clean
        q = qkv.clone().requires_grad_()
        attend.zero_grad()
        context, _ = attend(q, keys, qkv, keep)
        context.sum().backward()
        grads.append([q.grad, *(p.grad for p in attend.parameters())])
    for poisoned, clean in zip(*grads, strict=True):
        torch.testing.assert_close(poisoned, clean, rtol=0, atol=0)


@pytest.mark.parametrize("need_weights", [False, True])
def test_nan_in_padded_key_does_not_reach_mha_output(need_weights):
    qkv, _ = nan_case()
    k = qkv.clone()
    k[0, 1] = NAN
    mha = identity_mha(4)
    padding = torch.tensor([[True, False]])  # (B, Tk)
    out, _ = mha(qkv, k, key_padding_mask=padding, need_weights=need_weights)
    torch.testing.assert_close(out, EXPECTED, rtol=0, atol=0)


def test_nan_in_padded_encoder_state_does_not_reach_cached_decoding():
    torch.manual_seed(0)
    mha = identity_mha(4)
    memory = torch.randn(2, 5, 4)  # (B, S, E) encoder states
    padding = torch.tensor([[True] * 5, [True, True, True, False, False]])  # (B, S)
    poisoned = memory.clone()
    poisoned[1, 3:] = NAN
    clean_cache, cache = KVCache(), KVCache()
    for step in torch.randn(3, 2, 4):  # three decoder steps of (B, E)
        want, _ = mha(step, memory, key_padding_mask=padding, cache=clean_cache)
        got, _ = mha(step, poisoned, key_padding_mask=padding, cache=cache)
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("weights", [False, True])
def test_fully_padded_batch_row_gives_exact_zeros_even_with_nan_values(weights):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
    v[1] = NAN  # batch row 1 is all padding
    keep = torch.tensor([[True, True, True, False, False], [False] * 5])[:, None, None]
    out = sdpa(q, k, v, keep, return_weights=weights)
    out = out[0] if weights else out
    assert torch.all(out[1] == 0) and torch.isfinite(out).all()


def test_values_that_are_the_keys_are_zeroed_once(monkeypatch):
    # 5cd5803 zeroes the dead keys too; with values defaulting to the keys (encoder-decoder
    # attention) the same (B, Tk, D) tensor was zeroed twice, a second torch.where pass
    # that made Attention without prepared keys about 3x slower per call
    from attnkit.attention.functional import zero_dead_keys
    from attnkit.attention.masks import padding_mask

    keys = torch.randn(2, 5, 4)
    keys[1, 3:] = math.nan  # padding
    mask = padding_mask([5, 3], 5)  # (B, Tk)
    zeroed_keys, zeroed_values = zero_dead_keys(mask[:, None, :], keys, keys)
    assert zeroed_keys is zeroed_values
    assert torch.equal(zeroed_keys[1, 3:], torch.zeros(2, 4))
    # distinct values are still zeroed on their own
    values = torch.randn(2, 5, 3)
    zk, zv = zero_dead_keys(mask[:, None, :], keys, values)
    assert zk is not zv and torch.equal(zv[1, 3:], torch.zeros(2, 3))
    assert torch.equal(zk[1, 3:], torch.zeros(2, 4))

    big = []  # torch.where passes over a (B, Tk, D) tensor inside Attention
    where = torch.where

    def counting(*args, **kwargs):
        if len(args) == 3 and any(
            isinstance(a, torch.Tensor) and a.shape == keys.shape for a in args[1:]
        ):
            big.append(1)
        return where(*args, **kwargs)

    monkeypatch.setattr(torch, "where", counting)
    query = torch.randn(2, 4, requires_grad=True)
    context, _ = Attention(DotScore())(query, keys, mask=mask)
    assert len(big) == 1
    context.sum().backward()
    assert torch.isfinite(query.grad).all() and torch.isfinite(context).all()
