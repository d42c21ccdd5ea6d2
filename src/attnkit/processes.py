"""Whether a process of this machine is still running (for cleaning up after killed ones)."""

from __future__ import annotations

import os

__all__ = ["is_running"]


def is_running(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine: signal 0 checks without sending.

    Another user's process counts as running (the check is refused, not failed).
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
