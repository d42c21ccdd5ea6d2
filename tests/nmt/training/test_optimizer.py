"""attnkit's Adam (PyTorch's fused kernel) against PyTorch's default Adam."""

from __future__ import annotations

import copy

import torch

from attnkit.nmt.config import TrainConfig
from attnkit.nmt.training.optimizer import adam


def _steps(optimizer, params, grads, count):
    for step in range(count):
        for p, g in zip(params, grads, strict=True):
            p.grad = g * (step + 1)
        optimizer.step()


def _params_and_grads():
    g = torch.Generator().manual_seed(0)
    shapes = [(64, 32), (32,), (8000, 16)]
    params = [torch.randn(s, generator=g).requires_grad_() for s in shapes]
    grads = [torch.randn(s, generator=g) for s in shapes]
    return params, grads


def _copy(params):
    return [p.detach().clone().requires_grad_() for p in params]


def test_attnkits_adam_is_fused_and_a_fused_checkpoint_resumes_fused():
    params, _ = _params_and_grads()
    optimizer = adam(params, TrainConfig())
    again = adam(_copy(params), TrainConfig())
    again.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    assert optimizer.param_groups[0]["fused"] and again.param_groups[0]["fused"]


def test_the_update_is_pytorchs_default_adam_within_float32_rounding():
    cfg = TrainConfig(lr=1e-2, adam_betas=(0.9, 0.98), weight_decay=1e-4)
    ours, grads = _params_and_grads()
    theirs = _copy(ours)
    start = _copy(ours)
    _steps(adam(ours, cfg), ours, grads, 5)
    reference = torch.optim.Adam(theirs, lr=1e-2, betas=(0.9, 0.98), weight_decay=1e-4)
    _steps(reference, theirs, grads, 5)
    for a, b, s in zip(ours, theirs, start, strict=True):
        assert not torch.equal(a, s)  # five steps of lr 1e-2 moved every parameter
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_a_checkpoint_of_the_default_adam_resumes_with_the_same_update():
    cfg = TrainConfig(lr=1e-2, adam_betas=(0.9, 0.98))
    first, grads = _params_and_grads()
    second = _copy(first)
    reference = torch.optim.Adam(first, lr=1e-2, betas=(0.9, 0.98))
    _steps(reference, first, grads, 3)
    resumed = adam(second, cfg)
    with torch.no_grad():
        for a, b in zip(second, first, strict=True):
            a.copy_(b)
    resumed.load_state_dict(copy.deepcopy(reference.state_dict()))  # as if read from disk
    _steps(reference, first, grads, 2)
    _steps(resumed, second, grads, 2)
    for a, b in zip(second, first, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
