"""MultiHeadAttention against torch.nn.MultiheadAttention with copied weights."""

import pytest
import torch
from torch import nn

from attnkit import MultiHeadAttention, causal_mask, padding_mask
from mha_helpers import seeded_mha

B, T, E, H = 2, 5, 8, 2
TOL = dict(atol=1e-5, rtol=1e-5)


def pair(**kwargs):
    """A seeded nn.MultiheadAttention (eval) and its attnkit copy."""
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(E, H, batch_first=True, **kwargs).eval()
    with torch.no_grad():  # nonzero biases, so that copying them is tested
        for bias in (ref.in_proj_bias, ref.out_proj.bias):
            if bias is not None:
                bias.normal_()
    return ref, MultiHeadAttention.from_torch(ref).eval()


def head_mask():
    """A per-head (B, H, T, T) bool mask that keeps the diagonal, so no row is empty."""
    torch.manual_seed(1)
    return (torch.rand(B, H, T, T) > 0.5) | torch.eye(T, dtype=torch.bool)


MASKS = {
    "none": lambda: {},
    "padding": lambda: {"key_padding_mask": padding_mask([5, 3])},
    "bool_attn_mask": lambda: {"attn_mask": causal_mask(T).flip(1)},
    "per_head_attn_mask": lambda: {"attn_mask": head_mask()},
    "float_attn_mask": lambda: {"attn_mask": torch.randn(T, T)},
    "padding_and_attn_mask": lambda: {
        "key_padding_mask": padding_mask([5, 4]),
        "attn_mask": head_mask(),
    },
}


def attnkit_module(**kwargs):
    return seeded_mha(E, H, **kwargs)


def compare(ours, theirs, need_weights):
    assert torch.allclose(ours[0], theirs[0], **TOL)
    if need_weights:
        assert ours[1].shape == theirs[1].shape
        assert torch.allclose(ours[1], theirs[1], **TOL)
    else:
        assert ours[1] is None


@pytest.mark.parametrize("masks", list(MASKS))
@pytest.mark.parametrize(
    "need_weights,average",
    [(False, True), (True, True), (True, False)],
    ids=["fused", "avg", "head"],
)
def test_self_attention_matches_torch(masks, need_weights, average):
    ref, mha = pair()
    x = torch.randn(B, T, E)
    kw = MASKS[masks]()
    ours = mha(x, need_weights=need_weights, average_weights=average, **kw)
    flags = dict(need_weights=need_weights, average_attn_weights=average)
    theirs = ref(x, x, x, **flags, **MultiHeadAttention.to_torch_masks(**kw))
    compare(ours, theirs, need_weights)


@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
def test_causal_matches_torch_on_square_scores(need_weights, average):
    ref, mha = pair()
    x = torch.randn(B, T, E)
    kpm = padding_mask([5, 2])
    ours = mha(x, key_padding_mask=kpm, is_causal=True, need_weights=need_weights,
               average_weights=average)  # fmt: skip
    # nn.MultiheadAttention needs the mask itself; is_causal is only a hint there.
    masks = MultiHeadAttention.to_torch_masks(kpm, causal_mask(T))
    flags = dict(need_weights=need_weights, average_attn_weights=average)
    theirs = ref(x, x, x, is_causal=True, **flags, **masks)
    compare(ours, theirs, need_weights)


@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
def test_cross_attention_with_kdim_vdim_matches_torch(need_weights, average):
    ref, mha = pair(kdim=6, vdim=3)
    assert not ref._qkv_same_embed_dim  # exercises the q_proj_weight/k_proj_weight mapping
    query, key, value = torch.randn(B, 4, E), torch.randn(B, 7, 6), torch.randn(B, 7, 3)
    kpm = padding_mask([7, 2])
    ours = mha(query, key, value, key_padding_mask=kpm, need_weights=need_weights,
               average_weights=average)  # fmt: skip
    flags = dict(need_weights=need_weights, average_attn_weights=average)
    theirs = ref(query, key, value, **flags, **MultiHeadAttention.to_torch_masks(kpm))
    compare(ours, theirs, need_weights)
    assert ours[0].shape == (B, 4, E)


