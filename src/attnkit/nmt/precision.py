"""The arithmetic precision a command runs in: ``auto``, ``fp32`` or ``bf16``, with the reason.

``bf16`` is mixed precision through ``torch.autocast(device, dtype=torch.bfloat16)``:
matrix products (linear layers, attention projections, the output layer) run
in bfloat16, while the weights, their gradients and the optimizer state stay
float32 (autocast casts copies, never the parameters), so checkpoints are
float32 whatever the precision. What loses mass or overflows in bfloat16
stays float32: the loss (logits are cast up before the cross-entropy), every
softmax over attention scores (:func:`attnkit.attention.functional.masked_softmax`),
layer norms (autocast's float32 list) and the fused Bahdanau/GRU loop
(:mod:`attnkit.nmt.models.rnn.fused_loop`).

``auto`` picks bf16 only where it is fast: a CUDA GPU of compute capability 8.0
or later (Ampere on; ``torch.cuda.is_bf16_supported()`` also answers True on
older GPUs, which emulate bf16 without bf16 tensor cores), or a CPU whose flags include
``avx512_bf16`` or ``amx_bf16`` (the instructions oneDNN's bf16 matrix
products use). Without them a CPU still computes bf16 (PyTorch emulates it),
but its matrix products are slower than float32 (3.2x slower on an Ice Lake
Xeon, 50x on an AMD EPYC with AVX2 only, see benchmarks/RESULTS.md), so ``auto``
stays fp32 there, and an explicit ``bf16`` says what it costs. Note that
``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` answers True on such CPUs too:
it says bf16 works, not that it is fast, so it is not the test used here.

The environment variable ``ATTNKIT_PRECISION`` (``fp32`` or ``bf16``) decides
for ``auto`` instead, on every command at once: ``ATTNKIT_PRECISION=fp32``
gives float32 everywhere, e.g. to compare runs across machines. The test suite
sets it to ``fp32``, since its reference numbers are float32 ones.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

import torch

__all__ = [
    "AUTO_ENV",
    "BF16_CPU_FLAGS",
    "PRECISIONS",
    "Precision",
    "cpu_bf16_flag",
    "resolve_precision",
]

PRECISIONS = ("auto", "fp32", "bf16")
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")  # either gives oneDNN fast bf16 matrix products
AUTO_ENV = "ATTNKIT_PRECISION"  # fp32 or bf16: what auto means, if set
_CPUINFO = Path("/proc/cpuinfo")
_SLOW_CPU = "this CPU lacks avx512_bf16/amx_bf16 (bf16 matrix products would be slower than fp32)"
_EMULATED = (
    "this CPU lacks avx512_bf16/amx_bf16, so PyTorch emulates bf16: its matrix products run "
    "3 to 50 times slower than fp32 (auto would choose fp32)"
)


@dataclass(frozen=True)
class Precision:
    """A resolved precision: ``name`` (``fp32`` or ``bf16``), the ``setting`` it came
    from (``auto``, ``fp32``, ``bf16``), the ``device_type`` it runs on and ``reason``,
    one line a person can read (``"fp32: this CPU lacks avx512_bf16/amx_bf16 ..."``)."""

    name: str
    setting: str
    device_type: str
    reason: str

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of autocast's matrix products: ``torch.bfloat16`` or ``torch.float32``."""
        return torch.bfloat16 if self.name == "bf16" else torch.float32

    def autocast(self) -> contextlib.AbstractContextManager:
        """``torch.autocast`` in bf16 for ``bf16``; a no-op context for ``fp32``.

        Autocast state is per thread: enter it in the thread that runs the model.
        """
        if self.name != "bf16":
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=torch.bfloat16)

    def record(self) -> dict[str, str]:
        """The JSON-ready fields a run folder records (``precision.json``)."""
        return {"setting": self.setting, "precision": self.name, "reason": self.reason}


def cpu_bf16_flag(flags: str | None = None) -> str | None:
    """The fast-bf16 CPU flag (``amx_bf16`` or ``avx512_bf16``) found in ``flags``, else None.

    Args:
        flags: the text of ``/proc/cpuinfo`` (or only its ``flags`` line); read
            from this machine when None. Where it cannot be read (not Linux) no
            flag is found.
    """
    return cpu_flag(BF16_CPU_FLAGS, flags)


