"""Checkpoint averaging: the element-wise mean of several checkpoints' model weights.

Averaging the weights of the last few checkpoints of one run is a cheap
ensemble-like smoothing of the end of training: Vaswani et al. 2017 (sec. 6.1)
report their base models averaged over the last 5 checkpoints and their big
models over the last 20; Junczys-Dowmunt et al. 2016 ("The AMU-UEDIN submission
to the WMT16 news translation task") average the last checkpoints of a run too.
fairseq (``scripts/average_checkpoints.py``), OpenNMT and Joey NMT offer the
same. Whether it helps a given run is an empirical question: measure it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

__all__ = ["average_weights"]


def average_weights(states: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
    """The element-wise mean of ``states``, model state dicts ordered oldest to newest.

    For every floating-point tensor ``θ``, ``θ̄ = 1/N Σ_{i=1..N} θ_i``, summed in
    float64 and cast back to the tensor's own dtype (so N float16 or bfloat16
    weights near their range's end neither overflow nor lose the small ones).
    A tensor of any other dtype (integer or bool buffers, e.g. a step counter)
    is not averaged: it is taken from the newest state, ``states[-1]``.

    Args:
        states: N >= 1 state dicts with the same keys, and per key the same shape
            and dtype (``model.state_dict()`` of one architecture), oldest first.

    Returns:
        A new state dict with ``states[-1]``'s keys in its order; each tensor has
        the shape, dtype and device of ``states[-1]``'s, and shares no memory
        with any input.

    Raises:
        ValueError: ``states`` is empty; a state lacks a key of the newest one or
            has one it lacks (the message names the keys and the state's index);
            or a tensor's shape or dtype differs from the newest one's.

    Source: Vaswani et al. 2017, sec. 6.1; Junczys-Dowmunt et al. 2016.
    """
    if not states:
        raise ValueError("states is empty: averaging needs at least one state dict")
    newest = states[-1]
    for index, state in enumerate(states):
        _check_matches(state, newest, index, len(states) - 1)
    return {key: _mean([state[key] for state in states]) for key in newest}


def _mean(tensors: list[Tensor]) -> Tensor:
    """The mean of one key's tensors (float64 sum), or the newest one's copy if not float."""
    newest = tensors[-1]
    if not newest.is_floating_point():
        return newest.detach().clone()
    total = torch.zeros(newest.shape, dtype=torch.float64, device=newest.device)
    for tensor in tensors:
        total += tensor.detach().to(device=newest.device, dtype=torch.float64)
    return (total / len(tensors)).to(newest.dtype)


def _check_matches(
    state: Mapping[str, Tensor], newest: Mapping[str, Tensor], index: int, last: int
) -> None:
    """Raise a ValueError naming what differs between ``states[index]`` and the newest."""
    missing = [k for k in newest if k not in state]
    extra = [k for k in state if k not in newest]
    if missing or extra:
        raise ValueError(
            f"states[{index}] does not have the keys of states[{last}] (the newest): "
            f"missing {missing[:5]}, extra {extra[:5]}"
        )
    for key, tensor in state.items():
        want = newest[key]
        if tensor.shape != want.shape or tensor.dtype != want.dtype:
            raise ValueError(
                f"states[{index}][{key!r}] is {tuple(tensor.shape)} {tensor.dtype} but "
                f"states[{last}][{key!r}] (the newest) is {tuple(want.shape)} {want.dtype}"
            )
