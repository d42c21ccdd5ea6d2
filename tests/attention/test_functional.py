"""masked_softmax, scaled_dot_product_attention and the mask builders."""

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnkit import (
    Attention,
    MultiHeadAttention,
    ScaledDotScore,
    causal_mask,
    combine_masks,
    invert_mask,
    make_score,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
)
from attnkit.attention.functional import resolve_mask

IDENTITY = torch.eye(3)


def sdpa_both(*args, **kwargs):
    """Output of the fused path, and (output, weights) of the explicit path."""
    fused = scaled_dot_product_attention(*args, **kwargs)
    explicit, weights = scaled_dot_product_attention(*args, return_weights=True, **kwargs)
    return fused, explicit, weights


# --- worked examples from the lessons -------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [([2.0, 0.0, 1.0], [0.533, 0.168, 0.299]), ([0.0, 2.0, 1.0], [0.168, 0.533, 0.299])],
)
def test_worked_example_identity_keys(query, expected):
    q = torch.tensor([query])  # (Tq=1, D=3)
    fused, explicit, weights = sdpa_both(q, IDENTITY, IDENTITY)
    assert weights[0].tolist() == pytest.approx(expected, abs=5e-4)
    # values are the identity, so the context equals the weights
    assert explicit[0].tolist() == pytest.approx(expected, abs=5e-4)
    torch.testing.assert_close(fused, explicit)


def test_worked_example_scores_210_with_dk_4():
    scores = torch.tensor([2.0, 1.0, 0.0])
    weights = masked_softmax(scores / math.sqrt(4))
    assert weights.tolist() == pytest.approx([0.506, 0.307, 0.186], abs=5e-4)
    values = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # the lesson adds the rounded weights (0.506 + 0.186 = 0.692), hence 1e-3
    assert (weights @ values).tolist() == pytest.approx([0.692, 0.493], abs=1e-3)


@pytest.mark.parametrize("shift", [1000.0, -1000.0])
def test_adding_a_constant_to_every_score_changes_nothing(shift):
    scores = torch.tensor([1.0, 0.5, 0.0])
    torch.testing.assert_close(masked_softmax(scores + shift), masked_softmax(scores))


# --- masked_softmax --------------------------------------------------------------------


def test_masked_positions_get_exactly_zero_and_rows_sum_to_one():
    scores = torch.randn(4, 6)
    mask = torch.rand(4, 6) > 0.4
    mask[:, 0] = True
    weights = masked_softmax(scores, mask)
    assert torch.all(weights[~mask] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(4))
    expected = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1)
    torch.testing.assert_close(weights, expected)


def test_fully_masked_row_gives_zero_weights_and_zero_gradient():
    scores = torch.randn(3, 5, requires_grad=True)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    weights = masked_softmax(scores, mask)
    assert torch.all(weights[1] == 0)
    torch.testing.assert_close(weights[[0, 2]].sum(-1), torch.ones(2))
    (weights * torch.randn(3, 5)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.all(scores.grad[1] == 0)


def test_minus_inf_scores_count_as_masked_so_a_row_of_them_is_zero_not_nan():
    # the additive habit: scores.masked_fill(~mask, -inf), then softmax
    scores = torch.tensor([[1.0, 0.5, 0.0], [2.0, 1.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    filled = scores.masked_fill(~mask, -math.inf)
    for weights in (masked_softmax(filled), masked_softmax(filled, torch.ones_like(mask))):
        torch.testing.assert_close(weights, masked_softmax(scores, mask))
        torch.testing.assert_close(
            weights[0], torch.tensor([0.6225, 0.3775, 0.0]), atol=1e-4, rtol=0
        )
        assert weights[1].tolist() == [0.0, 0.0, 0.0]
    masked_softmax(filled).sum().backward()
    assert torch.isfinite(scores.grad).all()


@pytest.mark.parametrize("given", [False, True])
def test_the_look_for_rows_of_minus_inf_equals_masking_every_minus_inf(monkeypatch, given):
    """On CPU only rows of -inf alone are masked (one reduction, no full-size mask); on a GPU
    or under torch.compile every -inf is. Same weights and gradients, rows of every kind:
    some -inf, every allowed score -inf, all -inf, none."""
    torch.manual_seed(0)
    scores = torch.randn(4, 5, dtype=torch.float64)
    minus = torch.tensor([[0, 1, 0, 0, 1], [1, 1, 0, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 1, 1], [1] * 5, [0, 1, 1, 1, 1]]).bool()

    def weights_and_grad(compiling):
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: compiling)
        x = scores.clone().requires_grad_(True)
        w = masked_softmax(x.masked_fill(minus.bool(), -math.inf), mask if given else None)
        (w * torch.arange(5.0, dtype=torch.float64)).sum().backward()
        return w.detach(), x.grad

    looked, everywhere = weights_and_grad(False), weights_and_grad(True)
    torch.testing.assert_close(looked, everywhere, atol=0, rtol=0)
    assert looked[0][2].tolist() == [0.0] * 5  # the row of -inf only
    assert torch.isfinite(looked[1]).all()


@pytest.mark.parametrize("magnitude", [1e4, -1e4])
def test_extreme_scores_stay_finite_in_float32(magnitude):
    scores = torch.tensor([[magnitude, 0.0, -magnitude], [magnitude, magnitude, 0.0]])
    weights = masked_softmax(scores)
    assert torch.isfinite(weights).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_matches_float32_and_keeps_dtype(dtype):
    scores = torch.randn(4, 7) * 20
    mask = torch.rand(4, 7) > 0.3
    mask[2] = False
    weights = masked_softmax(scores.to(dtype), mask)
    assert weights.dtype == dtype
    assert torch.isfinite(weights).all()
    reference = masked_softmax(scores.to(dtype).float(), mask)
    torch.testing.assert_close(weights.float(), reference, atol=1e-2, rtol=1e-2)


def test_masked_softmax_gradcheck_float64():
    scores = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, False, True, True], [False] * 4, [True] * 4])
    assert torch.autograd.gradcheck(lambda s: masked_softmax(s, mask), (scores,))