def test_without_bias_matches_torch():
    ref, mha = pair(bias=False)
    assert mha.q_proj.bias is None and mha.out_proj.bias is None
    x = torch.randn(B, T, E)
    compare(mha(x), ref(x, x, x, need_weights=False), False)


def test_fully_masked_row_is_nan_in_torch_and_zero_here_other_rows_equal():
    ref, mha = pair()
    x = torch.randn(B, T, E)
    kpm = padding_mask([5, 0])  # the second sentence has no real key at all
    theirs, _ = ref(x, x, x, **MultiHeadAttention.to_torch_masks(kpm))
    assert torch.isnan(theirs[1]).all()
    for need_weights in (False, True):
        ours, _ = mha(x, key_padding_mask=kpm, need_weights=need_weights)
        assert torch.equal(ours[1], torch.zeros(T, E))
        assert torch.allclose(ours[0], theirs[0], **TOL)


def test_to_torch_round_trip_keeps_outputs_and_parameters():
    mha = attnkit_module(kdim=6, vdim=6)
    ref = mha.to_torch().eval()
    assert ref.batch_first and not ref._qkv_same_embed_dim
    query, key = torch.randn(B, 3, E), torch.randn(B, 4, 6)
    kpm = padding_mask([4, 1])
    compare(
        mha(query, key, key_padding_mask=kpm, need_weights=True),
        ref(query, key, key, **MultiHeadAttention.to_torch_masks(kpm)),
        True,
    )
    back = MultiHeadAttention.from_torch(ref)
    again = dict(back.named_parameters())
    assert set(again) == {name for name, _ in mha.named_parameters()}
    for name, tensor in mha.named_parameters():
        assert torch.equal(tensor, again[name]), name


def test_to_torch_packs_in_proj_weight_when_widths_agree():
    mha = attnkit_module()
    ref = mha.to_torch()
    assert torch.equal(ref.in_proj_weight[E : 2 * E], mha.k_proj.weight)
    assert torch.equal(ref.in_proj_bias[2 * E :], mha.v_proj.bias)


def test_to_torch_masks_flips_polarity_and_flattens_heads():
    kpm = padding_mask([2, 1])
    per_head = torch.ones(2, 3, 1, 2, dtype=torch.bool)
    converted = MultiHeadAttention.to_torch_masks(kpm, per_head)
    assert converted["key_padding_mask"].tolist() == [[False, False], [False, True]]
    assert converted["attn_mask"].shape == (6, 1, 2) and not converted["attn_mask"].any()
    additive = torch.randn(3, 3)
    assert MultiHeadAttention.to_torch_masks(attn_mask=additive)["attn_mask"] is additive


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32])
def test_to_torch_masks_takes_a_4d_mask_shared_by_every_row_and_head(dtype):
    ref, mha = pair()
    x = torch.randn(B, T, E)
    shared = causal_mask(T).flip(1)[None, None]  # (1, 1, Tq, Tk): attnkit broadcasts it
    if dtype is torch.float32:
        shared = torch.zeros(T, T).masked_fill(~shared[0, 0], float("-inf"))[None, None]
    converted = MultiHeadAttention.to_torch_masks(attn_mask=shared)
    assert converted["attn_mask"].shape == (T, T)
    compare(mha(x, attn_mask=shared), ref(x, x, x, need_weights=False, **converted), False)
    with pytest.raises(TypeError, match="attn_mask must be a torch.Tensor or None, got list"):
        MultiHeadAttention.to_torch_masks(attn_mask=shared.tolist())


def test_dropout_is_copied_and_only_active_in_training():
    ref, mha = pair(dropout=0.5)
    assert mha.dropout == 0.5
    x = torch.randn(B, T, E)
    compare(mha(x), ref(x, x, x, need_weights=False), False)
    torch.manual_seed(3)
    assert not torch.allclose(mha.train()(x)[0], mha.eval()(x)[0])


