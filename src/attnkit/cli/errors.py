"""How the CLI reports: the error type it turns into a one-line message and exit status 2,
the lines it writes to stderr (progress notes, warnings), and a stdout whose failed
writes name it (:class:`NamedStdout`: status 74)."""

import sys

from ..atomic import STDOUT, writing


class UsageError(Exception):
    """Bad user input on the command line (a malformed vector, a missing file)."""


def stderr(line: str) -> None:
    """Write ``line`` to stderr at once (stdout stays the command's output)."""
    print(line, file=sys.stderr, flush=True)


def warn(line: str) -> None:
    """``attnkit: warning: LINE`` on stderr."""
    stderr(f"attnkit: warning: {line}")


class NamedStdout:
    """``sys.stdout`` for the length of a command: a write or flush that fails (a full
    disk under ``> FILE``) raises :class:`~attnkit.atomic.WriteError` naming ``<stdout>``,
    so every command reports it in one line with status 74, not a traceback. A reader
    that went away (:class:`BrokenPipeError`) passes through; everything else is the
    wrapped stream's."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        with writing(STDOUT):
            return self._stream.write(text)

    def flush(self) -> None:
        with writing(STDOUT):
            self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)