def test_masked_softmax_rejects_bad_mask():
    with pytest.raises(TypeError, match="mask must be a bool"):
        masked_softmax(torch.randn(2, 3), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"mask has shape \(2, 4\)"):
        masked_softmax(torch.randn(2, 3), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="scores must be a floating"):
        masked_softmax(torch.ones(2, 3, dtype=torch.long))


def test_masked_softmax_names_an_argument_that_is_not_a_tensor():
    # a learner's first try: the scores and mask of a lesson typed in as lists
    with pytest.raises(TypeError, match="scores must be a torch.Tensor, got list"):
        masked_softmax([2.0, 0.0, 1.0])
    with pytest.raises(TypeError, match="mask must be a bool torch.Tensor or None, got list"):
        masked_softmax(torch.tensor([2.0, 0.0, 1.0]), [True, False, True])


def test_combine_and_invert_masks_name_a_mask_that_is_not_a_tensor():
    with pytest.raises(TypeError, match="combine_masks takes bool masks, mask 1 is a list"):
        combine_masks(torch.ones(3, dtype=torch.bool), [True, False, True])
    with pytest.raises(TypeError, match="mask must be a torch.Tensor or None, got list"):
        invert_mask([True, False])


# --- scaled_dot_product_attention: parity with PyTorch ---------------------------------


def random_qkv(*lead, tq=5, tk=7, d=8, dv=6, dtype=torch.float32):
    return (
        torch.randn(*lead, tq, d, dtype=dtype),
        torch.randn(*lead, tk, d, dtype=dtype),
        torch.randn(*lead, tk, dv, dtype=dtype),
    )


def random_bool_mask(*shape):
    mask = torch.rand(*shape) > 0.3
    mask[..., 0] = True  # PyTorch gives NaN on fully masked rows; keep one key per row
    return mask


MASKS = {
    "none": lambda: None,
    "bool": lambda: random_bool_mask(2, 3, 5, 7),
    "bool_broadcast_keys": lambda: random_bool_mask(2, 1, 1, 7),
    "float": lambda: torch.randn(2, 3, 5, 7),
    "float_with_neg_inf": lambda: torch.where(
        random_bool_mask(2, 3, 5, 7), torch.randn(2, 3, 5, 7), torch.tensor(-math.inf)
    ),
}


