"""run_rnn (nmt/models/rnn/autocast_rnn.py): GRU/LSTM in bf16 under autocast, float32 outside."""

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

from attnkit.nmt.models.rnn.autocast_rnn import run_rnn

CLOSE = 3e-2  # relative norm: bf16 recurrences against float32


def setup(kind, packed):
    torch.manual_seed(0)
    rnn = getattr(torch.nn, kind)(6, 8, num_layers=2, batch_first=True, bidirectional=True)
    x = torch.randn(5, 7, 6)
    inputs = (
        pack_padded_sequence(x, torch.tensor([7, 3, 5, 1, 6]), batch_first=True,
                             enforce_sorted=False)
        if packed else x
    )  # fmt: skip
    h = torch.randn(4, 5, 8)
    state = (h, torch.randn(4, 5, 8)) if kind == "LSTM" else h
    return rnn, inputs, state


def flat(outputs):
    out, final = outputs
    out = out.data if hasattr(out, "batch_sizes") else out
    finals = final if isinstance(final, tuple) else (final,)
    return torch.cat([out.reshape(-1), *(f.reshape(-1) for f in finals)]).float()


def grads(rnn, outputs):
    rnn.zero_grad()
    (flat(outputs) ** 2).sum().backward()
    return torch.cat([p.grad.reshape(-1) for p in rnn.parameters()])


@pytest.mark.parametrize("kind", ["GRU", "LSTM"])
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_under_bf16_autocast_the_recurrence_runs_in_bf16_with_float32_gradients(kind, packed):
    rnn, inputs, state = setup(kind, packed)
    want = rnn(inputs, state)
    want_grads = grads(rnn, want)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = run_rnn(rnn, inputs, state)
    out = got[0].data if packed else got[0]
    assert out.dtype == torch.bfloat16
    assert (flat(got) - flat(want)).norm() <= CLOSE * flat(want).norm()
    got_grads = grads(rnn, got)
    assert all(p.grad.dtype == torch.float32 for p in rnn.parameters())
    assert (got_grads - want_grads).norm() <= CLOSE * want_grads.norm()


def test_outside_autocast_it_is_the_module_itself():
    rnn, inputs, state = setup("GRU", True)
    out, final = run_rnn(rnn, inputs, state)
    want_out, want_final = rnn(inputs, state)
    assert torch.equal(out.data, want_out.data) and torch.equal(final, want_final)
