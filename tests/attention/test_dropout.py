"""attnkit's dropout (attention/dropout.py): nn.Dropout's distribution, a cheaper mask."""

import math

import pytest
import torch

from attnkit import Attention, MultiHeadAttention, ScaledDotScore, scaled_dot_product_attention
from attnkit.attention.dropout import Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_each_element_is_dropped_with_probability_p_and_the_rest_scaled(p):
    torch.manual_seed(0)
    x = torch.ones(1000, 1003)  # not a multiple of 4: the last 64-bit word is cut
    y = dropout(x, p)
    kept = y != 0
    share = kept.float().mean().item()
    sigma = math.sqrt(p * (1 - p) / x.numel())
    assert abs(share - (1 - p)) < 5 * sigma  # a binomial share, 5 standard deviations
    dropped = round(p * 65536)
    assert torch.all(y[kept] == 65536 / (65536 - dropped))  # E[y] = x exactly
    for lane in range(4):  # each 16-bit lane of the 64-bit words is uniform
        lane_share = kept.view(-1)[lane:1_000_000:4].float().mean().item()
        assert abs(lane_share - (1 - p)) < 5 * math.sqrt(p * (1 - p) / 250_000)


def test_the_mask_follows_the_seed_and_the_gradient_the_mask():
    x = torch.randn(7, 9, dtype=torch.bfloat16, requires_grad=True)
    torch.manual_seed(3)
    y = dropout(x, 0.2)
    torch.manual_seed(3)
    assert torch.equal(y, dropout(x, 0.2))
    assert y.dtype == torch.bfloat16
    y.sum().backward()
    assert torch.equal(x.grad, torch.where(y != 0, 65536 / (65536 - 13107), 0.0).bfloat16())


def test_the_module_drops_in_training_mode_only():
    layer = Dropout(0.5)
    x = torch.ones(64, 64)
    assert (layer(x) == 0).any()
    layer.eval()
    assert layer(x) is x
    assert Dropout(0.0)(x) is x
    assert repr(layer) == "Dropout(p=0.5)"


@pytest.mark.parametrize("p", [-0.1, 1.0])
def test_a_probability_outside_0_1_is_named(p):
    with pytest.raises(ValueError, match=r"dropout probability must be in \[0, 1\)"):
        Dropout(p)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_one_pass_mask_rounds_as_the_two_products_did(dtype):
    # The mask and scale are applied by one fused op forward and backward; the
    # result must be bit for bit ``x * keep * scale`` (keep 0/1: one rounding).
    x = torch.randn(33, 65, dtype=dtype, requires_grad=True)
    grad = torch.randn(33, 65, dtype=dtype)
    torch.manual_seed(4)
    y = dropout(x, 0.3)
    y.backward(grad)
    torch.manual_seed(4)
    words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64).random_(-(2**63), 2**63 - 1)
    lanes = words.view(torch.int16)[: x.numel()].view(x.shape)
    dropped = round(0.3 * 65536)
    keep = (lanes >= dropped - 32768).to(dtype)
    scale = 65536 / (65536 - dropped)
    assert torch.equal(y, x.detach() * keep * scale)
    assert torch.equal(x.grad, grad * scale * keep)


def test_a_rate_that_rounds_to_zero_returns_the_input():
    x = torch.randn(4, 5)
    assert dropout(x, 1e-6) is x


def test_a_rate_just_below_one_keeps_one_lane_value_in_65536():
    torch.manual_seed(0)
    x = torch.ones(4, 65536)
    y = dropout(x, 0.999995)  # rounds to 65536 / 65536: once an int16 overflow
    assert torch.all((y == 0) | (y == 65536.0))
    assert 0 < int((y != 0).sum()) < 20  # about 4 of 262,144 kept


RATE_CALLS = {
    "Attention": ("dropout", lambda p: Attention(ScaledDotScore(), dropout=p)),
    "MultiHeadAttention": ("dropout", lambda p: MultiHeadAttention(8, 2, dropout=p)),
    "sdpa": (
        "dropout_p",
        lambda p: scaled_dot_product_attention(*[torch.ones(1, 2, 2)] * 3, dropout_p=p),
    ),
    "Dropout": ("dropout probability", lambda p: Dropout(p)),
}


@pytest.mark.parametrize("case", list(RATE_CALLS))
def test_a_rate_that_is_not_a_number_is_a_type_error_naming_it(case):
    # a str from a command line met '0.0 <= p': "'<=' not supported between ... 'str'"
    name, call = RATE_CALLS[case]
    with pytest.raises(TypeError, match=rf"{name} must be a number in \[0, 1\), got '0.1'"):
        call("0.1")
    with pytest.raises(TypeError, match=rf"{name} must be a number in \[0, 1\), got None"):
        call(None)
    with pytest.raises(ValueError, match=rf"{name} must be in \[0, 1\), got 1.0"):
        call(1.0)
    call(0.25)  # a number in range is taken


def test_dropout_runs_under_torch_func_grad_and_vmap():
    # Its autograd Function had no setup_context: torch.func.grad of any attnkit model in
    # training mode stopped with a RuntimeError, and vmap could not batch its in-place draw.
    x = torch.randn(6, 5)
    torch.manual_seed(0)
    g = torch.func.grad(lambda t: dropout(t, 0.5).sum())(x)
    assert set(g.unique().tolist()) == {0.0, 2.0}  # the mask, scaled by 1 / (1 - p)
    y = torch.func.vmap(lambda t: dropout(t, 0.5), randomness="different")(torch.ones(6, 5))
    assert set(y.unique().tolist()) == {0.0, 2.0}
    layer = MultiHeadAttention(8, 2, dropout=0.5).train()
    params = {name: p.detach() for name, p in layer.named_parameters()}
    query = torch.randn(2, 3, 8)

    def loss(p):
        return torch.func.functional_call(layer, p, (query,))[0].square().sum()

    grads = torch.func.grad(loss)(params)
    assert grads["q_proj.weight"].shape == (8, 8) and grads["out_proj.bias"].abs().sum() > 0


def test_dropout_has_a_forward_mode_derivative():
    # its autograd Function had no jvp: forward-mode AD (torch.autograd.forward_ad, jvp
    # products) through a module in training mode raised NotImplementedError
    x = torch.randn(40, dtype=torch.float64, requires_grad=True)

    def dropped(t):
        torch.manual_seed(0)
        return dropout(t, 0.5)

    assert torch.autograd.gradcheck(dropped, (x,), check_forward_ad=True)
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(x.detach(), torch.ones(40, dtype=torch.float64))
        tangent = torch.autograd.forward_ad.unpack_dual(dropped(dual)).tangent
    assert torch.equal(tangent, torch.where(dropped(x.detach()) != 0, 2.0, 0.0).double())