@pytest.mark.parametrize("mask_kind", list(MASKS))
def test_equals_torch_sdpa_with_batch_and_head_dims(mask_kind):
    torch.manual_seed(0)
    q, k, v = random_qkv(2, 3)
    mask = MASKS[mask_kind]()
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    fused, explicit, _ = sdpa_both(q, k, v, mask)
    torch.testing.assert_close(fused, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(explicit, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("shape", [(7,), ()])
def test_a_key_mask_of_rank_below_two_broadcasts_on_both_paths(kind, shape):
    torch.manual_seed(2)
    q, k, v = random_qkv(2, 3)
    # key 0 is kept: PyTorch gives NaN on fully masked rows
    keep = (torch.rand(7) > 0.3) | (torch.arange(7) == 0) if shape else torch.tensor(True)
    mask = keep if kind == "bool" else torch.zeros(shape).masked_fill(~keep, -math.inf)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.expand(5, 7))
    fused, explicit, _ = sdpa_both(q, k, v, mask)
    torch.testing.assert_close(fused, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(explicit, expected, atol=1e-5, rtol=1e-5)


def test_equals_torch_sdpa_causal_and_custom_scale():
    torch.manual_seed(1)
    q, k, v = random_qkv(4, tq=6, tk=6)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)
    fused, explicit, weights = sdpa_both(q, k, v, is_causal=True, scale=0.3)
    torch.testing.assert_close(fused, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(explicit, expected, atol=1e-5, rtol=1e-5)
    assert torch.all(weights.triu(diagonal=1) == 0)


def test_causal_with_fewer_queries_is_aligned_bottom_right():
    torch.manual_seed(2)
    q, k, v = random_qkv(2, tq=3, tk=5)
    fused, explicit, weights = sdpa_both(q, k, v, is_causal=True)
    # query i sees keys 0..i+2: the last query sees all five keys
    expected_allowed = torch.tensor(
        [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool
    )
    assert torch.equal(weights[0] > 0, expected_allowed)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=expected_allowed)
    torch.testing.assert_close(fused, reference, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(explicit, reference, atol=1e-5, rtol=1e-5)
    # the last query of a causal pass over all five positions is the same computation
    full = scaled_dot_product_attention(torch.cat([k[..., :2, :], q], -2), k, v, is_causal=True)
    torch.testing.assert_close(full[..., -3:, :], fused, atol=1e-5, rtol=1e-5)


def test_causal_with_more_queries_than_keys_zeroes_the_first_rows():
    q, k, v = random_qkv(tq=5, tk=3)
    fused, explicit, weights = sdpa_both(q, k, v, is_causal=True)
    assert torch.all(fused[:2] == 0) and torch.all(explicit[:2] == 0)
    assert torch.all(weights[:2] == 0)
    torch.testing.assert_close(fused, explicit)


def test_causal_combines_with_a_padding_mask():
    torch.manual_seed(3)
    q, k, v = random_qkv(2, tq=4, tk=4)
    pad = padding_mask([4, 2])[:, None, :]  # (B, 1, Tk)
    fused, explicit, weights = sdpa_both(q, k, v, pad, is_causal=True)
    allowed = combine_masks(pad, causal_mask(4))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    torch.testing.assert_close(fused, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(explicit, expected, atol=1e-5, rtol=1e-5)
    assert torch.all(weights[1, :, 2:] == 0)


# --- fully masked rows, gradients, edge sizes ------------------------------------------


@pytest.mark.parametrize("return_weights", [False, True])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fully_masked_rows_give_zero_output_and_finite_gradients(return_weights, kind):
    torch.manual_seed(4)
    q, k, v = (t.requires_grad_() for t in random_qkv(2, tq=4, tk=5))
    allowed = random_bool_mask(2, 4, 5)
    allowed[0, 1] = False
    allowed[1, 3] = False
    mask = allowed if kind == "bool" else torch.zeros(2, 4, 5).masked_fill(~allowed, -math.inf)
    result = scaled_dot_product_attention(q, k, v, mask, return_weights=return_weights)
    out = result[0] if return_weights else result
    assert torch.all(out[0, 1] == 0) and torch.all(out[1, 3] == 0)
    assert torch.isfinite(out).all()
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.all(q.grad[0, 1] == 0)
    # the other rows equal an unmasked reference restricted to the allowed keys
    keep = allowed.clone()
    keep[0, 1] = True
    keep[1, 3] = True
    reference = F.scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), attn_mask=keep)
    rows = torch.ones(2, 4, dtype=torch.bool)
    rows[0, 1] = rows[1, 3] = False
    torch.testing.assert_close(out.detach()[rows], reference[rows], atol=1e-5, rtol=1e-5)


def test_zero_keys_and_empty_batch_give_correct_shapes():
    q, k, v = random_qkv(2, tq=3, tk=0)
    out, weights = scaled_dot_product_attention(q, k, v, return_weights=True)
    assert out.shape == (2, 3, 6) and weights.shape == (2, 3, 0)
    assert torch.all(scaled_dot_product_attention(q, k, v) == 0)
    q, k, v = random_qkv(0, tq=3, tk=4)
    assert scaled_dot_product_attention(q, k, v).shape == (0, 3, 6)


@pytest.mark.parametrize("return_weights", [False, True])
def test_zero_keys_give_zero_gradients_as_pytorch_not_a_detached_output(return_weights):
    q, k, v = (t.requires_grad_() for t in random_qkv(2, tq=3, tk=0))
    out = scaled_dot_product_attention(q, k, v, return_weights=return_weights)
    out = out[0] if return_weights else out
    out.sum().backward()  # was: "element 0 of tensors does not require grad"
    for t in (q, k, v):
        assert torch.equal(t.grad, torch.zeros_like(t))


def test_sdpa_gradcheck_float64_both_paths():
    q, k, v = (
        t.requires_grad_() for t in random_qkv(2, tq=3, tk=4, d=3, dv=2, dtype=torch.float64)
    )
    mask = torch.tensor([[True, False, True, True], [False] * 4, [True] * 4])
    assert torch.autograd.gradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, mask, return_weights=True), (q, k, v)
    )
    assert torch.autograd.gradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, mask), (q, k, v)
    )


