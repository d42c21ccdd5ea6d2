"""The weights returned are the weights that made the context, with and without dropout.

With attention dropout in training mode every path returns the dropped,
``1/(1-p)``-rescaled weights (as PyTorch does), so ``context == weights @ values``
in every mode; eval mode stays deterministic. The worked case: ``q = [[1, 0]]``,
``K = V = [[1, 0], [0, 1]]``, scale ``1/sqrt(2)``: weights ``[0.6698, 0.3302]``.
"""

import pytest
import torch

from attnkit import Attention, KVCache, ScaledDotScore
from attnkit import scaled_dot_product_attention as sdpa
from attnkit.attention.functional import masked_softmax
from mha_helpers import identity_mha

Q = torch.tensor([[[1.0, 0.0]]])  # (B=1, Tq=1, D=2)
KV = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # (B=1, Tk=2, D=2)
EVAL_WEIGHTS = torch.tensor([[[0.6698, 0.3302]]])


def run_sdpa(dropout):
    return sdpa(Q, KV, KV, dropout_p=dropout, return_weights=True)


def run_attention(dropout, training=True):
    return Attention(ScaledDotScore(), dropout=dropout).train(training)(Q, KV)


def run_attention_step(dropout):
    context, weights = Attention(ScaledDotScore(), dropout=dropout).train()(Q[:, 0], KV)
    return context[:, None], weights[:, None]  # (B, 1, D), (B, 1, Tk)


def run_mha(dropout, average=True, cache=None):
    mha = identity_mha(2, dropout=dropout).train()
    return mha(Q, KV, need_weights=True, average_weights=average, cache=cache)


def run_mha_per_head(dropout):
    output, weights = run_mha(dropout, average=False)
    return output, weights[:, 0]  # one head: (B, Tq, Tk)


def run_mha_cached(dropout):
    return run_mha(dropout, cache=KVCache())


PATHS = {
    "sdpa": run_sdpa,
    "attention": run_attention,
    "attention_step": run_attention_step,
    "mha": run_mha,
    "mha_per_head": run_mha_per_head,
    "mha_cached": run_mha_cached,
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_returned_weights_make_the_context_with_dropout_in_training(path):
    dropped_some = False
    for seed in range(8):
        torch.manual_seed(seed)
        context, weights = PATHS[path](0.5)
        torch.testing.assert_close(context, weights @ KV, rtol=0, atol=1e-6)
        # each weight is dropped (0) or kept and rescaled by 1/(1-p) = 2
        kept = (weights - 2 * EVAL_WEIGHTS).abs() < 1e-4
        assert torch.all(kept | (weights == 0))
        dropped_some |= bool((weights == 0).any())
    assert dropped_some


@pytest.mark.parametrize("path", sorted(PATHS))
def test_without_dropout_weights_are_the_softmax_and_make_the_context(path):
    context, weights = PATHS[path](0.0)
    torch.testing.assert_close(weights, EVAL_WEIGHTS, rtol=0, atol=1e-4)
    torch.testing.assert_close(context, weights @ KV, rtol=0, atol=1e-6)


def test_eval_mode_ignores_dropout_and_is_deterministic():
    first, second = run_attention(0.5, training=False), run_attention(0.5, training=False)
    torch.testing.assert_close(first, second, rtol=0, atol=0)
    torch.testing.assert_close(first[1], EVAL_WEIGHTS, rtol=0, atol=1e-4)
    mha = identity_mha(2, dropout=0.5).eval()
    output, weights = mha(Q, KV, need_weights=True)
    torch.testing.assert_close(weights, EVAL_WEIGHTS, rtol=0, atol=1e-4)
    torch.testing.assert_close(output, weights @ KV, rtol=0, atol=1e-6)


def test_dropped_weights_of_many_heads_and_queries_still_make_the_context():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 6)
    mask = torch.rand(2, 1, 5, 7) > 0.3
    out, weights = sdpa(q, k, v, mask, dropout_p=0.3, return_weights=True, is_causal=True)
    torch.testing.assert_close(out, weights @ v)
    assert torch.all(weights[~mask.expand_as(weights)] == 0)
    assert not torch.allclose(weights, masked_softmax(q @ k.transpose(-2, -1) / 2, mask))
