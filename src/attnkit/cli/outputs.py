"""Files a command writes once its work is done (``evaluate --output``, ``align --out``,
``inspect --json``, ``translate --html``), checked on the command line before that work:
a path that cannot take the file would otherwise be found out only after every line
was translated or aligned, and the work lost."""

from __future__ import annotations

from pathlib import Path

from .errors import UsageError

__all__ = ["check_output"]


def check_output(option: str, path: str | None) -> None:
    """Refuse ``option PATH`` before any work where ``PATH`` is a folder.

    Raises:
        UsageError: ``--output out is a folder; give the name of a file to write``.
    """
    if path and Path(path).is_dir():
        raise UsageError(f"{option} {path} is a folder; give the name of a file to write")