def test_dropout_zero_probability_is_exact_and_positive_probability_changes_output():
    torch.manual_seed(5)
    q, k, v = random_qkv(2, tq=4, tk=6)
    base = scaled_dot_product_attention(q, k, v)
    dropped = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert not torch.allclose(base, dropped)
    with pytest.raises(ValueError, match="dropout_p"):
        scaled_dot_product_attention(q, k, v, dropout_p=1.0)


# --- bad input -------------------------------------------------------------------------


def test_bad_inputs_name_the_argument_and_shapes():
    q, k, v = random_qkv(2, tq=3, tk=4, d=5, dv=6)
    with pytest.raises(ValueError, match=r"key has D=4 but query has D=5"):
        scaled_dot_product_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match=r"value has Tk=3 but key has Tk=4"):
        scaled_dot_product_attention(q, k, v[:, :3])
    with pytest.raises(ValueError, match=r"leading \(batch/head\) dims"):
        scaled_dot_product_attention(q, k[:1], v[:1])
    with pytest.raises(ValueError, match=r"query must have shape"):
        scaled_dot_product_attention(q[0, 0], k, v)
    with pytest.raises(ValueError, match=r"mask has shape \(2, 3, 5\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(2, 3, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"mask must be bool .* got dtype torch.int64"):
        scaled_dot_product_attention(q, k, v, torch.ones(2, 3, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="share a dtype"):
        scaled_dot_product_attention(q, k.double(), v)


@pytest.mark.parametrize("heads", [None, 2])
def test_a_key_padding_mask_without_query_axes_is_refused_with_the_fix(heads):
    q, k, v = random_qkv(2, tq=3, tk=4, d=5, dv=6)  # B=2 != Tq=3: broadcasting fails
    if heads:
        q, k, v = (x[:, None].expand(2, heads, *x.shape[1:]) for x in (q, k, v))
    mask = padding_mask([4, 2])  # (B, Tk)
    fix = "mask[:, None, :]" if heads is None else "mask[:, None, None, :]"
    with pytest.raises(ValueError, match=re.escape(f"applies to every query as {fix}")):
        scaled_dot_product_attention(q, k, v, mask)
    fixed = mask[:, None, :] if heads is None else mask[:, None, None, :]
    context = scaled_dot_product_attention(q, k, v, fixed)
    assert torch.equal(
        context[1], scaled_dot_product_attention(q[1], k[1, ..., :2, :], v[1, ..., :2, :])
    )


@pytest.mark.parametrize("return_weights", [False, True])
def test_a_scale_that_is_not_a_finite_number_is_refused_by_name(return_weights):
    q, k, v = random_qkv(2, tq=3, tk=4)
    for bad in (math.nan, math.inf, -math.inf):  # every weight would be NaN
        with pytest.raises(ValueError, match=rf"scale must be a finite number, got {bad}"):
            scaled_dot_product_attention(q, k, v, scale=bad, return_weights=return_weights)
    with pytest.raises(TypeError, match="scale must be a real number or None, got 'a'"):
        scaled_dot_product_attention(q, k, v, scale="a", return_weights=return_weights)


@pytest.mark.parametrize("return_weights", [False, True])
@pytest.mark.parametrize(
    ("bad", "shown"), [(math.nan, "nan"), (math.inf, "inf"), (1e39, "1e\\+39")]
)
def test_float_mask_with_nan_or_plus_inf_is_refused_naming_the_entry(return_weights, bad, shown):
    # the classic slip (~keep).float() * -inf puts 0 * -inf = NaN at every allowed key,
    # and +inf (or a float64 value beyond float32's range) cannot be added to a score:
    # both used to make whole rows NaN without a word
    q, k, v = random_qkv(2, tq=3, tk=4)
    mask = torch.zeros(2, 3, 4, dtype=torch.float64)
    mask[1, 2, 3] = bad
    with pytest.raises(ValueError, match=rf"mask has {shown} at \(1, 2, 3\)"):
        scaled_dot_product_attention(q, k, v, mask, return_weights=return_weights)


@pytest.mark.parametrize("return_weights", [False, True])
def test_a_float_mask_of_zeros_and_ones_is_refused_not_added_to_the_scores(return_weights):
    # torch.tril(torch.ones(T, T)), a tutorial's causal mask (1 = may attend), used to be
    # added to the scores as a bias of +1: every query attended to future keys
    q, k, v = random_qkv(2, tq=4, tk=4)
    ones = torch.tril(torch.ones(4, 4))
    with pytest.raises(ValueError, match=r"mask holds only 0.0 and 1.0.*pass mask.bool\(\)"):
        scaled_dot_product_attention(q, k, v, ones, return_weights=return_weights)
    out = scaled_dot_product_attention(q, k, v, ones.bool(), return_weights=return_weights)
    causal = scaled_dot_product_attention(q, k, v, is_causal=True, return_weights=return_weights)
    torch.testing.assert_close(out, causal)


def test_float_masks_of_other_numbers_are_still_additive_biases():
    q, k, v = random_qkv(1, tq=2, tk=3)
    for bias in (torch.ones(2, 3), torch.zeros(2, 3), torch.tensor([[0.0, 1.0, 0.5]] * 2)):
        _, weights = scaled_dot_product_attention(q, k, v, bias, return_weights=True)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias
        torch.testing.assert_close(weights, torch.softmax(scores, dim=-1))


# --- mask builders ---------------------------------------------------------------------


def test_padding_mask_marks_real_tokens():
    mask = padding_mask(torch.tensor([3, 1, 0]), max_len=4)
    expected = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(mask, expected)
    assert padding_mask([2, 5]).shape == (2, 5)


def test_padding_mask_rejects_bad_lengths():
    with pytest.raises(ValueError, match="greater than max_len=2"):
        padding_mask([3], max_len=2)
    with pytest.raises(ValueError, match=">= 0"):
        padding_mask([-1, 2])
    with pytest.raises(ValueError, match="1-D"):
        padding_mask([[1, 2]])
    with pytest.raises(TypeError, match="integers"):
        padding_mask([1.5])
    with pytest.raises(ValueError, match="max_len must be >= 0, got -1"):
        padding_mask([0], max_len=-1)
    with pytest.raises(TypeError, match="max_len must be an int, got 2.5"):
        padding_mask([1], max_len=2.5)
    with pytest.raises(TypeError, match="max_len must be an int, got '2'"):
        padding_mask([1], max_len="2")
    assert padding_mask([1], max_len=np.int64(2)).tolist() == [[True, False]]


UNSIGNED_LENGTHS = {
    "numpy uint16": np.array([3, 1], dtype=np.uint16),  # a token store's lengths
    "numpy uint32": np.array([3, 1], dtype=np.uint32),
    "numpy uint64": np.array([3, 1], dtype=np.uint64),
    "torch uint32": torch.tensor([3, 1], dtype=torch.uint32),
}


@pytest.mark.parametrize("case", list(UNSIGNED_LENGTHS))
def test_padding_mask_takes_unsigned_lengths(case):
    lengths = UNSIGNED_LENGTHS[case]  # torch has no min/max for these on the CPU
    expected = [[True, True, True], [True, False, False]]
    assert padding_mask(lengths).tolist() == expected
    assert padding_mask(lengths, max_len=4).tolist() == [row + [False] for row in expected]
    with pytest.raises(ValueError, match="greater than max_len=2"):
        padding_mask(lengths, max_len=2)


def test_padding_mask_of_an_empty_batch_is_empty():
    assert padding_mask([]).shape == (0, 0)
    assert padding_mask([], max_len=3).shape == (0, 3)
    assert padding_mask([]).dtype == torch.bool


def test_causal_mask_square_and_rectangular():
    assert torch.equal(causal_mask(3), torch.ones(3, 3, dtype=torch.bool).tril())
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]
    assert causal_mask(3, 1).tolist() == [[False], [False], [True]]
    with pytest.raises(ValueError, match="tq >= 0"):
        causal_mask(-1)
    with pytest.raises(TypeError, match="causal_mask needs int sizes, got tq=2.0, tk=2.0"):
        causal_mask(2.0)
    with pytest.raises(TypeError, match="causal_mask needs int sizes, got tq='3', tk='3'"):
        causal_mask("3")  # a size read from a file or argv, not yet an int
    assert causal_mask(np.int64(2), torch.tensor(3)).shape == (2, 3)  # integers of any kind


def test_combine_and_invert_masks():
    pad = padding_mask([2, 3], max_len=3)[:, None, :]  # (2, 1, 3)
    combined = combine_masks(pad, None, causal_mask(3))
    assert combined.shape == (2, 3, 3)
    assert combined[0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    assert combine_masks(None, None) is None
    with pytest.raises(ValueError, match="do not broadcast"):
        combine_masks(torch.ones(2, 3, dtype=torch.bool), torch.ones(4, dtype=torch.bool))
    ignore = torch.tensor([False, True])
    assert invert_mask(ignore).tolist() == [True, False]
    additive = torch.tensor([0.0, -math.inf])
    assert invert_mask(additive) is additive


def test_resolve_mask_leaves_causal_to_the_fused_kernel_only_when_alone_and_square():
    alone = resolve_mask(None, query=torch.empty(3, 4), tk=3, is_causal=True)
    assert alone.is_causal and alone.allowed is None and alone.row_has_key is None
    for tq, fused in ((4, True), (3, False)):
        merged = resolve_mask(None, query=torch.empty(tq, 4), tk=3, is_causal=True, fused=fused)
        assert not merged.is_causal
        torch.testing.assert_close(merged.allowed, causal_mask(tq, 3))
    tall = resolve_mask(None, query=torch.empty(4, 4), tk=3, is_causal=True)
    assert tall.row_has_key[:, 0].tolist() == [False, True, True, True]
    # bottom-right aligned, one query sees every key: nothing left to mask (or to zero)
    step = resolve_mask(None, query=torch.empty(1, 4), tk=5, is_causal=True, fused=False)
    assert not step.is_causal and step.allowed is None and step.row_has_key is None
    torch.testing.assert_close(causal_mask(1, 5), torch.ones(1, 5, dtype=torch.bool))


def test_resolve_mask_combines_bool_and_float_masks_in_one_place():
    keep = torch.tensor([[True, True, False]])  # (1, Tk): key padding
    bias = torch.tensor([[0.5, -math.inf, 1.0], [-math.inf, -math.inf, 2.0]])  # (Tq, Tk)
    r = resolve_mask(keep, bias, query=torch.empty(2, 4, dtype=torch.float16), tk=3)
    assert r.allowed.tolist() == [[True, False, False], [False, False, False]]
    assert r.bias.dtype == torch.float16 and r.bias.tolist() == [[0.5, 0, 1], [0, 0, 2]]
    assert r.row_has_key[:, 0].tolist() == [True, False]
    empty = resolve_mask(None, query=torch.empty(2, 4), tk=0)
    assert empty.row_has_key.shape == (2, 1) and not empty.row_has_key.any()
    with pytest.raises(TypeError, match="mask must be bool"):
        resolve_mask(torch.ones(2, 3, dtype=torch.long), query=torch.empty(2, 4), tk=3)


@pytest.mark.parametrize("return_weights", [False, True])
def test_zero_width_queries_and_keys_give_uniform_weights_as_pytorch(return_weights):
    # D = 0: every score is 0, so each query averages the values (no 1/sqrt(0))
    query, key = torch.zeros(2, 0), torch.zeros(3, 0)
    value = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 9.0]])
    out = scaled_dot_product_attention(query, key, value, return_weights=return_weights)
    out = out[0] if return_weights else out
    torch.testing.assert_close(out, torch.tensor([[3.0, 5.0], [3.0, 5.0]]))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(query, key, value))
    assert ScaledDotScore()(query[None], key[None]).tolist() == [[[0.0] * 3] * 2]