def cpu_flag(candidates: tuple[str, ...], flags: str | None = None) -> str | None:
    """The first of ``candidates`` among the CPU flags in ``flags`` (as :func:`cpu_bf16_flag`)."""
    if flags is None:
        try:
            flags = _CPUINFO.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    words = set(flags.split())
    return next((flag for flag in candidates if flag in words), None)


def resolve_precision(
    setting: str,
    device: torch.device,
    *,
    option: str = "train.precision",
    cpu_flags: str | None = None,
) -> Precision:
    """The precision ``setting`` means on ``device``, and why.

    Args:
        setting: ``auto``, ``fp32`` or ``bf16``.
        device: where the model runs.
        option: how the user gave it (``train.precision``, ``--precision``), for messages.
        cpu_flags: ``/proc/cpuinfo`` text for a CPU device (read when None; for tests).

    ``auto`` follows ``$ATTNKIT_PRECISION`` where it is set (and not empty or ``auto``).

    Raises:
        ValueError: an unknown setting (or ``$ATTNKIT_PRECISION``), or ``bf16`` on a
            device that cannot run it (a CUDA GPU without bf16, or MPS).
    """
    if setting not in PRECISIONS:
        raise ValueError(f"{option} must be one of {', '.join(PRECISIONS)}, got {setting!r}")
    forced = (os.environ.get(AUTO_ENV) or "auto") if setting == "auto" else "auto"  # "" = unset
    if forced != "auto":
        chosen = resolve_precision(forced, device, option=AUTO_ENV, cpu_flags=cpu_flags)
        return replace(chosen, setting="auto")
    kind = device.type
    fast, why = _fast_bf16(device, cpu_flags)
    if setting == "fp32":
        return Precision("fp32", setting, kind, f"fp32: {option} is fp32")
    if setting == "auto":
        return Precision(
            "bf16" if fast else "fp32", setting, kind, f"{'bf16' if fast else 'fp32'}: {why}"
        )
    if kind == "mps" or (kind == "cuda" and not fast and not _cuda_emulates_bf16(device)):
        raise ValueError(f"{option} is bf16 but {why}; use fp32 or auto")
    slow = _EMULATED if kind == "cpu" else f"{why} (auto would choose fp32)"
    return Precision("bf16", setting, kind, f"bf16: {option} is bf16; {why if fast else slow}")


def _fast_bf16(device: torch.device, cpu_flags: str | None) -> tuple[bool, str]:
    """Whether ``device`` runs bf16 matrix products faster than fp32, and why (one clause)."""
    if device.type == "cuda":
        return _cuda_bf16(device)
    if device.type != "cpu":
        return False, f"attnkit does not use bf16 on {device.type}"
    flag = cpu_bf16_flag(cpu_flags)
    if flag is None:
        return False, _SLOW_CPU
    return True, f"this CPU has {flag}"


def _cuda_bf16(device: torch.device) -> tuple[bool, str]:
    """Whether the GPU ``device`` has bf16 tensor cores (compute capability >= 8.0, or
    ROCm), and why. ``torch.cuda.is_bf16_supported()`` is not the test: it answers True
    on older GPUs too (a V100, a T4), which run bf16 emulated, no faster than fp32."""
    name = torch.cuda.get_device_name(device)
    major, minor = torch.cuda.get_device_capability(device)
    if torch.version.hip or major >= 8:
        return True, f"{name} supports bf16"
    if _cuda_emulates_bf16(device):
        return False, (
            f"{name} (compute capability {major}.{minor}) has no bf16 tensor cores, so bf16 "
            "is emulated, no faster than fp32"
        )
    return False, f"{name} does not support bf16"


def _cuda_emulates_bf16(device: torch.device) -> bool:
    """Whether bf16 runs at all on the GPU ``device`` (natively or emulated)."""
    with torch.cuda.device(device):
        return torch.cuda.is_bf16_supported(including_emulation=True)