@pytest.mark.parametrize("training", [False, True])
def test_from_torch_keeps_the_training_mode_as_to_torch_does(training):
    ref = nn.MultiheadAttention(E, H, dropout=0.5, batch_first=True).train(training)
    assert MultiHeadAttention.from_torch(ref).training is training
    mha = attnkit_module(dropout=0.5).train(training)
    assert MultiHeadAttention.from_torch(mha.to_torch()).training is training
    if not training:  # an eval-mode round trip gives the same numbers, no dropout
        x = torch.randn(B, T, E)
        back = MultiHeadAttention.from_torch(mha.to_torch())
        assert torch.allclose(back(x)[0], mha(x)[0], **TOL)


def test_to_torch_refuses_grouped_query_attention():
    with pytest.raises(ValueError, match="num_kv_heads=1, num_heads=2"):
        MultiHeadAttention(E, H, num_kv_heads=1).to_torch()


def test_from_torch_refuses_unsupported_modules():
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(E, H, add_bias_kv=True))
    with pytest.raises(TypeError, match="Linear"):
        MultiHeadAttention.from_torch(nn.Linear(E, E))


def _xavier_bound(rows, columns):
    return (6.0 / (rows + columns)) ** 0.5


def _spans_its_bound(weight, rows, columns):
    """Within the Xavier bound of a (rows, columns) matrix, and close to it (64 x 64 draws)."""
    bound = _xavier_bound(rows, columns)
    return 0.99 * bound < weight.abs().max() <= bound


def test_input_projections_start_with_the_bound_of_torchs_packed_matrix():
    # torch draws one packed (3E, E) in_proj_weight: its bound is 1/sqrt(2) of an (E, E) one's
    torch.manual_seed(0)
    theirs, ours = nn.MultiheadAttention(64, 4), MultiHeadAttention(64, 4)
    assert _spans_its_bound(theirs.in_proj_weight, 3 * 64, 64)
    for proj in (ours.q_proj, ours.k_proj, ours.v_proj):
        assert _spans_its_bound(proj.weight, 3 * 64, 64)


def test_input_projections_with_kdim_vdim_start_with_torchs_separate_bounds():
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(64, 4, kdim=24, vdim=40)
    ours = MultiHeadAttention(64, 4, kdim=24, vdim=40)
    for name, width in (("q", 64), ("k", 24), ("v", 40)):
        assert _spans_its_bound(getattr(theirs, f"{name}_proj_weight"), 64, width)
        assert _spans_its_bound(getattr(ours, f"{name}_proj").weight, 64, width)


def test_grouped_query_projections_share_the_packed_bound():
    torch.manual_seed(0)
    mha = MultiHeadAttention(64, 4, num_kv_heads=2)  # q (64, 64), k and v (32, 64)
    for proj in (mha.q_proj, mha.k_proj, mha.v_proj):
        assert _spans_its_bound(proj.weight, 64 + 32 + 32, 64)


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
@pytest.mark.parametrize("need_weights", [False, True])
def test_dynamically_quantized_module_attends_as_the_float_one(need_weights):
    # q_proj.weight of a quantize_dynamic Linear is a method: reading its dtype stopped
    # every call with AttributeError: 'function' object has no attribute 'dtype'.
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    quantized = torch.ao.quantization.quantize_dynamic(mha, {nn.Linear}, dtype=torch.qint8)
    x = torch.randn(2, 5, 16)
    keep = padding_mask(torch.tensor([5, 3]), 5)
    want, want_w = mha(x, key_padding_mask=keep, is_causal=True, need_weights=need_weights)
    got, got_w = quantized(x, key_padding_mask=keep, is_causal=True, need_weights=need_weights)
    torch.testing.assert_close(got, want, atol=0.05, rtol=0)
    if need_weights:
        torch.testing.assert_close(got_w, want_w, atol=0.02, rtol=0)
        assert bool((got_w[1, :, 3:] == 0).all())  # padding keeps weight 0
