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
from attnkit.attention.functional import _explicit_is_faster, masked_softmax
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


def test_bf16_causal_training_with_dropout_sees_no_future_key():
    torch.manual_seed(3)
    q, k = (torch.randn(2, 2, 5, 4).bfloat16() for _ in range(2))
    v = torch.zeros(2, 2, 5, 4).bfloat16()
    v[..., 4, :] = 1.0  # only the last key has a nonzero value
    out = sdpa(q, k, v, is_causal=True, dropout_p=0.2)
    assert torch.all(out[..., :4, :] == 0)  # queries 0-3 may not see key 4
    assert torch.any(out[..., 4, :] != 0)


def test_bf16_training_output_without_weights_is_the_weights_path_on_the_cpu():
    # PyTorch's fused CPU kernel has no dropout, so in bf16 attnkit runs the
    # explicit path for it: with the same seed the output is the one the
    # weights made, and a row with every key masked is still exactly 0.
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 3, 5, 4).bfloat16() for _ in range(3))
    mask = torch.rand(2, 1, 5, 5) > 0.3
    mask[0, 0, 2] = False  # query 2 of the first sentence sees nothing
    torch.manual_seed(7)
    alone = sdpa(q, k, v, mask, dropout_p=0.3)
    torch.manual_seed(7)
    out, weights = sdpa(q, k, v, mask, dropout_p=0.3, return_weights=True)
    torch.testing.assert_close(alone, out, rtol=0, atol=0)
    torch.testing.assert_close(out, weights @ v, rtol=0, atol=0)
    assert torch.all(alone[0, :, 2] == 0) and not torch.isnan(alone).any()


@pytest.mark.parametrize("causal", [False, True], ids=["key-padding", "is_causal"])
def test_bf16_training_without_dropout_matches_the_fused_kernel(causal):
    # Training in bf16 on the CPU takes the explicit path for short sequences;
    # outputs and gradients agree with PyTorch's fused kernel within bf16 rounding.
    # is_causal with no other mask is a flag for the fused kernel: the explicit
    # path must build the causal mask itself.
    torch.manual_seed(2)
    q, k, v = (torch.randn(3, 2, 6, 8).bfloat16().requires_grad_() for _ in range(3))
    keep = torch.arange(6) < torch.tensor([6, 4, 2])[:, None]  # (B, Tk) key padding
    mask = None if causal else keep[:, None, None, :]  # (B, 1, 1, Tk)
    assert _explicit_is_faster(q, k, v, 0.0) and not _explicit_is_faster(q.float(), k, v, 0.0)
    ours = sdpa(q, k, v, mask, is_causal=causal)
    theirs = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal
    )
    torch.testing.assert_close(ours, theirs, rtol=2e-2, atol=2e-2)
    g = torch.randn_like(ours)
    grads = torch.autograd.grad(ours, (q, k, v), g)
    want = torch.autograd.grad(theirs, (q, k, v), g)
    for got, ref in zip(grads, want, strict=True):
        torch.testing.assert_close(got, ref, rtol=2e-2, atol=3e-2)
