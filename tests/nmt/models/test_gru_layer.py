"""gru_layer / run_gru (nmt/models/rnn/gru_layer.py): lengths without packing, layers, dropout."""

import pytest
import torch

from attnkit.nmt.models.rnn.gru_layer import gru_layer, run_gru


def weights(e, d, dtype=torch.float64):
    torch.manual_seed(1)
    return tuple(torch.randn(*shape, dtype=dtype) * 0.3 for shape in
                 ((3 * d, e), (3 * d,), (3 * d, d), (3 * d,)))  # fmt: skip


def test_a_sentence_runs_the_same_alone_and_inside_a_padded_batch_both_directions():
    torch.manual_seed(0)
    batch = torch.randn(3, 6, 4, dtype=torch.float64)
    lengths = torch.tensor([6, 2, 4])
    s0 = torch.randn(3, 5, dtype=torch.float64)
    w = weights(4, 5)
    for reverse in (False, True):
        out, final = gru_layer(batch, s0, w, lengths, reverse)
        for b, n in enumerate(lengths.tolist()):
            alone, alone_final = gru_layer(batch[b : b + 1, :n], s0[b : b + 1], w, None, reverse)
            torch.testing.assert_close(out[b, :n], alone[0], rtol=0, atol=1e-14)
            torch.testing.assert_close(final[b], alone_final[0], rtol=0, atol=1e-14)
            assert torch.all(out[b, n:] == 0)  # nothing past the length


def test_the_layer_saves_one_copy_of_its_inputs_for_backward():
    from count_helpers import saved_shapes

    # the inputs (B, T, E) are saved once (not also as the time-major copy the loop reads)
    x = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    shapes = saved_shapes(
        lambda: gru_layer(x, torch.zeros(2, 4, dtype=torch.float64), weights(3, 4), None)
    )
    assert sum(1 for shape in shapes if sorted(shape) == [2, 3, 5]) == 1, shapes


def test_padding_gets_no_gradient_and_the_kept_state_passes_its_gradient_through():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    s0 = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    out, final = gru_layer(x, s0, weights(3, 4), torch.tensor([5, 2]))
    (out.sum() + final.sum()).backward()
    assert torch.all(x.grad[1, 2:] == 0)
    # the short sentence's final state is its state after 2 steps
    torch.testing.assert_close(final[1], out[1, 1], rtol=0, atol=0)


def test_stacked_layers_drop_out_between_layers_in_training_only():
    torch.manual_seed(0)
    gru = torch.nn.GRU(4, 5, num_layers=2, batch_first=True, dropout=0.5).double()
    params = dict(gru.named_parameters())
    x = torch.randn(3, 6, 4, dtype=torch.float64)
    options = {"num_layers": 2, "dropout_p": 0.5}
    evaluated, _ = run_gru(params, x, None, **options, training=False)
    torch.testing.assert_close(evaluated, gru.eval()(x)[0], rtol=1e-12, atol=1e-12)
    trained, _ = run_gru(params, x, None, **options, training=True)
    assert not torch.allclose(trained, evaluated)


def test_a_length_outside_the_batch_is_named():
    gru = torch.nn.GRU(4, 5, batch_first=True).double()
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    empty = torch.tensor([], dtype=torch.long)
    for lengths in (torch.tensor([3, 0]), torch.tensor([4, 1]), torch.tensor([3]), empty):
        with pytest.raises(ValueError, match=r"lengths must be \(2,\) with each in \[1, 3\]"):
            run_gru(dict(gru.named_parameters()), x, None, lengths)


def _layer_with_lengths(reverse: bool):
    """A float64 GRU layer over 3 sentences of lengths 4, 1, 3, and its inputs to check."""
    torch.manual_seed(0)
    x = torch.randn(3, 4, 2, dtype=torch.float64, requires_grad=True)
    s0 = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    w = tuple(t.requires_grad_() for t in weights(2, 3))
    lengths = torch.tensor([4, 1, 3])

    def layer(x, s0, *w):
        return gru_layer(x, s0, w, lengths, reverse)

    return layer, (x, s0, *w)


@pytest.mark.parametrize("reverse", [False, True])
def test_gradcheck_in_forward_mode_with_lengths(reverse):
    # Its autograd Function had no setup_context nor jvp rule: forward-mode AD stopped
    # with NotImplementedError, and torch.func.grad / jvp with a RuntimeError asking
    # for setup_context.
    layer, inputs = _layer_with_lengths(reverse)
    assert torch.autograd.gradcheck(layer, inputs, check_forward_ad=True)


def test_torch_func_grad_and_jvp_agree_with_backward():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    s0 = torch.randn(2, 4, dtype=torch.float64)
    w = weights(3, 4)
    lengths = torch.tensor([5, 2])

    def loss(w_ih):
        out, final = gru_layer(x, s0, (w_ih, *w[1:]), lengths, True)
        return out.square().sum() + final.sum()

    w_ih = w[0].clone().requires_grad_()
    (want,) = torch.autograd.grad(loss(w_ih), w_ih)
    torch.testing.assert_close(torch.func.grad(loss)(w[0]), want, rtol=1e-12, atol=1e-12)
    tangent = torch.randn_like(w[0])
    _, slope = torch.func.jvp(loss, (w[0],), (tangent,))
    torch.testing.assert_close(slope, (want * tangent).sum(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reverse", [False, True])
def test_second_derivatives_and_batched_gradients_with_lengths(reverse):
    # The hand-written backward writes into buffers (out=): gradgradcheck stopped with
    # "mul(): functions with out=... arguments don't support automatic differentiation",
    # and is_grads_batched (vmap over the backward) with "Batching rule not implemented".
    layer, inputs = _layer_with_lengths(reverse)
    assert torch.autograd.gradcheck(layer, inputs, check_batched_grad=True)
    assert torch.autograd.gradgradcheck(layer, inputs)
