"""Which torch device a command runs on, checked before any work starts."""

from __future__ import annotations

import torch

__all__ = ["resolve_device"]

KINDS = ("cpu", "cuda", "mps")


def resolve_device(name: str, option: str = "train.device") -> torch.device:
    """The device called ``name``: ``auto`` (CUDA when available, else CPU), ``cpu``,
    ``cuda``, ``cuda:N`` or ``mps``, checked to exist on this machine.

    Args:
        name: the device as the user wrote it.
        option: how the user gave it (``--device``, ``train.device``), for the message.

    Raises:
        ValueError: an unknown device, or one this machine (or this torch build) lacks.
    """
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        device = None
    if device is None or device.type not in KINDS:
        raise ValueError(f"{option} must be one of auto, cpu, cuda, cuda:N or mps, got {name!r}")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not count:
            raise ValueError(
                f"{option} is {name!r} but no CUDA device is available (this torch "
                f"{'has no CUDA support' if torch.version.cuda is None else 'sees no GPU'}); "
                "use cpu"
            )
        if device.index is not None and device.index >= count:
            raise ValueError(f"{option} is {name!r} but there are only {count} CUDA device(s)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{option} is {name!r} but MPS is not available here; use cpu")
    return device
