"""Deterministic overhead counts for the hot-path tests: aten ops dispatched and Python
functions called by one call (no clocks: the same code always gives the same counts)."""

import collections
import cProfile
import pstats

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class AtenOps(TorchDispatchMode):
    """Counts each aten op dispatched inside the ``with`` block, by name (``ops["any"]``)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def aten_ops(fn) -> collections.Counter[str]:
    """The aten ops one call of ``fn()`` dispatches, by name."""
    with AtenOps() as counter:
        fn()
    return counter.ops


def python_calls(fn) -> dict[tuple[str, str], int]:
    """``(file, function) -> calls`` for one call of ``fn()``."""
    profile = cProfile.Profile()
    profile.enable()
    fn()
    profile.disable()
    stats = pstats.Stats(profile).stats
    return {(path, name): counts[1] for (path, _line, name), counts in stats.items()}


def saved_shapes(fn) -> list[tuple[int, ...]]:
    """The shapes of the tensors one call of ``fn()`` saves for backward, one per storage."""
    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = tuple(t.shape)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return list(saved.values())
