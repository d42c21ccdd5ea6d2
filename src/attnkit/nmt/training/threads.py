"""CPU threads for training, and ``train.threads: auto``, which follows the machine's load.

torch runs each operator on a team of OpenMP threads that spin-wait for each
other at the end of every parallel region. When another process takes one of
the cores, the thread that shares that core is late to every barrier and the
whole team waits for it: on 2 cores with one kept busy, training with 2
fixed threads ran at 0.30 of its idle speed, with ``auto`` at 0.57 (see
benchmarks/RESULTS.md; ``python -m benchmarks.run --only contention``). ``auto`` therefore measures,
every few seconds, how much CPU time *other* processes take on the CPUs this
process may run on (``/proc/stat`` minus this process's own CPU time) and uses
only the cores they leave free, at least one. On an idle machine it is the
fixed default; where ``/proc/stat`` cannot be read (not Linux) it stays fixed.

Changing the thread count can change the order of floating-point sums inside
some kernels, so a run that must repeat bit for bit sets a fixed number.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

__all__ = [
    "ThreadGovernor",
    "cpu_busy_seconds",
    "default_threads",
    "set_threads",
    "threads_restored",
]

_STAT = Path("/proc/stat")
_IDLE_FIELDS = (3, 4)  # idle, iowait in a /proc/stat cpuN line (after the name)


def _allowed_cpus() -> set[int] | None:
    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None


class _Torch:
    """torch's thread count as the user left it, told apart from the counts set here."""

    user = torch.get_num_threads()  # before this module changed anything
    ours: int | None = None  # the count this module set last

    @classmethod
    def user_setting(cls) -> int:
        now = torch.get_num_threads()
        if now != cls.ours:  # the user (or nobody) set it since: that is their choice
            cls.user = now
        return cls.user

    @classmethod
    def set(cls, count: int) -> int:
        cls.user_setting()
        torch.set_num_threads(max(count, 1))
        cls.ours = torch.get_num_threads()
        return cls.ours

    @classmethod
    def restore(cls, count: int) -> None:
        """Give torch back the caller's ``count``, which is then the user's setting again."""
        torch.set_num_threads(count)
        cls.user, cls.ours = count, None


def default_threads(processes: int = 1) -> int:
    """The fixed default: ``OMP_NUM_THREADS`` when set, else this process's share of its CPUs.

    ``processes`` training processes on this machine share the CPUs (each takes
    ``cpus // processes``, at least one); never more than torch's own setting
    as the user left it (a count that ``auto`` lowered earlier in the same
    process does not lower the next run's default).
    """
    chosen = os.environ.get("OMP_NUM_THREADS", "").strip()
    if chosen.isdigit() and int(chosen) > 0:
        return int(chosen)
    allowed = _allowed_cpus()
    cpus = len(allowed) if allowed else os.cpu_count() or 1
    return max(min(cpus // max(processes, 1), _Torch.user_setting()), 1)


def set_threads(threads: int | str, processes: int = 1) -> int:
    """Use ``threads`` intra-op threads (0 or ``"auto"``: :func:`default_threads`).

    Returns the thread count torch now uses.
    """
    return _Torch.set(default_threads(processes) if threads in (0, "auto") else int(threads))


@contextlib.contextmanager
def threads_restored() -> Iterator[None]:
    """torch's intra-op thread count as the caller had it, back when the block ends.

    Training and ``prepare`` set ``train.threads`` (:func:`set_threads`,
    :class:`ThreadGovernor`) for their own work; however the block ends (a
    return, an error, Ctrl-C), the calling process gets its own count back, so
    a script or notebook that trains is not left on the run's threads.
    """
    count = torch.get_num_threads()
    try:
        yield
    finally:
        _Torch.restore(count)


def cpu_busy_seconds(cpus: set[int] | None = None, stat: Path = _STAT) -> float | None:
    """CPU seconds spent busy (not idle or waiting on I/O) since boot on ``cpus`` (all when None).

    Read from Linux's ``/proc/stat`` (clock ticks of ``os.sysconf('SC_CLK_TCK')``);
    None where it cannot be read.
    """
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    ticks, found = 0, False
    for line in lines:
        name, *fields = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        if cpus is not None and int(name[3:]) not in cpus:
            continue
        values = [int(v) for v in fields[:8]]
        ticks += sum(values) - sum(values[i] for i in _IDLE_FIELDS)
        found = True
    return ticks / os.sysconf("SC_CLK_TCK") if found else None


class ThreadGovernor:
    """Keeps the intra-op thread count of a training process right for the machine's load.

    A fixed ``setting`` (a positive int) is applied once. ``"auto"`` starts at
    :func:`default_threads` and, on :meth:`tick` calls at least ``interval_s``
    apart, sets ``round(cores - others)`` threads, clipped to [1, that default],
    where ``others`` is the number of cores other processes kept busy since
    the previous measurement. Only one process per machine adapts: with several
    (``torchrun``) the others would be its siblings, so the share stays fixed.

    ``busy`` and ``own`` (for tests) return cumulative busy CPU seconds of the
    CPUs and of this process; ``clock`` returns wall seconds.
    """

    def __init__(
        self,
        setting: int | str,
        processes: int = 1,
        interval_s: float = 2.0,
        busy: Callable[[], float | None] | None = None,
        own: Callable[[], float] = time.process_time,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.cpus = _allowed_cpus()
        self.ceiling = set_threads(setting, processes)
        self.busy = busy or (lambda: cpu_busy_seconds(self.cpus))
        self.own, self.clock, self.interval_s = own, clock, interval_s
        self.threads = self.ceiling
        self.cores = len(self.cpus) if self.cpus else os.cpu_count() or 1
        adapts = setting == "auto" and processes == 1 and self.ceiling > 1
        self._last = self._sample() if adapts else None  # None: /proc/stat unreadable
        self.adaptive = self._last is not None

    def _sample(self) -> tuple[float, float, float] | None:
        busy = self.busy()
        return None if busy is None else (self.clock(), busy, self.own())

    def tick(self) -> int | None:
        """Re-measure if the interval has passed; returns the new thread count when it changed."""
        if not self.adaptive or self.clock() - self._last[0] < self.interval_s:
            return None
        now = self._sample()
        if now is None:
            return None
        wall, busy, own = (b - a for a, b in zip(self._last, now, strict=True))
        self._last = now
        others = max(busy - own, 0.0) / max(wall, 1e-9)
        wanted = min(max(int(self.cores - others + 0.5), 1), self.ceiling)
        if wanted == self.threads:
            return None
        self.threads = _Torch.set(wanted)
        return wanted
