"""Progress for a terminal or for a log: a tqdm bar, or plain lines every so often.

A tqdm bar redraws itself with carriage returns; written to a file or a pipe
(``attnkit train ... 2> train.log``, a job scheduler's log) that becomes one
endless line of overwritten text. :func:`progress` returns a bar when stderr is
a terminal and a :class:`LineProgress` otherwise, which writes one plain line
every ``every_s`` seconds and one at the end.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

__all__ = ["LineProgress", "progress"]


class LineProgress:
    """tqdm's ``update``/``set_postfix``/``close`` as plain lines: ``DESC: N/TOTAL UNIT, k=v``."""

    def __init__(
        self,
        *,
        desc: str = "",
        total: int | None = None,
        initial: int = 0,
        unit: str = "it",
        every_s: float = 30.0,
        file: TextIO | None = None,
    ) -> None:
        self.desc, self.total, self.n, self.unit = desc, total, initial, unit.strip()
        self.every_s, self.file = every_s, file
        self.start = self.last = time.monotonic()
        self.started_at, self.postfix = initial, ""
        self.shown = initial  # the count of the last line written

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.monotonic() - self.last >= self.every_s:
            self._line()

    def set_postfix(self, refresh: bool = False, **values: Any) -> None:
        self.postfix = ", ".join(f"{k} {v}" for k, v in values.items())

    def close(self) -> None:
        """A last line, unless the last periodic one already gave the final count."""
        if self.n > self.started_at and self.n != self.shown:
            self._line()

    def _line(self) -> None:
        self.last = time.monotonic()
        rate = (self.n - self.started_at) / max(self.last - self.start, 1e-9)
        count = f"{self.n}/{self.total}" if self.total else f"{self.n}"
        extra = f", {self.postfix}" if self.postfix else ""
        lead = f"{self.desc}: " if self.desc else ""
        line = f"{lead}{count} {self.unit}, {rate:.1f} {self.unit}/s{extra}"
        print(line, file=self.file or sys.stderr, flush=True)
        self.shown = self.n

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(enabled: bool, *, every_s: float = 30.0, **tqdm_args: Any):
    """A tqdm bar on a terminal, plain lines (:class:`LineProgress`) elsewhere, or nothing.

    ``tqdm_args`` are tqdm's (``total``, ``initial``, ``desc``, ``unit``, ...);
    the plain lines use ``desc``, ``total``, ``initial`` and ``unit``.
    """
    from tqdm.auto import tqdm

    stream = tqdm_args.get("file") or sys.stderr
    if not enabled or stream.isatty():
        return tqdm(disable=not enabled, **tqdm_args)
    keep = {k: tqdm_args[k] for k in ("desc", "total", "initial", "unit") if k in tqdm_args}
    return LineProgress(every_s=every_s, file=tqdm_args.get("file"), **keep)
