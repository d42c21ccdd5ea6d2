"""One run folder, one writer: an exclusive OS lock on ``RUN/.lock`` while training writes.

``attnkit train`` (fresh, ``--resume`` or ``--overwrite``) takes the lock
before it writes anything into the run folder and holds it until it returns;
``attnkit prepare`` and ``attnkit average`` take it too.
A second training of the same folder fails at once with :class:`RunInUse`
("RUN is in use by another training (pid N on HOST); wait for it or stop it";
"by attnkit prepare" or "by attnkit average" when one of those holds it)
instead of interleaving its checkpoints and ``metrics.jsonl`` rows with the
first one's. Of two fresh starts racing on the same new folder exactly one
gets the lock.

The lock is ``fcntl.flock`` on an open file: the kernel drops it when the
holder's last descriptor closes, which includes any death of the process
(SIGKILL, OOM killer, power loss of a client on NFS once its lease expires),
so a stale lock never needs cleaning up by hand. The ``.lock`` file itself
stays in the folder and is never deleted: unlinking a lock file while another
process waits on it would let two holders lock two different files. It
holds ``pid host work`` of the current (or last) holder, only for the error
message.

Readers (``attnkit translate``, ``evaluate``, the explorer) never take the
lock: checkpoints are written atomically and
:func:`~attnkit.nmt.runs.checkpoint.load_checkpoint` re-reads a record whose
weights file was replaced under it, so they keep working while a training
writes.

Platforms: Linux and macOS, on local file systems and on NFS (Linux emulates
``flock`` with NFS byte-range locks). On a file system that refuses locks
(some FUSE mounts, Lustre without ``-o flock``) training goes on with a
warning that the folder is unprotected. Windows has no ``fcntl``; there the
lock is not taken (unsupported, documented here and in the README).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ...atomic import writing

try:
    import fcntl
except ImportError:  # Windows: no advisory locks through fcntl
    fcntl = None

__all__ = ["LOCK_NAME", "RunInUse", "run_lock"]

LOCK_NAME = ".lock"
_HOLDER_WAIT_S = 1.0  # how long to wait for a new holder to write its pid
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}
WORK_TRAINING = "another training"


class RunInUse(ValueError):
    """Another process holds the run folder's lock (a ``ValueError``: the CLI exits with 2)."""


@contextlib.contextmanager
def run_lock(
    run_dir: str | Path, warn: Callable[[str], None] = print, *, work: str = WORK_TRAINING
) -> Iterator[Path]:
    """Hold the exclusive training lock of ``run_dir`` for the ``with`` block.

    Creates ``run_dir`` (and its parents) if needed, opens ``run_dir/.lock``
    and takes a non-blocking exclusive ``flock`` on it, then records
    ``pid host work`` in it. The lock is released when the block ends, or by the
    kernel when the process dies.

    Args:
        run_dir: the run folder to be written.
        warn: told one line when the file system cannot lock (training goes on).
        work: what holds the lock, as a second process's error names it
            ("another training", "attnkit prepare", "attnkit average").

    Yields:
        The path of the lock file.

    Raises:
        RunInUse: another process (or another open of the file in this one)
            holds the lock; the message names ``run_dir`` and the holder's pid
            and host.
        WriteError: ``run_dir`` or its lock file cannot be made (a read-only
            disk, a file in the way); the message names it.
    """
    run_dir = Path(run_dir)
    with writing(run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    if fcntl is None:
        yield path
        return
    with writing(path):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        if _try_lock(fd, run_dir, warn):
            _record_holder(fd, work)
        yield path
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _try_lock(fd: int, run_dir: Path, warn: Callable[[str], None]) -> bool:
    """Lock ``fd``; False when the file system cannot lock. Raises :class:`RunInUse`."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RunInUse(f"{run_dir} is in use by {_holder(fd)}; wait for it or stop it") from None
    except OSError as err:
        if err.errno not in _UNSUPPORTED:
            raise
        warn(
            f"warning: cannot lock {run_dir / LOCK_NAME} ({err.strerror}); make sure no "
            "other training writes to this folder"
        )
        return False
    return True


def _record_holder(fd: int, work: str) -> None:
    """Write ``pid host work`` into the (locked) lock file, replacing a previous holder's."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {socket.gethostname()} {work}\n".encode(), 0)


def _holder(fd: int) -> str:
    """``WORK (pid N on HOST)`` as the holder wrote it (waiting briefly for a holder that just
    locked); a holder of an older attnkit wrote no work: a training."""
    deadline = time.monotonic() + _HOLDER_WAIT_S
    while True:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        fields = text.split(maxsplit=2)
        if (len(fields) >= 2 and text.endswith("\n")) or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    if len(fields) < 2:
        return f"{WORK_TRAINING} (pid unknown)"
    work = fields[2].strip() if len(fields) == 3 else WORK_TRAINING
    return f"{work} (pid {fields[0]} on {fields[1]})"
