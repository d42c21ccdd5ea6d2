"""Attention(score): context and weights, single steps, masks, errors."""

import pytest
import torch

from attnkit import SCORES, Attention, ScaledDotScore, padding_mask
from score_helpers import WIDTHS, build_score


def attention(name):
    dq, dk = WIDTHS[name]
    return Attention(build_score(name, dq, dk)), dq, dk


def test_worked_example_through_the_layer():
    attend = Attention(ScaledDotScore())
    keys = torch.eye(3)[None]  # (B=1, Tk=3, D=3)
    context, weights = attend(torch.tensor([[2.0, 0.0, 1.0]]), keys)  # a (B, D) step
    assert weights.shape == (1, 3) and context.shape == (1, 3)
    assert weights[0].tolist() == pytest.approx([0.533, 0.168, 0.299], abs=5e-4)
    assert context[0].tolist() == pytest.approx([0.533, 0.168, 0.299], abs=5e-4)


@pytest.mark.parametrize("name", list(SCORES))
def test_step_query_equals_the_matching_row_of_all_steps(name):
    torch.manual_seed(0)
    attend, dq, dk = attention(name)
    query, keys = torch.randn(2, 3, dq), torch.randn(2, 5, dk)
    values = torch.randn(2, 5, 7)
    mask = padding_mask([5, 3])  # (B, Tk)
    context, weights = attend(query, keys, values, mask[:, None, :])
    assert context.shape == (2, 3, 7) and weights.shape == (2, 3, 5)
    for i in range(3):
        c_i, w_i = attend(query[:, i], keys, values, mask)
        torch.testing.assert_close(c_i, context[:, i])
        torch.testing.assert_close(w_i, weights[:, i])
    assert torch.all(weights[1, :, 3:] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))


@pytest.mark.parametrize("name", list(SCORES))
def test_fully_masked_row_gives_zero_context_and_finite_gradients(name):
    torch.manual_seed(1)
    attend, dq, dk = attention(name)
    query = torch.randn(2, 3, dq, requires_grad=True)
    keys = torch.randn(2, 4, dk, requires_grad=True)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[0, 1] = False
    context, weights = attend(query, keys, mask=mask)
    assert torch.all(weights[0, 1] == 0) and torch.all(context[0, 1] == 0)
    context.sum().backward()
    assert torch.isfinite(query.grad).all() and torch.isfinite(keys.grad).all()
    for p in attend.parameters():
        assert torch.isfinite(p.grad).all()


def test_values_default_to_the_keys():
    torch.manual_seed(2)
    attend, dq, _ = attention("dot")
    query, keys = torch.randn(2, 3, dq), torch.randn(2, 4, dq)
    c_default, _ = attend(query, keys)
    c_explicit, _ = attend(query, keys, keys)
    torch.testing.assert_close(c_default, c_explicit)


def test_dropout_only_in_training_mode():
    torch.manual_seed(3)
    attend = Attention(ScaledDotScore(), dropout=0.5)
    query, keys = torch.randn(2, 3, 6), torch.randn(2, 8, 6)
    attend.eval()
    torch.testing.assert_close(attend(query, keys)[0], attend(query, keys)[0])
    attend.train()
    assert not torch.allclose(attend(query, keys)[0], attend(query, keys)[0])


def test_layer_errors_name_the_argument_and_shapes():
    attend, dq, dk = attention("general")
    with pytest.raises(
        ValueError, match=r"batch sizes differ: query \(2, 3, 6\), keys \(3, 5, 4\)"
    ):
        attend(torch.randn(2, 3, dq), torch.randn(3, 5, dk))
    with pytest.raises(ValueError, match=r"values has Tk=4 but keys has Tk=5"):
        attend(torch.randn(2, 3, dq), torch.randn(2, 5, dk), torch.randn(2, 4, 3))
    with pytest.raises(ValueError, match=r"keys must be 3-D"):
        attend(torch.randn(2, 3, dq), torch.randn(5, dk))
    with pytest.raises(ValueError, match=r"mask has shape \(2, 4\)"):
        attend(torch.randn(2, dq), torch.randn(2, 5, dk), mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="score must be an attnkit Score"):
        Attention(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="dropout must be in"):
        Attention(ScaledDotScore(), dropout=1.5)


