"""How the CLI reports: the error type it turns into a one-line message and exit status 2,
and the lines it writes to stderr (progress notes, warnings)."""

import sys


class UsageError(Exception):
    """Bad user input on the command line (a malformed vector, a missing file)."""


def stderr(line: str) -> None:
    """Write ``line`` to stderr at once (stdout stays the command's output)."""
    print(line, file=sys.stderr, flush=True)


def warn(line: str) -> None:
    """``attnkit: warning: LINE`` on stderr."""
    stderr(f"attnkit: warning: {line}")
