"""A function mapped over a stream in worker processes, results in input order.

Building a token store is two kinds of work: reading the files (in the
process that owns them) and turning lines into ids (decoding, cleaning and
sentencepiece's encoding, which holds the interpreter lock while it runs, so
threads do not overlap the two). :func:`ordered_map` hands the second to
worker processes while the caller keeps reading: with ``workers`` processes
the stream moves at about the speed of its slower half, not their sum, and
the less the reading half does per line (:mod:`.line_chunks`), the more of
the cores the workers get.

Workers are started by ``forkserver`` (never ``fork``: the parent may run
PyTorch's thread pool) and get the function once, at start-up, not with every
item. They ignore SIGINT: Ctrl-C reaches the parent, which cancels what is
queued and lets the workers finish their current item. A parent that is
killed (SIGKILL, the out-of-memory killer) shuts nothing down: each worker
then ends itself within a second, instead of waiting for work for ever (and
holding the parent's stdout, so a ``| tee`` would never end). As with any
``forkserver`` or ``spawn`` pool, each worker imports the caller's main module:
a script that builds a store on several workers must keep its top-level code
under ``if __name__ == "__main__":`` (the ``attnkit`` command does).
"""

from __future__ import annotations

import multiprocessing
import os
import select
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from itertools import islice
from typing import Any, TypeVar

from ...processes import is_running

__all__ = ["ordered_map"]

T = TypeVar("T")
R = TypeVar("R")

_installed: Callable[[Any], Any] | None = None  # the function, inside a worker


def ordered_map(
    fn: Callable[[T], R], items: Iterable[T], workers: int, *, in_process: int = 1
) -> Iterator[R]:
    """``fn(item)`` for each of ``items``, in order, on up to ``workers`` processes.

    The first ``in_process`` items are mapped here, so a stream that ends
    there (a small corpus) never starts a process. After that at most
    ``2 * workers`` items are in flight, so memory follows ``workers``, not
    the stream's length.

    Args:
        fn: a picklable function (a module-level function, or an instance of a
            module-level class whose attributes pickle).
        items: read lazily, in this process; what reading raises is raised here.
        workers: worker processes; <= 1 maps everything in this process.
        in_process: leading items mapped in this process.

    Raises:
        whatever ``fn`` raises for an item (re-raised here, same type and message),
        after the items before it were yielded.
        BrokenProcessPool: a worker ended abruptly; the message says the likely
            causes, first among them a script without a ``__main__`` guard.
    """
    stream = iter(items)
    yield from map(fn, islice(stream, in_process))
    if workers <= 1:
        yield from map(fn, stream)
        return
    first = next(stream, _END)
    if first is _END:
        return
    pool = ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("forkserver"),
        initializer=_install,
        initargs=(fn, os.getpid()),
    )
    pending: deque[Future] = deque([pool.submit(_call, first)])
    try:
        for item in stream:
            pending.append(pool.submit(_call, item))
            if len(pending) >= 2 * workers:
                yield _result(pending.popleft())
        while pending:
            yield _result(pending.popleft())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


_END = object()

_BROKEN = (
    "a worker process ended abruptly ({error}). Each worker imports the main module: a "
    "script that trains (or builds a token store) must keep its top-level code under "
    "'if __name__ == \"__main__\":', or the workers run it again (a training there finds "
    "its run folder in use). Otherwise a worker was killed (out of memory?); "
    "train.threads: 1 does the work in this process"
)


def _result(future: Future[R]) -> R:
    """``future.result()``; a broken pool is re-raised saying what usually breaks it."""
    try:
        return future.result()
    except BrokenProcessPool as err:
        raise BrokenProcessPool(_BROKEN.format(error=err)) from err


def _install(fn: Callable[[Any], Any], owner: int) -> None:
    global _installed
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _installed = fn
    threading.Thread(target=_end_with, args=(owner,), daemon=True).start()


def _end_with(owner: int) -> None:
    """End this worker once process ``owner`` (the pool's) has ended without shutting it down."""
    try:
        watch = os.pidfd_open(owner)  # Linux: readable when ``owner`` ends
    except (AttributeError, OSError):
        while is_running(owner):
            time.sleep(1.0)
    else:
        select.select([watch], [], [])
    os._exit(1)


def _call(item: Any) -> Any:
    assert _installed is not None, "a worker runs only after _install"
    return _installed(item)