@pytest.mark.parametrize("tq", [1, 2, 5])
def test_a_key_mask_applies_to_any_number_of_queries(tq):
    torch.manual_seed(0)
    attend = Attention(ScaledDotScore())
    query, keys = torch.randn(2, tq, 4), torch.randn(2, 6, 4)
    mask = padding_mask([6, 3])  # (B, Tk), as in the README
    context, weights = attend(query, keys, mask=mask)
    expected_c, expected_w = attend(query, keys, mask=mask[:, None, :])
    assert weights.shape == (2, tq, 6) and torch.equal(weights, expected_w)
    assert torch.equal(context, expected_c)
    assert torch.all(weights[1, :, 3:] == 0)
    assert torch.allclose(weights.sum(-1), torch.ones(2, tq))


def test_a_fully_masked_key_mask_row_gives_zeros_not_nan():
    attend = Attention(ScaledDotScore())
    mask = torch.tensor([[True, True, False], [False, False, False]])  # (B, Tk)
    context, weights = attend(torch.randn(2, 4, 3), torch.randn(2, 3, 3), mask=mask)
    assert torch.equal(weights[1], torch.zeros(4, 3)) and torch.equal(context[1], torch.zeros(4, 3))
    assert not torch.isnan(context).any()


@pytest.mark.parametrize(
    ("args", "kwargs", "named"),
    [
        (([[2.0, 0.0, 1.0]], torch.eye(3)[None]), {}, "query must be a torch.Tensor, got list"),
        ((torch.ones(1, 3), None), {}, "keys must be a torch.Tensor, got NoneType"),
        ((torch.ones(1, 3), torch.eye(3)[None], [[1.0]]), {}, "values must be a torch.Tensor"),
        ((torch.ones(1, 3), torch.eye(3)[None]), {"mask": [[1, 1, 0]]}, "mask must be a bool"),
        ((torch.ones(1, 1, 3), torch.eye(3)[None]), {"mask": [[1, 1, 0]]}, "mask must be a bool"),
    ],
)
def test_an_argument_that_is_not_a_tensor_is_named(args, kwargs, named):
    with pytest.raises(TypeError, match=named):
        Attention(ScaledDotScore())(*args, **kwargs)


def test_a_two_d_mask_of_the_wrong_shape_names_the_key_mask():
    attend = Attention(ScaledDotScore())
    with pytest.raises(ValueError, match=r"a 2-D mask is a key mask \(B, Tk\) = \(2, 3\)"):
        attend(torch.randn(2, 4, 3), torch.randn(2, 3, 3), mask=torch.ones(4, 3, dtype=torch.bool))


def test_values_zeroed_skips_only_work_the_caller_already_did():
    """With values already 0 where no query may look, ``values_zeroed`` gives the same
    context; without it, NaN values behind the mask still cannot reach the context."""
    torch.manual_seed(0)
    attend = Attention(ScaledDotScore())
    mask = torch.tensor([[True, True, False], [True, False, False]])  # (B, Tk)
    query, keys, values = torch.randn(2, 4, 3), torch.randn(2, 3, 3), torch.randn(2, 3, 5)
    zeroed = values.masked_fill(~mask[..., None], 0.0)
    expected, _ = attend(query, keys, zeroed, mask=mask)
    fast, _ = attend(query, keys, zeroed, mask=mask, values_zeroed=True)
    assert torch.equal(fast, expected)
    poisoned, _ = attend(query, keys, values.masked_fill(~mask[..., None], float("nan")), mask=mask)
    assert torch.equal(poisoned, expected)


def test_integer_values_are_refused_not_turned_into_zero_weights():
    attend = Attention(ScaledDotScore())
    query, keys = torch.tensor([[[2.0, 0.0, 1.0]]]), torch.eye(3)[None]
    with pytest.raises(TypeError, match="values must be floating point, got dtype torch.int64"):
        attend(query, keys, torch.ones(1, 3, 2, dtype=torch.long))
    context, weights = attend(query, keys, torch.ones(1, 3, 2))
    torch.testing.assert_close(
        weights, torch.tensor([[[0.5329, 0.1679, 0.2992]]]), atol=1e-4, rtol=0
    )
    torch.testing.assert_close(context, torch.ones(1, 1, 2))


