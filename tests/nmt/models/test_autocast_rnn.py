"""run_rnn (nmt/models/rnn/autocast_rnn.py): GRU/LSTM over a padded batch with lengths,
in bf16 under autocast, in the weights' dtype outside it."""

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnkit.nmt.models.rnn.autocast_rnn import _composite_lstm, run_rnn

CLOSE = 3e-2  # relative norm: bf16 recurrences against float32
LENGTHS = torch.tensor([7, 3, 5, 1, 6])


def setup(kind, dtype=torch.float32):
    torch.manual_seed(0)
    rnn = getattr(torch.nn, kind)(6, 8, num_layers=2, batch_first=True, bidirectional=True)
    rnn = rnn.to(dtype)
    x = torch.randn(5, 7, 6, dtype=dtype)
    h = torch.randn(4, 5, 8, dtype=dtype)
    state = (h, torch.randn(4, 5, 8, dtype=dtype)) if kind == "LSTM" else h
    return rnn, x, state


def module_reference(rnn, x, state, lengths):
    """The module itself over a packed sequence, padded back with zeros."""
    if lengths is None:
        return rnn(x, state)
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, final = rnn(packed, state)
    return pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0], final


def flat(outputs):
    out, final = outputs
    finals = final if isinstance(final, tuple) else (final,)
    return torch.cat([out.reshape(-1), *(f.reshape(-1) for f in finals)]).float()


def grads(rnn, outputs):
    rnn.zero_grad()
    (flat(outputs) ** 2).sum().backward()
    return torch.cat([p.grad.reshape(-1) for p in rnn.parameters()])


@pytest.mark.parametrize("kind", ["GRU", "LSTM"])
@pytest.mark.parametrize("lengths", [None, LENGTHS], ids=["full", "lengths"])
def test_under_bf16_autocast_the_recurrence_runs_in_bf16_with_float32_gradients(kind, lengths):
    rnn, x, state = setup(kind)
    want = module_reference(rnn, x, state, lengths)
    want_grads = grads(rnn, want)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = run_rnn(rnn, x, state, lengths)
    assert got[0].dtype == torch.bfloat16
    assert (flat(got) - flat(want)).norm() <= CLOSE * flat(want).norm()
    got_grads = grads(rnn, got)
    assert all(p.grad.dtype == torch.float32 for p in rnn.parameters())
    assert (got_grads - want_grads).norm() <= CLOSE * want_grads.norm()


def test_outside_autocast_an_lstm_is_the_module_itself():
    rnn, x, state = setup("LSTM")
    out, (h, c) = run_rnn(rnn, x, state, LENGTHS)
    want_out, (want_h, want_c) = module_reference(rnn, x, state, LENGTHS)
    assert torch.equal(out, want_out) and torch.equal(h, want_h) and torch.equal(c, want_c)


@pytest.mark.parametrize("lengths", [None, LENGTHS], ids=["full", "lengths"])
def test_outside_autocast_a_gru_computes_what_the_module_computes_gradients_too(lengths):
    # run_rnn's GRU is attnkit's own (gru_layer.py); in float64 it must agree with
    # nn.GRU over a packed sequence to rounding, in every output and gradient
    rnn, x, state = setup("GRU", torch.float64)
    x.requires_grad_(True)
    state.requires_grad_(True)
    inputs = [x, state, *rnn.parameters()]
    want = module_reference(rnn, x, state, lengths)
    got = run_rnn(rnn, x, state, lengths)
    for have, expected in zip(got, want, strict=True):
        torch.testing.assert_close(have, expected, rtol=1e-12, atol=1e-12)
    probe = [torch.randn_like(t) for t in want]

    def gradients(outputs):
        loss = sum((t * p).sum() for t, p in zip(outputs, probe, strict=True))
        return torch.autograd.grad(loss, inputs)

    want_grads, got_grads = gradients(want), gradients(got)
    for have, expected in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(have, expected, rtol=1e-10, atol=1e-12)


def test_the_lstm_for_torch_func_equals_the_module_over_a_packed_sequence():
    # What an LSTM runs under torch.func transforms and forward-mode AD (which packed
    # sequences do not support): the same outputs and final states, layers stacked,
    # each direction of each sentence over its own length.
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True).double()
    x = torch.randn(3, 5, 3, dtype=torch.float64)
    state = tuple(torch.randn(4, 3, 4, dtype=torch.float64) for _ in range(2))
    lengths = torch.tensor([5, 2, 4])
    want_out, (want_h, want_c) = run_rnn(lstm, x, state, lengths)
    params = dict(lstm.named_parameters())
    got_out, (got_h, got_c) = _composite_lstm(lstm, params, x, state, lengths)
    for got, want in ((got_out, want_out), (got_h, want_h), (got_c, want_c)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
