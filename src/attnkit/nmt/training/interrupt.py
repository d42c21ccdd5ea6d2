"""Stopping training cleanly: SIGINT/SIGTERM (and SIGHUP: the terminal closed, an ssh session
dropped) become a request the loop honours between steps; outside the loop (the data being
prepared, the run being finished) SIGTERM and SIGHUP stop at once, as Ctrl-C does there.

A run started under ``nohup`` ignores SIGHUP, and goes on ignoring it."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

__all__ = ["StopRequest", "terminate_as_ctrl_c"]


def _hangup() -> tuple[signal.Signals, ...]:
    """SIGHUP where it exists (not on Windows) and is not ignored (``nohup``); else nothing."""
    hup = getattr(signal, "SIGHUP", None)
    return (hup,) if hup is not None and signal.getsignal(hup) is not signal.SIG_IGN else ()


@contextlib.contextmanager
def terminate_as_ctrl_c() -> Iterator[None]:
    """SIGTERM (and SIGHUP, unless ignored) raises :class:`KeyboardInterrupt` inside the
    block, as Ctrl-C does.

    Before the first step and after the last one, Ctrl-C stops training at once
    and leaves nothing half-made (the callers clean up on KeyboardInterrupt); a
    SIGTERM there (``kill``, a scheduler's ``scancel``, a shutdown) ended the
    process outright instead, with status 143 and no word. Inside, a
    :class:`StopRequest` takes them over and gives them back. Only the main thread
    may install a handler; elsewhere this does nothing.
    """

    def interrupt(signum: int, frame) -> None:
        raise KeyboardInterrupt

    previous = {}
    try:
        for sig in (signal.SIGTERM, *_hangup()):
            previous[sig] = signal.signal(sig, interrupt)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class StopRequest:
    """SIGINT/SIGTERM (and SIGHUP, unless ignored) set a flag the loop checks between steps;
    a second SIGINT aborts.

    Only the main thread may install signal handlers; elsewhere this does nothing.

    Args:
        announce: say on stderr that a checkpoint will be saved (False on the
            ranks of a torchrun job other than 0, which all get the signal).
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, announce: bool = True) -> None:
        self.requested, self.previous, self.announce = "", {}, announce

    def __enter__(self) -> StopRequest:
        for sig in (*self.SIGNALS, *_hangup()):
            try:
                self.previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                break
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name
        if not self.announce:
            return
        note = f"\n{self.requested}: saving a checkpoint after this step (Ctrl-C again to abort)\n"
        # os.write, not print: printing here while the interrupted code prints raises
        # "reentrant call" on the buffered stream.
        with contextlib.suppress(OSError):
            os.write(2, note.encode())
