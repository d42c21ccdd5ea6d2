"""Files a command writes (``evaluate --output``, ``align --out``, ``inspect --json``,
``translate --html``, ``--attention-json``, ``--attention-out``), checked on the command
line before any work: a path that cannot take the file would otherwise be found out
only after every line was translated or aligned, and the work lost; and a path that is
one of the command's own input files would be written over the text being read; and
``-``, stdout to most tools, would be a file named ``-``."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from .errors import UsageError

__all__ = ["check_distinct_outputs", "check_output"]


def check_output(
    option: str, path: str | None, reads: Mapping[str, str | None] | None = None
) -> None:
    """Refuse ``option PATH`` before any work where ``PATH`` is ``-`` (which would make a file
    named ``-``, where ``-`` means stdout to most tools), a folder, a file whose folder cannot
    be made or written, or the same file (by name, link or hard link) as one of ``reads``
    (``{"--src": "in.txt"}``: the files the command reads, by option).

    Raises:
        UsageError: ``--out -: '-' is no file name here (stdout is not written through
            it); give a file name, ./- for a file named -``, ``--output out is a folder;
            give the name of a file to write``, ``--output a.txt/out.txt: a.txt is a file,
            not a folder``, ``--output /x/out.txt: no permission to write in /x``, or
            ``--output in.txt is the file --src reads: writing it would replace that input;
            give another name``.
    """
    if not path:
        return
    if path == "-":
        raise UsageError(
            f"{option} -: '-' is no file name here (stdout is not written through it); give a "
            "file name, ./- for a file named -"
        )
    if Path(path).is_dir():
        raise UsageError(f"{option} {path} is a folder; give the name of a file to write")
    _check_folder_of(option, path)
    for source_option, source in (reads or {}).items():
        if source and _same_file(path, source):
            raise UsageError(
                f"{option} {path} is the file {source_option} reads: writing it would replace "
                "that input; give another name"
            )


def _check_folder_of(option: str, path: str) -> None:
    """Refuse ``path`` where its folder cannot be made or written: the nearest part of it
    that exists is a file (``out.txt/x.json``), or a folder this user may not write in
    (the writers make the missing folders below it). A device or a pipe (``/dev/stdout``,
    ``/dev/null``, a named pipe) is written into, never replaced, so its folder (``/dev``,
    which only root may write in) is not asked; a link is followed, as the writers do."""
    target = Path(path)
    if _is_device(target):  # os.stat follows a link to the device
        return
    if target.is_symlink():  # the file it points to is replaced, beside it
        target = Path(os.path.realpath(target))
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"{option} {path}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: no permission to write in {folder}")


def _same_file(path: str, source: str) -> bool:
    """Whether ``path`` is the regular file ``source`` is (a terminal or a pipe named twice,
    ``/dev/stdin`` and ``/dev/stdout``, is no input to lose)."""
    try:
        return os.path.samefile(path, source) and stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # either does not exist (yet)
        return False


def check_distinct_outputs(outputs: Mapping[str, str | None]) -> None:
    """Refuse two of a command's outputs (``{"--html": "a.html", ...}``) naming one file:
    both would write it, and what is left is neither.

    Raises:
        UsageError: ``--attention-out a.txt and --attention-json a.txt are the same file;
            give each its own``.
    """
    seen: dict[Path, str] = {}
    for option, path in outputs.items():
        if not path:
            continue
        key = Path(os.path.realpath(path))
        if key in seen and not _is_device(key):
            raise UsageError(
                f"{seen[key]} and {option} {path} are the same file; give each its own"
            )
        seen[key] = f"{option} {path}"


def _is_device(path: Path) -> bool:
    """Whether ``path`` is a terminal, a pipe or a device (``/dev/stderr``): writers share it."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # not made yet: a file to be written
        return False
