"""Files a command writes (``evaluate --output``, ``align --out``, ``inspect --json``,
``translate --html``, ``--attention-json``, ``--attention-out``), checked on the command
line before any work: a path that cannot take the file would otherwise be found out
only after every line was translated or aligned, and the work lost; and a path that is
one of the command's own input files would be written over the text being read."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from .errors import UsageError

__all__ = ["check_output"]


def check_output(
    option: str, path: str | None, reads: Mapping[str, str | None] | None = None
) -> None:
    """Refuse ``option PATH`` before any work where ``PATH`` is a folder, or is the same file
    (by name, link or hard link) as one of ``reads`` (``{"--src": "in.txt"}``: the files
    the command reads, by option).

    Raises:
        UsageError: ``--output out is a folder; give the name of a file to write``, or
            ``--output in.txt is the file --src reads: writing it would replace that
            input; give another name``.
    """
    if not path:
        return
    if Path(path).is_dir():
        raise UsageError(f"{option} {path} is a folder; give the name of a file to write")
    for source_option, source in (reads or {}).items():
        if source and _same_file(path, source):
            raise UsageError(
                f"{option} {path} is the file {source_option} reads: writing it would replace "
                "that input; give another name"
            )


def _same_file(path: str, source: str) -> bool:
    """Whether ``path`` is the regular file ``source`` is (a terminal or a pipe named twice,
    ``/dev/stdin`` and ``/dev/stdout``, is no input to lose)."""
    try:
        return os.path.samefile(path, source) and stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # either does not exist (yet)
        return False
