"""Each rank's random number generators (dropout draws), as checkpoints save and restore them.

Rank 0 draws from torch's default generator seeded with ``train.seed`` (the
stream a one-process run uses); rank ``R`` reseeds with ``seed + R`` after the
model is built, so every rank starts from the same weights but draws its own
dropout. A checkpoint keeps every rank's generator state as extra tensors
named ``torch_rng`` (rank 0) and ``torch_rng.R``, plus ``cuda_rng``/``cuda_rng.R``
on a GPU, so a resumed run draws what an unbroken one would have drawn.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .distributed import Group

__all__ = ["rng_states", "restore_rng", "seed_dropout"]


def seed_dropout(seed: int, group: Group) -> None:
    """Give this rank its own dropout stream (call after building the model)."""
    if group.rank:  # rank 0 keeps the one-process stream
        torch.manual_seed(seed + group.rank)


def rng_states(group: Group, device: torch.device) -> dict[str, Tensor]:
    """Every rank's generator states, keyed as above; a collective: every rank must call it."""
    states = _gathered(group, "torch_rng", torch.get_rng_state())
    if device.type == "cuda":  # dropout on the GPU draws from its own generator
        states.update(_gathered(group, "cuda_rng", torch.cuda.get_rng_state(device)))
    return states


def restore_rng(
    extra: dict[str, Tensor],
    saved_world: int,
    group: Group,
    device: torch.device,
    warn: Callable[[str], None],
) -> None:
    """Set this rank's generators from a checkpoint's ``extra`` tensors.

    A state the checkpoint lacks (a rank that did not exist, a run saved on
    the CPU and resumed on a GPU) leaves that generator as seeded; a world
    size other than ``saved_world`` is warned about, since the run then
    cannot repeat the saved one's dropout draws.
    """
    world = group.world_size
    if saved_world != world:
        warn(
            f"warning: this run was saved by {saved_world} process(es) and resumes on "
            f"{world}: the batches stay the same (train.batch_size is global) but dropout "
            f"draws and rounding change, so it will not repeat a {saved_world}-process run"
        )
    state = extra.get(_rank_key("torch_rng", group.rank))
    if state is not None:
        torch.set_rng_state(state)
    state = extra.get(_rank_key("cuda_rng", group.rank)) if device.type == "cuda" else None
    if state is not None:
        torch.cuda.set_rng_state(state, device)


def _gathered(group: Group, name: str, state: Tensor) -> dict[str, Tensor]:
    return {_rank_key(name, r): s for r, s in enumerate(group.gather(state))}


def _rank_key(name: str, rank: int) -> str:
    """Checkpoint key of a rank's generator state: ``name`` for rank 0, ``name.R`` for others."""
    return name if rank == 0 else f"{name}.{rank}"
