"""MultiHeadAttention: fully masked heads and rows, bottom-right causal, empty shapes,
errors, gradients. Parity with PyTorch is in test_multihead_torch.py; the cache and
grouped-query attention in test_multihead_cache.py."""

import math

import pytest
import torch

from attnkit import MultiHeadAttention, causal_mask, padding_mask
from mha_helpers import seeded_mha

B, T, E, H = 2, 4, 8, 2
PATHS = pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])


def make(**kwargs):
    return seeded_mha(E, H, **kwargs)


def reference(mha, x, allowed):
    """MultiHead with plain tensor ops (Vaswani et al. 2017 sec. 3.2.2); ``allowed``
    (B, H, Tq, Tk). A head row with no allowed key contributes 0; a row with no
    allowed key in any head is 0."""
    dh = E // H
    split = lambda t: t.unflatten(-1, (H, dh)).transpose(1, 2)  # noqa: E731  (B, H, T, Dh)
    q, k, v = split(mha.q_proj(x)), split(mha.k_proj(x)), split(mha.v_proj(x))
    scores = q @ k.transpose(-2, -1) / math.sqrt(dh)  # (B, H, T, T)
    weights = scores.masked_fill(~allowed, -math.inf).softmax(-1).nan_to_num(0.0)
    out = mha.out_proj((weights @ v).transpose(1, 2).flatten(2))  # (B, T, E)
    return out.masked_fill(~allowed.any(-1).any(1)[..., None], 0.0), weights


@PATHS
def test_fully_masked_head_row_gives_zero_and_leaves_the_rest_unchanged(need_weights):
    mha = make()
    x = torch.randn(B, T, E)
    allowed = torch.ones(B, H, T, T, dtype=torch.bool)
    allowed[0, 1, 2] = False  # head 1 of sentence 0 cannot attend from query 2
    allowed[1, :, 3] = False  # no head of sentence 1 can attend from query 3
    out, weights = mha(x, attn_mask=allowed, need_weights=need_weights, average_weights=False)
    expected, expected_weights = reference(mha, x, allowed)
    assert not torch.isnan(out).any()
    assert torch.allclose(out, expected, atol=1e-6)
    assert torch.equal(out[1, 3], torch.zeros(E))
    unmasked, _ = mha(x)
    assert torch.allclose(out[0, [0, 1, 3]], unmasked[0, [0, 1, 3]], atol=1e-6)
    assert not torch.allclose(out[0, 2], unmasked[0, 2], atol=1e-3)  # head 1 dropped out
    if need_weights:
        assert torch.allclose(weights, expected_weights, atol=1e-6)
        assert torch.equal(weights[0, 1, 2], torch.zeros(T))
        assert torch.allclose(weights[0, 0, 2].sum(), torch.tensor(1.0))


@PATHS
@pytest.mark.filterwarnings("ignore:key_padding_mask masks every key")  # an empty sentence
def test_key_padding_mask_matches_reference_with_an_empty_sentence(need_weights):
    mha = make()
    x = torch.randn(B, T, E)
    kpm = padding_mask([3, 0], T)  # (B, Tk)
    out, _ = mha(x, key_padding_mask=kpm, need_weights=need_weights)
    expected, _ = reference(mha, x, kpm[:, None, None, :].expand(B, H, T, T))
    assert torch.allclose(out, expected, atol=1e-6)
    assert torch.equal(out[1], torch.zeros(T, E))


def test_both_paths_agree_with_masks_and_causal():
    mha = make()
    x = torch.randn(B, T, E)
    kw = dict(key_padding_mask=padding_mask([4, 2]), attn_mask=torch.randn(T, T), is_causal=True)
    fused, none = mha(x, **kw)
    explicit, weights = mha(x, need_weights=True, **kw)
    assert none is None and weights.shape == (B, T, T)
    assert torch.allclose(fused, explicit, atol=1e-6)
    assert torch.allclose(weights.sum(-1), torch.ones(B, T))
    assert torch.equal(weights[1, :, 2:], torch.zeros(T, 2))  # padded keys get exactly 0