def test_bf16_weights_on_the_meta_device_have_their_shapes():
    # reduced-precision scores ask autocast about the device, which knows no "meta"
    q = torch.empty(2, 3, 8, device="meta", dtype=torch.bfloat16)
    k = torch.empty(2, 5, 8, device="meta", dtype=torch.bfloat16)
    output, weights = scaled_dot_product_attention(q, k, k, return_weights=True)
    assert output.shape == (2, 3, 8) and weights.shape == (2, 3, 5)
    assert weights.dtype == torch.bfloat16


# "meta" stands in for a GPU: a tensor there and one on the CPU do not meet in a product
@pytest.mark.parametrize("return_weights", [False, True], ids=["fused", "weights"])
@pytest.mark.parametrize("moved", ["key", "value", "mask"])
def test_sdpa_names_an_argument_on_another_device_than_the_query(moved, return_weights):
    args = dict(
        query=torch.randn(2, 3, 4),
        key=torch.randn(2, 5, 4),
        value=torch.randn(2, 5, 4),
        mask=padding_mask([5, 2])[:, None, :],  # built on the CPU, as by default
    )
    args[moved] = args[moved].to("meta")
    with pytest.raises(ValueError, match=f"^{moved} is on meta, query on cpu: pass {moved}.to"):
        scaled_dot_product_attention(**args, return_weights=return_weights)