@pytest.mark.parametrize("name", list(SCORES))
def test_the_layer_runs_on_the_meta_device_for_shapes(name):
    # module.to("meta") is how shapes and FLOPs are worked out without memory;
    # autocast knows no "meta" device, so asking it whether it is on must not raise
    layer, dq, dk = attention(name)
    layer = layer.to("meta")
    query, keys = torch.empty(2, 3, dq, device="meta"), torch.empty(2, 4, dk, device="meta")
    mask = padding_mask([4, 2]).to("meta")
    context, weights = layer(query, keys, mask=mask)
    assert context.shape == (2, 3, dk) and weights.shape == (2, 3, 4)
    assert context.device.type == "meta"


# "meta" stands in for a GPU: a tensor there and one on the CPU do not meet in a product
@pytest.mark.parametrize("moved", ["keys", "values", "mask"])
@pytest.mark.parametrize("name", ["dot", "additive"])
def test_an_argument_on_another_device_than_the_query_is_named(moved, name):
    args = dict(keys=torch.randn(2, 5, 6), values=torch.randn(2, 5, 3), mask=padding_mask([5, 2]))
    args[moved] = args[moved].to("meta")
    layer = Attention(build_score(name, 6, 6))
    with pytest.raises(ValueError, match=f"^{moved} is on meta, query on cpu: pass {moved}.to"):
        layer(torch.randn(2, 4, 6), **args)


def test_a_query_on_another_device_than_the_score_parameters_is_named():
    layer = Attention(build_score("general", 6, 6))
    query, keys = torch.randn(2, 4, 6, device="meta"), torch.randn(2, 5, 6, device="meta")
    with pytest.raises(ValueError, match="^query is on meta, score 'general' on cpu"):
        layer(query, keys)


def test_a_mask_check_is_plain_python_not_torch_broadcasting():
    # torch.broadcast_shapes goes through torch._refs and symbolic shapes, some 50-100 us
    # a call; a decoder step checks its mask twice (the layer, then masked_softmax)
    from count_helpers import python_calls

    attend, dq, dk = attention("general")
    query, keys, mask = torch.randn(2, dq), torch.randn(2, 5, dk), padding_mask([5, 3])
    calls = python_calls(lambda: attend(query, keys, mask=mask))
    symbolic = {where: n for where, n in calls.items() if "torch/_refs" in where[0]}
    assert symbolic == {}
    assert sum(calls.values()) < 200  # was 311 with torch.broadcast_shapes


@pytest.mark.parametrize(
    "shape, target",
    [
        ((2, 1, 5), (2, 3, 5)),
        ((5,), (2, 3, 5)),
        ((1, 1, 1), (2, 3, 5)),
        ((), (2, 3, 5)),
        ((2, 3, 5), (2, 3, 5)),
        ((0, 1), (0, 4)),
        ((2, 5), (2, 3, 5)),
        ((3, 5), (2, 3, 5)),
        ((2, 3, 1), (2, 3, 0)),
        ((2, 3, 2), (2, 3, 0)),
        ((1, 2, 3, 5), (2, 3, 5)),
        ((2, 4, 5), (2, 3, 5)),
        ((2, 3, 5), (2, 1, 5)),
    ],
)
def test_the_mask_check_agrees_with_torch_broadcasting(shape, target):
    from attnkit.attention.functional import _check_broadcast
    from attnkit.attention.masks import broadcast_shape

    try:
        expected = tuple(torch.broadcast_shapes(shape, target))
    except RuntimeError:
        expected = None
    assert broadcast_shape(shape, target) == expected
    assert broadcast_shape(target, shape) == expected
    if expected == target:
        _check_broadcast("mask", shape, target)
    else:
        with pytest.raises(ValueError, match=r"mask has shape .* does not broadcast"):
            _check_broadcast("mask", shape, target)


def test_repr_shows_the_dropout_rate_beside_the_score():
    # it showed the score's sizes but not the dropout: Attention(s, 0.1) and Attention(s)
    # printed alike
    text = repr(Attention(ScaledDotScore(), dropout=0.1))
    assert text == "Attention(\n  dropout=0.1\n  (score): ScaledDotScore()\n)"
