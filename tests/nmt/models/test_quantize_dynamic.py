"""``torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)`` on the
translators: the quantized copy translates, and greedily as the float model does.

Each model is trained briefly on the copy task (a few hundred Adam steps of a tiny
model), so that its greedy choices are not coin flips that int8 rounding may turn.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from attnkit.nmt.decoding.search import greedy_decode
from attnkit.nmt.vocab_ids import PAD
from conftest_nmt import tiny_model, tiny_transformer, toy_batch


def _fit(model: nn.Module, steps: int, lr: float) -> nn.Module:
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    data = torch.Generator().manual_seed(0)
    for _ in range(steps):
        src, src_lengths, tgt_in, tgt_out = toy_batch("copy", 32, data)
        logits, _ = model(src, src_lengths, tgt_in, need_weights=False)
        loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def _quantized(model: nn.Module, spec: set[type[nn.Module]] | None = None) -> nn.Module:
    """``quantize_dynamic`` of a copy; ``spec`` None: PyTorch's default (Linear, GRU, LSTM...)."""
    return torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), spec, dtype=torch.qint8)


def _assert_same_greedy(model: nn.Module, spec: set[type[nn.Module]] | None = None) -> None:
    src, src_lengths, _, _ = toy_batch("copy", 40, torch.Generator().manual_seed(1))
    golds = [src[i, :n].tolist() for i, n in enumerate(src_lengths.tolist())]
    ours = greedy_decode(model, src, src_lengths)
    assert sum(h.tokens == g for h, g in zip(ours, golds, strict=True)) >= 30  # it learned
    quantized = greedy_decode(_quantized(model, spec), src, src_lengths)
    assert [h.tokens for h in quantized] == [h.tokens for h in ours]


def _assert_same_forced_choices(model: nn.Module, spec: set[type[nn.Module]] | None) -> None:
    src, src_lengths, tgt_in, tgt_out = toy_batch("copy", 8, torch.Generator().manual_seed(2))
    with torch.no_grad():  # the teacher-forced pass (the fused Bahdanau loop in float)
        want, want_weights = model(src, src_lengths, tgt_in)
        got, got_weights = _quantized(model, spec)(src, src_lengths, tgt_in)
    real = tgt_out != PAD
    assert torch.equal(got.argmax(-1)[real], want.argmax(-1)[real])
    torch.testing.assert_close(got_weights, want_weights, atol=0.05, rtol=0)


@pytest.fixture(scope="module", params=["previous", "current"])
def trained_rnn(request) -> nn.Module:
    model = tiny_model(embed_dim=16, hidden_size=32, query_timing=request.param)
    return _fit(model, steps=300, lr=0.01)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
def test_a_dynamically_quantized_transformer_translates_as_the_float_one():
    # MultiHeadAttention read q_proj.weight.dtype, a method on a quantized Linear:
    # every forward of the quantized model stopped with an AttributeError.
    model = tiny_transformer(d_model=32, ff_dim=64)
    _assert_same_greedy(_fit(model, steps=300, lr=2e-3), {nn.Linear})


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
def test_a_dynamically_quantized_rnn_translates_as_the_float_one(trained_rnn):
    # The decoder read the quantized Linears' weight (a method): the Bahdanau loop
    # indexed score.v.weight[0] and the logits passed output.weight to F.linear, so
    # decoding and the teacher-forced pass stopped with a TypeError.
    _assert_same_greedy(trained_rnn, {nn.Linear})
    _assert_same_forced_choices(trained_rnn, {nn.Linear})


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
def test_quantize_dynamic_with_its_default_modules_quantizes_the_rnns_too(trained_rnn):
    # PyTorch's default replaces nn.GRU / nn.LSTM as well, by modules without weight
    # tensors: run_rnn read rnn.weight_hh_l0 and every forward and decoding step of the
    # quantized model stopped with AttributeError: 'GRU' object has no attribute ...
    _assert_same_greedy(trained_rnn, None)
    _assert_same_forced_choices(trained_rnn, None)


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
def test_a_quantized_lstm_reads_each_sentence_for_its_own_length():
    model = tiny_model(rnn="lstm")
    quantized = _quantized(model, None)
    src, src_lengths, tgt_in, _ = toy_batch("copy", 4, torch.Generator().manual_seed(3))
    with torch.no_grad():
        batch, _ = quantized(src, src_lengths, tgt_in)
        for b, n in enumerate(src_lengths.tolist()):  # alone, without padding
            alone, _ = quantized(src[b : b + 1, :n], src_lengths[b : b + 1], tgt_in[b : b + 1])
            torch.testing.assert_close(batch[b], alone[0], atol=0.02, rtol=0)