@PATHS
def test_float_mask_minus_inf_row_gives_zero(need_weights):
    mha = make()
    x = torch.randn(1, T, E)
    bias = torch.zeros(T, T)
    bias[1] = -math.inf
    out, _ = mha(x, attn_mask=bias, need_weights=need_weights)
    assert torch.equal(out[0, 1], torch.zeros(E))
    assert torch.allclose(out[0, [0, 2, 3]], mha(x)[0][0, [0, 2, 3]], atol=1e-6)


@PATHS
def test_a_float_attn_mask_of_zeros_and_ones_is_refused_by_name(need_weights):
    # torch.tril(torch.ones(T, T)) meant "1 = may attend" but was added to the scores
    with pytest.raises(ValueError, match=r"attn_mask holds only 0.0 and 1.0"):
        make()(
            torch.randn(1, T, E), attn_mask=torch.tril(torch.ones(T, T)), need_weights=need_weights
        )


@PATHS
def test_causal_with_fewer_queries_is_aligned_bottom_right(need_weights):
    mha = make()
    query, memory = torch.randn(B, 2, E), torch.randn(B, 5, E)
    out, weights = mha(query, memory, is_causal=True, need_weights=True, average_weights=False)
    # query i sees keys j <= i + (Tk - Tq) = i + 3
    assert torch.equal(weights[..., 0, 4], torch.zeros(B, H))
    assert (weights[..., 0, :4] > 0).all() and (weights[..., 1, :] > 0).all()
    explicit, _ = mha(query, memory, attn_mask=causal_mask(2, 5), need_weights=need_weights)
    assert torch.allclose(out, explicit, atol=1e-6)
    assert torch.allclose(mha(query, memory, is_causal=True)[0], out, atol=1e-6)


@PATHS
def test_causal_with_more_queries_zeroes_the_rows_before_the_first_key(need_weights):
    mha = make()
    query, memory = torch.randn(B, 4, E), torch.randn(B, 2, E)
    out, _ = mha(query, memory, is_causal=True, need_weights=need_weights)
    assert torch.equal(out[:, :2], torch.zeros(B, 2, E))  # rows 0, 1 have no key
    full, _ = mha(query, memory)
    assert torch.allclose(out[:, 3], full[:, 3], atol=1e-6)  # the last row sees every key


@PATHS
@pytest.mark.parametrize("b,tq,tk", [(0, 3, 3), (2, 0, 3), (2, 3, 0)])
def test_empty_sizes_give_empty_or_zero_outputs(need_weights, b, tq, tk):
    mha = make()
    query, memory = torch.randn(b, tq, E), torch.randn(b, tk, E)
    kpm = torch.ones(b, tk, dtype=torch.bool)
    out, weights = mha(query, memory, key_padding_mask=kpm, is_causal=True,
                       need_weights=need_weights, average_weights=False)  # fmt: skip
    assert out.shape == (b, tq, E)
    if tk == 0:  # no key at all: zeros, not the output bias
        assert torch.equal(out, torch.zeros(b, tq, E))
        assert torch.equal(mha(query, memory)[0], out)
    if need_weights:
        assert weights.shape == (b, H, tq, tk)


def test_a_single_step_query_drops_the_time_dim():
    mha = make()
    step, memory = torch.randn(B, E), torch.randn(B, 5, E)
    out, weights = mha(step, memory, need_weights=True, average_weights=False)
    full, full_weights = mha(step[:, None], memory, need_weights=True, average_weights=False)
    assert out.shape == (B, E) and weights.shape == (B, H, 5)
    assert torch.allclose(out, full[:, 0]) and torch.allclose(weights, full_weights[:, :, 0])
    assert mha(step, memory, need_weights=True)[1].shape == (B, 5)


def test_value_defaults_to_key():
    mha = make()
    query, memory = torch.randn(B, 3, E), torch.randn(B, 5, E)
    assert torch.equal(mha(query, memory)[0], mha(query, memory, memory)[0])


