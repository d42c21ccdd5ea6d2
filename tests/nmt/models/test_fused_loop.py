"""The fused Bahdanau/GRU loop computes what the module-by-module loop computes, gradients too."""

from __future__ import annotations

import pytest
import torch

from attnkit.attention import masked_softmax
from attnkit.nmt.models.rnn import RNNConfig, RNNTranslator
from attnkit.nmt.models.rnn.decoder import AttentionDecoder
from attnkit.nmt.models.rnn.fused_loop import bahdanau_gru_loop

B, T, S, E, D, DV, A = 3, 5, 4, 6, 7, 8, 9


def reference_loop(embedded, s0, prepared, values, mask, w_q, v, gru):
    """Bahdanau et al. 2015 eqs. 4-6 step by step, with autograd doing the backward."""
    s, outs, contexts, weights = s0, [], [], []
    for t in range(embedded.shape[1]):
        scores = torch.tanh((s @ w_q.t())[:, None] + prepared) @ v
        a = masked_softmax(scores, mask)
        c = torch.bmm(a[:, None], values)[:, 0]
        s = gru(torch.cat([embedded[:, t], c], -1)[:, None], s[None])[1][0]
        outs.append(s), contexts.append(c), weights.append(a)
    return tuple(torch.stack(x, 1) for x in (outs, contexts, weights))


def test_outputs_and_every_gradient_match_autograd_in_float64():
    torch.manual_seed(0)
    gru = torch.nn.GRU(E + DV, D, batch_first=True).double()
    inputs = [torch.randn(*shape, dtype=torch.float64, requires_grad=True)
              for shape in ((B, T, E), (B, D), (B, S, A), (B, S, DV), (A, D), (A,))]  # fmt: skip
    embedded, s0, prepared, values, w_q, v = inputs
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    params = [*inputs, *gru.parameters()]

    expected = reference_loop(embedded, s0, prepared, values, mask, w_q, v, gru)
    got = bahdanau_gru_loop(embedded, s0, prepared, values, mask, w_q, v, gru)
    for want, have in zip(expected, got, strict=True):
        torch.testing.assert_close(have, want, rtol=1e-12, atol=1e-12)
    assert torch.equal(got[2][2], torch.zeros(T, S))  # the fully masked row: no NaN, zero weights

    # upstream gradients on all three outputs, the attention weights included
    upstream = [torch.randn_like(x) for x in expected]
    want = torch.autograd.grad(expected, params, upstream)
    have = torch.autograd.grad(got, params, upstream)
    for name, w, h in zip(["embedded", "s0", "prepared", "values", "w_q", "v", "w_ih", "w_hh",
                           "b_ih", "b_hh"], want, have, strict=True):  # fmt: skip
        torch.testing.assert_close(h, w, rtol=1e-10, atol=1e-12, msg=name)


def test_the_loop_saves_one_copy_of_its_embedded_inputs_for_backward():
    from count_helpers import saved_shapes

    # the embedded targets (B, T, E) are saved once, not also as the time-major copy
    gru = torch.nn.GRU(E + DV, D, batch_first=True).double()
    shapes = ((B, T, E), (B, D), (B, S, A), (B, S, DV), (A, D), (A,))
    embedded, s0, prepared, values, w_q, v = (
        torch.randn(*shape, dtype=torch.float64, requires_grad=True) for shape in shapes
    )
    mask = torch.ones(B, S, dtype=torch.bool)
    saved = saved_shapes(
        lambda: bahdanau_gru_loop(embedded, s0, prepared, values, mask, w_q, v, gru)
    )
    copies = [shape for shape in saved if sorted(shape) == sorted((B, T, E))]
    assert len(copies) == 1, copies


def test_second_derivatives_batched_gradients_and_forward_mode_with_a_masked_row():
    # The hand-written backward writes into buffers (out=): differentiating it again
    # (create_graph, gradgradcheck) stopped with "mul(): functions with out=...
    # arguments don't support automatic differentiation", vmapping it
    # (is_grads_batched) with "Batching rule not implemented for aten::mul.out", and
    # forward-mode AD with "You must implement the jvp function".
    torch.manual_seed(0)
    b, t, s, e, d, dv, a = 2, 3, 3, 2, 2, 3, 2
    gru = torch.nn.GRU(e + dv, d, batch_first=True).double()
    inputs = [torch.randn(*shape, dtype=torch.float64, requires_grad=True)
              for shape in ((b, t, e), (b, d), (b, s, a), (b, s, dv), (a, d), (a,))]  # fmt: skip
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]], dtype=torch.bool)

    def loop(*args):
        return bahdanau_gru_loop(*args[:4], mask, *args[4:], gru)

    assert torch.autograd.gradcheck(loop, inputs, check_forward_ad=True, check_batched_grad=True)
    assert torch.autograd.gradgradcheck(loop, inputs)
    values = inputs[3]
    (g_values,) = torch.autograd.grad(loop(*inputs)[1].sum(), values, create_graph=True)
    assert bool((g_values[~mask] == 0).all())  # masked keys: exactly 0
    (gg,) = torch.autograd.grad(g_values.square().sum(), inputs[0])
    assert gg.abs().sum() > 0  # the gradient itself depends on the inputs


