"""Data-parallel training on several processes: PyTorch DDP launched by ``torchrun``.

``torchrun --nproc_per_node N -m attnkit train CONFIG.yaml`` starts N copies
of ``attnkit train``; :func:`join` sees torchrun's environment (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``), joins the process
group (gloo on CPU, NCCL on CUDA, one GPU per local rank) and returns the
:class:`Group` the training loop talks to. Run without torchrun, it returns a
group of one whose every call is a no-op, so single-process training is
unchanged. The algorithm is synchronous data parallelism with gradients
averaged by all-reduce (``DistributedDataParallel``; Li et al. 2020, "PyTorch
Distributed: Experiences on Accelerating Data Parallel Training", VLDB):

* every rank builds the same epoch of length-bucketed batches (same seed), and
  ``train.batch_size`` is the GLOBAL batch: rank ``r`` of ``W`` trains on the
  sentences ``batch[r::W]`` (:meth:`Group.share`, which also balances
  lengths, as batches are sorted by length), so every rank takes the same
  number of steps and the data order does not depend on ``W``;
* each rank scales its loss by ``W * local_tokens / global_tokens`` (and a
  guided-alignment term by ``W * local_rows / global_rows``, its linked target
  rows: :func:`.guided_alignment.global_batch_loss`), so DDP's gradient average
  equals the gradient of the global batch's loss: a W-process run follows the
  1-process run with the same batch size and seed up to floating-point
  rounding (exactly, were floating-point addition associative; dropout masks
  differ, each rank drawing its own);
* rank 0 (``is_main``) alone writes the run folder, logs and validates; the
  other ranks wait for its scores (:meth:`Group.broadcast`) and apply them, so
  the schedule and early stopping stay identical everywhere;
* a stop (SIGTERM/SIGINT from the launcher, or the time budget) is agreed by
  all ranks after each step (:meth:`Group.any`), so all stop at the same step.

Failures: collectives time out after ``ATTNKIT_DIST_TIMEOUT_S`` seconds
(default 1800; validation on rank 0 must fit in it; the wait for rank 0's data
preparation, :meth:`Group.main_first`, does not) and a collective whose
peer died raises :class:`PeerLost` (one line, no hang). A worker whose
launcher disappeared (``kill -9`` of torchrun, which would leave its workers
running and holding the run folder) kills itself, as the launcher's own kill
would have.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import hashlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor, nn

__all__ = [
    "ENV_TIMEOUT",
    "Group",
    "Launch",
    "MainFailed",
    "PeerLost",
    "join",
    "launch",
    "report_replicas",
]

ENV_TIMEOUT = "ATTNKIT_DIST_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 1800.0
# how long the other ranks wait for rank 0's data work (Group.main_first): a week, not
# the collective timeout, which a large corpus's tokenizers and token store outlast
MAIN_FIRST_TIMEOUT = datetime.timedelta(days=7)
_WATCH_INTERVAL_S = 0.2


class PeerLost(RuntimeError):
    """Another process of the job died or stopped answering; this one stops too."""


class MainFailed(RuntimeError):
    """Rank 0 failed in a step the other ranks wait for (it reports why)."""


class Group:
    """The processes training one model; a single process is a group of one.

    Args:
        rank: this process's rank, 0..world_size-1 (0 is the main process).
        world_size: W, the number of processes.
        local_world_size: processes on this machine (they share its cores).
        device: where this rank computes (``cuda:LOCAL_RANK`` with NCCL).
    """

    def __init__(
        self,
        rank: int = 0,
        world_size: int = 1,
        local_world_size: int = 1,
        device: torch.device | None = None,
    ) -> None:
        self.rank, self.world_size, self.local_world_size = rank, world_size, local_world_size
        self.device = device or torch.device("cpu")
        self._patient: dist.ProcessGroup | None = None  # for main_first's wait

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes the run folder."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def describe(self) -> str:
        """`` × W processes (backend)`` for logs, or '' for a single process."""
        if not self.distributed:
            return ""
        return f" × {self.world_size} processes ({dist.get_backend()})"

    def share(self, items: Sequence[int]) -> list[int]:
        """This rank's share of a global batch: ``items[rank::W]`` (may be empty)."""
        return list(items[self.rank :: self.world_size])

    def wrap(self, model: nn.Module) -> nn.Module:
        """``model`` under ``DistributedDataParallel`` (gradients all-reduced in backward)."""
        if not self.distributed:
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def mean(self, value: float) -> float:
        """The mean of ``value`` over ranks (float64 all-reduce)."""
        return self.means(value)[0]

    def means(self, *values: float) -> list[float]:
        """The mean of each value over ranks (one float64 all-reduce)."""
        if not self.distributed:
            return list(values)
        return [
            float(v) / self.world_size for v in self._all_reduce(list(values), dist.ReduceOp.SUM)
        ]

    def any(self, *flags: bool) -> list[bool]:
        """Each flag OR-ed over all ranks (one all-reduce)."""
        if not self.distributed:
            return [bool(f) for f in flags]
        return [bool(v) for v in self._all_reduce([float(f) for f in flags], dist.ReduceOp.MAX)]

    def broadcast(self, values: Sequence[float] | None) -> list[float]:
        """Rank 0's ``values`` on every rank (the others pass None, or anything of that length)."""
        if not self.distributed:
            return list(values)
        count = torch.tensor([len(values or ())], device=self.device)
        self._collective(dist.broadcast, count, src=0)
        data = torch.zeros(int(count), dtype=torch.float64, device=self.device)
        if self.is_main:
            data.copy_(torch.tensor(values, dtype=torch.float64))
        self._collective(dist.broadcast, data, src=0)
        return data.tolist()

    def gather(self, tensor: Tensor) -> list[Tensor]:
        """Every rank's ``tensor`` (same shape and dtype everywhere), on the CPU, by rank."""
        if not self.distributed:
            return [tensor]
        local = tensor.to(self.device)
        parts = [torch.empty_like(local) for _ in range(self.world_size)]
        self._collective(dist.all_gather, parts, local)
        return [p.cpu() for p in parts]

    def same_everywhere(self, model: nn.Module) -> bool:
        """Whether every rank holds bit-identical parameters and buffers (SHA-256 compared)."""
        digest = hashlib.sha256()
        for tensor in model.state_dict().values():
            flat = tensor.detach().cpu().contiguous().reshape(-1)  # (N,), also for 0-dim buffers
            digest.update(flat.view(torch.uint8).numpy().tobytes())
        mine = torch.frombuffer(bytearray(digest.digest()), dtype=torch.uint8)
        return all(torch.equal(mine, other) for other in self.gather(mine))

    def barrier(self) -> None:
        if self.distributed:
            self._collective(dist.barrier)

    @contextlib.contextmanager
    def main_first(self) -> Iterator[None]:
        """Rank 0 runs the block first while the others wait; then they run it.

        The block is rank 0's data work (the tokenizers' training, the token
        store's build), which takes as long as the corpus asks: the others
        wait for it without the collective timeout (``ATTNKIT_DIST_TIMEOUT_S``),
        on a gloo group of their own (:data:`MAIN_FIRST_TIMEOUT`); a rank 0
        that dies still ends their wait at once. If rank 0's block raises, the
        others raise :class:`MainFailed` instead of running theirs (rank 0
        reports its own error).
        """
        if not self.distributed:
            yield
            return
        if self._patient is None:  # made by every rank at its first call, before the block
            self._patient = self._collective(
                dist.new_group, backend="gloo", timeout=MAIN_FIRST_TIMEOUT
            )
        if self.is_main:
            try:
                yield
            except BaseException:
                self._main_done(0.0)
                raise
            self._main_done(1.0)
        else:
            if self._main_done(None) != 1.0:
                raise MainFailed("the main process (rank 0) failed; see its error")
            yield

    def _main_done(self, flag: float | None) -> float:
        """Rank 0's ``flag`` (1: its block succeeded, 0: it failed) on every rank, waited
        for on the patient group."""
        data = torch.tensor([flag or 0.0], dtype=torch.float64)  # gloo: on the CPU
        self._collective(dist.broadcast, data, src=0, group=self._patient)
        return float(data[0])

    def _all_reduce(self, values: list[float], op) -> list[float]:
        data = torch.tensor(values, dtype=torch.float64, device=self.device)
        self._collective(dist.all_reduce, data, op=op)
        return data.tolist()

    def _collective(self, function, *args, **kwargs):
        """``function(*args, **kwargs)``'s result; a peer's death or the timeout is PeerLost."""
        try:
            return function(*args, **kwargs)
        except RuntimeError as err:  # gloo/NCCL: a peer died, or the timeout passed
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise PeerLost(
                f"rank {self.rank}: another process of this training stopped answering "
                f"({first[:200]}); the other processes' output says why; then run the same "
                "command with --resume (it continues from the last checkpoint, if one was saved)"
            ) from None