@PATHS
def test_gradcheck_float64_with_padding_and_a_masked_row(need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(4, 2, num_kv_heads=1, dtype=torch.float64)
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    kpm = padding_mask([3, 0])

    def f(x):
        return mha(x, key_padding_mask=kpm, is_causal=True, need_weights=need_weights)[0]

    assert torch.autograd.gradcheck(f, (x,))


@PATHS
def test_forward_mode_ad_and_torch_func_jvp_on_both_paths(need_weights):
    # Without weights the heads went to PyTorch's fused CPU kernel, which has no
    # forward-mode derivative: jvp stopped with NotImplementedError ("Trying to use
    # forward AD with _scaled_dot_product_flash_attention_for_cpu").
    torch.manual_seed(0)
    mha = MultiHeadAttention(4, 2, dtype=torch.float64)
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    kpm = padding_mask([3, 2])

    def f(x):
        return mha(x, key_padding_mask=kpm, is_causal=True, need_weights=need_weights)[0]

    assert torch.autograd.gradcheck(f, (x,), check_forward_ad=True)
    tangent = torch.randn_like(x)
    out, slope = torch.func.jvp(f, (x.detach(),), (tangent,))
    (vjp,) = torch.autograd.grad(f(x), x, out)  # <out, J t> == <J^T out, t>
    torch.testing.assert_close((out * slope).sum(), (vjp * tangent).sum())


@PATHS
def test_gradients_are_finite_with_fully_masked_rows(need_weights):
    mha = make()
    x = torch.randn(B, T, E, requires_grad=True)
    allowed = torch.rand(B, H, T, T) > 0.6
    allowed[0, :, 1] = False
    out, _ = mha(x, attn_mask=allowed, need_weights=need_weights)
    out.square().sum().backward()
    grads = [x.grad] + [p.grad for p in mha.parameters()]
    assert all(torch.isfinite(g).all() for g in grads)
    assert x.grad.abs().sum() > 0


def test_constructor_errors_say_what_does_not_divide():
    with pytest.raises(ValueError, match="embed_dim=10 is not divisible by num_heads=4"):
        MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="num_heads=4 is not divisible by num_kv_heads=3"):
        MultiHeadAttention(8, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match="dropout"):
        MultiHeadAttention(8, 4, dropout=1.0)
    with pytest.raises(ValueError, match="num_heads must be a positive int, got 0"):
        MultiHeadAttention(8, 0)
    with pytest.raises(ValueError, match="num_heads must be a positive int, got 2.0"):
        MultiHeadAttention(8, 2.0)


def cross(mha, **masks):
    return mha(torch.randn(2, 4, 8), torch.randn(2, 4, 6), torch.randn(2, 4, 5), **masks)


