"""Run ``nn.GRU`` / ``nn.LSTM`` in the autocast dtype, which CPU autocast does not do.

Inside ``torch.autocast("cpu", dtype=torch.bfloat16)`` PyTorch casts linear
layers to bf16 but leaves ``nn.GRU`` (and any packed sequence) in float32, so
the recurrences -- most of an RNN translator's arithmetic -- ran at float32
speed. :func:`run_rnn` runs them in the autocast dtype with copies of the
weights, as autocast does for a linear layer, so the float32 master weights
still receive float32 gradients. The gain is small on a CPU, where PyTorch's
GRU is a step-by-step loop of small products (a bidirectional 256 -> 384 GRU,
forward and backward: 171 against 179 ms on an AMD EPYC with avx512_bf16,
``python -m benchmarks.bench_step_parts``, benchmarks/RESULTS.md).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn.utils.rnn import PackedSequence

__all__ = ["run_rnn"]


def run_rnn(rnn: nn.RNNBase, inputs: Tensor | PackedSequence, state=None):
    """``rnn(inputs, state)``; inside an autocast region, in its dtype.

    Args:
        rnn: an ``nn.GRU`` or ``nn.LSTM``.
        inputs: ``(B, T, E)`` (batch first) or a :class:`PackedSequence`.
        state: ``h_0`` ``(L*dirs, B, D)`` (a pair ``(h_0, c_0)`` for an LSTM), or None.

    Returns:
        ``(outputs, final state)`` as ``rnn`` returns them, in the autocast dtype
        (bf16) inside autocast and in float32 outside it.
    """
    device = rnn.weight_hh_l0.device.type
    if not torch.is_autocast_enabled(device):
        return rnn(inputs, state)
    dtype = torch.get_autocast_dtype(device)
    weights = {name: p.to(dtype) for name, p in rnn.named_parameters()}
    if isinstance(state, tuple):
        state = tuple(s.to(dtype) for s in state)
    elif state is not None:
        state = state.to(dtype)
    with torch.autocast(device, enabled=False):
        return functional_call(rnn, weights, (inputs.to(dtype), state))