def report_replicas(group: Group, model: nn.Module, echo: Callable[[str], None]) -> None:
    """Say whether every rank holds the same weights (DDP keeps them in step)."""
    if group.distributed:
        if group.same_everywhere(model):
            echo(f"weights identical on all {group.world_size} processes")
        else:
            echo(f"warning: the weights differ between the {group.world_size} processes")


class Launch(NamedTuple):
    """This process's place in the job before training starts: its global ``rank``,
    ``local_rank`` (its GPU; None where ``LOCAL_RANK`` is not set: the current CUDA
    device), ``world_size`` W, and ``local_world_size``, the processes on this machine
    (they share its cores). ``Launch(0, 0, 1, 1)`` for one process."""

    rank: int
    local_rank: int | None
    world_size: int
    local_world_size: int

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that logs and writes."""
        return self.rank == 0


def launch() -> Launch:
    """This process's place in a job: the process group the caller initialised, else
    torchrun's environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``),
    else rank 0 of 1. A caller's group without torchrun's variables (``mp.spawn`` and
    ``init_process_group(rank=..., world_size=...)``) is taken as one machine's processes."""
    env = os.environ
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = int(env.get("RANK", "0")), int(env.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Launch(0, 0, 1, 1)
    local = int(env["LOCAL_RANK"]) if "LOCAL_RANK" in env else None
    return Launch(rank, local, world, int(env.get("LOCAL_WORLD_SIZE", world)))


@contextlib.contextmanager
def join(device: torch.device) -> Iterator[Group]:
    """The group of this process: torchrun's job if launched by it, else a group of one.

    Joins the default process group (gloo for a CPU ``device``, NCCL for CUDA,
    where each process takes ``cuda:LOCAL_RANK``) and leaves it when the block
    ends. A process group initialised by the caller is used as it is, with or
    without torchrun's environment (:func:`launch`), and left to the caller.

    Args:
        device: the device training asked for (``train.device`` resolved).

    Raises:
        ValueError: CUDA training with fewer visible GPUs than local ranks.
    """
    placed = launch()
    if placed.world_size <= 1:
        yield Group(device=device)
        return
    device = _rank_device(device, placed.local_rank)
    created = not dist.is_initialized()
    if created:
        backend = "nccl" if device.type == "cuda" else "gloo"
        timeout = datetime.timedelta(seconds=_timeout_s())
        dist.init_process_group(backend, timeout=timeout)
    if "TORCHELASTIC_RUN_ID" in os.environ:
        _die_with_launcher()
    try:
        yield Group(dist.get_rank(), dist.get_world_size(), placed.local_world_size, device)
    finally:
        if created:
            # DDP's reducer and its threads go before the group they use (a rank once
            # aborted at exit in this teardown, std::terminate; not reproduced since)
            gc.collect()
            dist.destroy_process_group()


def _timeout_s() -> float:
    """``ATTNKIT_DIST_TIMEOUT_S`` (seconds > 0), or the default."""
    raw = os.environ.get(ENV_TIMEOUT, str(DEFAULT_TIMEOUT_S))
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ValueError(f"{ENV_TIMEOUT} must be a number of seconds > 0, got {raw!r}")
    return seconds


def _rank_device(device: torch.device, local_rank: int | None) -> torch.device:
    """``cuda:local_rank`` for CUDA training (None: the current device, as the caller
    set it), made current; ``device`` itself otherwise."""
    if device.type != "cuda":
        return device
    if local_rank is None:
        local_rank = torch.cuda.current_device()
    if local_rank >= torch.cuda.device_count():
        raise ValueError(
            f"LOCAL_RANK {local_rank} needs a GPU but only {torch.cuda.device_count()} are "
            "visible; start at most that many processes per machine (--nproc_per_node)"
        )
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def _die_with_launcher() -> None:
    """Kill this worker when its parent (the torchrun agent) is gone.

    torchrun starts workers in their own session and does not pass its death
    on; a ``kill -9`` of the launcher would leave them training and holding
    the run folder's lock.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_WATCH_INTERVAL_S)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="attnkit-launcher-watch", daemon=True).start()