BAD_INPUTS = {
    "self with kdim": (ValueError, "self-attention \\(key=None\\) needs kdim == vdim == embed_dim",
                       lambda m: m(torch.randn(2, 4, 8))),
    "query width": (ValueError, r"query must have shape \(B, T, 8\), got \(2, 4, 6\)",
                    lambda m: m(torch.randn(2, 4, 6), torch.randn(2, 4, 6))),
    "key width": (ValueError, r"key must have shape \(B, T, 6\), got \(2, 3, 8\)",
                  lambda m: m(torch.randn(2, 4, 8), torch.randn(2, 3, 8), torch.randn(2, 3, 5))),
    "value width": (ValueError, r"value must have shape \(B, T, 5\), got \(2, 3, 6\)",
                    lambda m: m(torch.randn(2, 4, 8), torch.randn(2, 3, 6), torch.randn(2, 3, 6))),
    "value defaults": (ValueError, "kdim=6 differs from vdim=5",
                       lambda m: m(torch.randn(2, 4, 8), torch.randn(2, 3, 6))),
    "batch": (ValueError, "key has batch size 3 but query has B=2",
              lambda m: m(torch.randn(2, 4, 8), torch.randn(3, 3, 6), torch.randn(3, 3, 5))),
    "lengths": (ValueError, "value has Tk=2 but key has Tk=3",
                lambda m: m(torch.randn(2, 4, 8), torch.randn(2, 3, 6), torch.randn(2, 2, 5))),
    "value only": (ValueError, "value was given without key",
                   lambda m: m(torch.randn(2, 4, 8), None, torch.randn(2, 3, 5))),
    "dtype": (TypeError, "key has dtype torch.float32 but the parameters are torch.float64",
              lambda m: m.double()(torch.randn(2, 4, 8).double(), torch.randn(2, 4, 6))),
    "not a tensor": (TypeError, "query must be a torch.Tensor, got list", lambda m: m([1.0])),
    "query None": (TypeError, "query must be a torch.Tensor, got NoneType", lambda m: m(None)),
    "key not a tensor": (TypeError, "key must be a torch.Tensor, got list",
                         lambda m: m(torch.randn(2, 4, 8), [[1.0] * 6])),
    "value not a tensor": (TypeError, "value must be a torch.Tensor, got ndarray",
                           lambda m: m(torch.randn(2, 4, 8), torch.randn(2, 3, 6),
                                       torch.randn(2, 3, 5).numpy())),
    "padding shape": (ValueError, r"key_padding_mask has shape \(2, 3\), expected \(2, 4\)",
                      lambda m: cross(m, key_padding_mask=padding_mask([3, 3]))),
    "padding dtype": (TypeError, "key_padding_mask must be bool.*got dtype torch.int64",
                      lambda m: cross(m, key_padding_mask=torch.ones(2, 4).long())),
    "attn_mask shape": (ValueError,
                        r"attn_mask has shape \(2, 4, 4\), expected \(4, 4\) or \(2, 2, 4, 4\)",
                        lambda m: cross(m, attn_mask=torch.ones(2, 4, 4).bool())),
    "attn_mask dtype": (TypeError, "attn_mask must be bool or floating.*torch.int32",
                        lambda m: cross(m, attn_mask=torch.ones(4, 4).int())),
    "attn_mask nan": (ValueError, r"attn_mask has nan at \(0, 0\)",  # 0 * -inf where allowed
                      lambda m: cross(m, attn_mask=(~causal_mask(4)).float() * -math.inf)),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_inputs_raise_errors_naming_the_argument_and_shapes(case):
    mha = MultiHeadAttention(8, 2, kdim=6, vdim=5)
    error, message, call = BAD_INPUTS[case]
    with pytest.raises(error, match=message):
        call(mha)


def test_module_keeps_no_per_batch_state():
    mha = make()
    before = {k: v.clone() for k, v in mha.state_dict().items()}
    mha(torch.randn(B, T, E), key_padding_mask=padding_mask([4, 1]), need_weights=True)
    assert set(vars(mha)) == set(vars(make()))
    assert all(torch.equal(before[k], v) for k, v in mha.state_dict().items())


def test_torch_polarity_padding_mask_warns_once_pointing_to_invert_mask(monkeypatch):
    import warnings

    from attnkit.attention import multihead

    monkeypatch.setattr(multihead, "_warned_all_padding", False)
    mha, x = make(), torch.randn(B, T, E)
    torch_style = ~padding_mask([T, 2], T)  # True = ignore: row 0 (full length) masks all keys
    with pytest.warns(UserWarning, match="attnkit.invert_mask") as caught:
        out, _ = mha(x, key_padding_mask=torch_style)
    assert caught[0].filename == __file__  # points at the caller's line
    assert torch.equal(out[0], torch.zeros(T, E))  # what the warning is about
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process: no second warning
        mha(x, key_padding_mask=torch_style)
        monkeypatch.setattr(multihead, "_warned_all_padding", False)
        mha(x, key_padding_mask=padding_mask([T, 2], T))  # right polarity: no warning


# "meta" stands in for a GPU: a tensor there and one on the CPU do not meet in a product
@pytest.mark.parametrize(
    "moved,owner",
    [
        ("query", "the parameters"),
        ("key", "the parameters"),
        ("key_padding_mask", "query"),
        ("attn_mask", "query"),
    ],
)
def test_an_input_on_another_device_is_named(moved, owner):
    mha = MultiHeadAttention(8, 2)
    args = dict(
        query=torch.randn(2, 3, 8),
        key=torch.randn(2, 4, 8),
        key_padding_mask=padding_mask([4, 2]),
        attn_mask=torch.ones(3, 4, dtype=torch.bool),
    )
    args[moved] = args[moved].to("meta")
    with pytest.raises(ValueError, match=f"^{moved} is on meta, {owner} on cpu: pass {moved}.to"):
        mha(**args)