def test_sdpa_names_a_cpu_mask_with_queries_elsewhere():
    query = torch.randn(2, 3, 4, device="meta")
    with pytest.raises(ValueError, match=r"^mask is on cpu, query on meta: pass mask.to\('meta'\)"):
        scaled_dot_product_attention(query, query, query, causal_mask(3))


def test_masked_softmax_names_a_mask_on_another_device():
    mask = torch.ones(2, 3, dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match="^mask is on meta, scores on cpu"):
        masked_softmax(torch.randn(2, 3), mask)


def test_combine_masks_still_refuses_masks_that_do_not_broadcast():
    with pytest.raises(ValueError, match=r"masks of shapes \(2, 3\), \(4,\) do not broadcast"):
        combine_masks(torch.ones(2, 3, dtype=torch.bool), None, torch.ones(4, dtype=torch.bool))
    one = torch.ones(2, 1, 3, dtype=torch.bool)
    assert combine_masks(None, one) is one


def test_the_weights_paths_run_under_torch_func_vmap():
    # masked_softmax read a value on the host (are some rows all -inf?) and the modules'
    # mask checks did too: under vmap each stopped with "data-dependent control flow".
    torch.manual_seed(0)
    x = torch.randn(3, 5, 8)
    keep = torch.rand(3, 5) > 0.3
    keep[0] = False  # a sentence with no key: zero weights, as outside vmap
    scores = x.clone()
    scores[1, 2] = -math.inf  # a row of -inf scores only
    torch.testing.assert_close(torch.func.vmap(masked_softmax)(scores), masked_softmax(scores))
    layer = Attention(make_score("additive", 8))

    def attend(q, k):
        return layer(q[None], q[None], mask=k[None])[1][0]

    torch.testing.assert_close(torch.func.vmap(attend)(x, keep), layer(x, x, mask=keep)[1])
    mha = MultiHeadAttention(8, 2)

    def heads(q, k, bias):
        return mha(q[None], key_padding_mask=k[None], attn_mask=bias, need_weights=True)[1][0]

    bias = torch.randn(3, 5, 5)
    expected = [
        mha(x[i, None], key_padding_mask=keep[i, None], attn_mask=bias[i], need_weights=True)[1][0]
        for i in range(3)
    ]
    got = torch.func.vmap(heads)(x, keep, bias)
    torch.testing.assert_close(got, torch.stack(expected))
    assert torch.all(got[0] == 0) and torch.allclose(got[1:].sum(-1), torch.ones(2, 5))