@pytest.mark.parametrize("score", ["additive", "concat"])
def test_translator_takes_the_fused_path_with_the_same_loss_and_gradients(score, monkeypatch):
    torch.manual_seed(1)
    config = RNNConfig(embed_dim=8, hidden_size=6, dropout=0.0, score=score)
    model = RNNTranslator(config, 13, 11).double()
    src = torch.randint(4, 13, (4, 7))
    lengths = torch.tensor([7, 5, 3, 1])
    tgt = torch.randint(4, 11, (4, 6))

    def loss_and_grads():
        model.zero_grad()
        logits, weights = model(src, lengths, tgt)
        loss = logits.logsumexp(-1).mean() + (weights * weights).sum()
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    calls = []
    fused = AttentionDecoder._fusable
    monkeypatch.setattr(
        AttentionDecoder, "_fusable", lambda *a: calls.append(fused(*a)) or calls[-1]
    )
    fused_loss, fused_grads = loss_and_grads()
    assert calls == [True], "the Bahdanau GRU decoder did not take the fused loop"
    monkeypatch.setattr(AttentionDecoder, "_fusable", lambda *a: False)
    loop_loss, loop_grads = loss_and_grads()

    torch.testing.assert_close(fused_loss, loop_loss, rtol=1e-12, atol=1e-12)
    for name, grad in loop_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-9, atol=1e-12, msg=name)


@pytest.mark.parametrize(
    "settings",
    [
        dict(rnn="lstm"),
        dict(decoder_layers=2),
        dict(score="general"),
        dict(query_timing="current", input_feeding=True),
    ],
)
def test_other_decoders_keep_the_module_loop(settings):
    model = RNNTranslator(RNNConfig(embed_dim=8, hidden_size=6, **settings), 13, 11)
    assert not model.decoder._fusable(torch.zeros(1, 1, 8))


def test_under_bf16_autocast_the_loop_runs_in_float32_on_the_bf16_inputs():
    # autocast hands the loop bf16 keys and encoder states (from its linear layers)
    # and fp32 GRU weights: the loop casts them up and runs in float32, autocast off.
    torch.manual_seed(2)
    gru = torch.nn.GRU(E + DV, D, batch_first=True)
    low = [torch.randn(*shape).bfloat16().requires_grad_() for shape in ((B, S, A), (B, S, DV))]
    rest = [torch.randn(*shape) for shape in ((B, T, E), (B, D), (A, D), (A,))]
    embedded, s0, w_q, v = rest
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = bahdanau_gru_loop(embedded, s0, *low, mask, w_q, v, gru)
    expected = bahdanau_gru_loop(embedded, s0, *(x.float() for x in low), mask, w_q, v, gru)
    for want, have in zip(expected, got, strict=True):
        assert have.dtype == torch.float32
        assert torch.equal(have, want)
    assert torch.equal(got[2][2], torch.zeros(T, S))  # the fully masked row stays exactly 0
    sum(x.sum() for x in got).backward()
    assert [x.grad.dtype for x in low] == [torch.bfloat16, torch.bfloat16]
    assert gru.weight_ih_l0.grad.dtype == torch.float32


def test_translator_under_bf16_autocast_takes_the_fused_path_close_to_float32(monkeypatch):
    torch.manual_seed(3)
    model = RNNTranslator(RNNConfig(embed_dim=8, hidden_size=6, dropout=0.0), 13, 11)
    src, lengths = torch.randint(4, 13, (4, 7)), torch.tensor([7, 5, 3, 1])
    tgt = torch.randint(4, 11, (4, 6))
    calls = []
    fused = AttentionDecoder._fusable
    monkeypatch.setattr(
        AttentionDecoder, "_fusable", lambda *a: calls.append(fused(*a)) or calls[-1]
    )
    reference, _ = model(src, lengths, tgt)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, weights = model(src, lengths, tgt)
    assert calls == [True, True]
    assert weights.dtype == torch.float32  # the loop's softmax is float32
    torch.testing.assert_close(logits.float(), reference, atol=2e-2, rtol=2e-2)
