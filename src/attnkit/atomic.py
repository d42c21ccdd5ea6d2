"""Atomic file writes: a reader sees the old file or the new one, never a mix.

Every file attnkit writes for later use (checkpoints, tokenizers, configs,
metrics, exports) goes through :func:`atomic_write_bytes`, so an interrupted
process or a full disk never leaves a half-written file behind. A write that
fails (a full disk, a folder without permission) raises :class:`WriteError`,
which names the file that was being written; :func:`writing` gives other
writers (appends, open files, pictures) the same error.

Scratch files and folders are named ``.NAME.HOST-PID.XXXX.tmp``. A process
killed outright (SIGKILL, power loss) cannot remove its own, so each new write
of ``NAME`` first removes the scratch of writers on this host that are no
longer running; a half-built token store can be gigabytes.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import re
import secrets
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .processes import is_running

__all__ = [
    "STDOUT",
    "WriteError",
    "atomic_write_bytes",
    "make_folder",
    "new_folder_beside",
    "replace_folder",
    "writing",
]

STDOUT = "<stdout>"  # how a WriteError names standard output (a full disk under ``> FILE``)


class WriteError(OSError):
    """A file could not be written: ``cannot write PATH: REASON`` (plus ``note``, if any).

    An :class:`OSError` with the cause's ``errno`` and ``strerror``;
    ``path`` is the file meant (never a temporary file), ``note`` says what
    it means for the user (e.g. what was kept and how to go on).
    """

    def __init__(self, path: str | os.PathLike, cause: OSError, note: str = "") -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.path, self.note = Path(path), note

    def __str__(self) -> str:
        message = f"cannot write {self.path}: {self.strerror}"
        return f"{message}; {self.note}" if self.note else message

    def with_note(self, note: str) -> WriteError:
        """The same error with ``note`` (what was kept, how to go on) added."""
        return WriteError(self.path, self, note)


@contextlib.contextmanager
def writing(path: str | os.PathLike) -> Iterator[None]:
    """Turn an :class:`OSError` raised inside the block into a :class:`WriteError` naming ``path``.

    A :class:`BrokenPipeError` (the reader went away) and a :class:`WriteError`
    already naming its file pass through unchanged.
    """
    try:
        yield
    except (BrokenPipeError, WriteError):
        raise
    except OSError as err:
        raise WriteError(path, err) from err


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so a reader sees the old file or the new one, never a mix.

    Temporary file in the same folder (same file system), flush + fsync, then
    ``os.replace``; the temporary file is removed if anything fails. A device or a
    pipe (``/dev/stdout``, a named pipe) is written into instead: renaming over it
    would put a regular file in its place. A symbolic link is written through, as
    ``> LINK`` in a shell writes: the file it points to is replaced (atomically, beside
    it), and the link stays.

    Raises:
        WriteError: the folder or the file could not be written (it names ``path``).
    """
    path = Path(path)
    with writing(path):
        if _is_stream(path):  # /dev/stdout, /dev/null, a named pipe: written into, never replaced
            with open(path, "wb") as handle:
                handle.write(data)
            return
        target = Path(os.path.realpath(path)) if path.is_symlink() else path
        make_folder(target.parent)
        _write_and_replace(target, data)
    _fsync_dir(target.parent)


def make_folder(folder: Path) -> None:
    """``mkdir -p folder``; a file in the way is named.

    ``Path.mkdir`` says only "File exists" when ``folder`` itself is a file, which
    reads as if the file being written were there already.

    Raises:
        NotADirectoryError: ``folder`` or a folder above it is a file
            (``strerror``: ``out.txt is a file, not a folder``).
        OSError: another reason it cannot be made.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as err:
        blocking = next((p for p in (folder, *folder.parents) if p.is_file()), None)
        if blocking is None:
            raise
        message = f"{blocking} is a file, not a folder"
        raise NotADirectoryError(errno.ENOTDIR, message) from err


def _is_stream(path: Path) -> bool:
    """Whether ``path`` is (or links to) something other than a regular file or a folder:
    a device or a pipe, which a rename would replace with a regular file."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _write_and_replace(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_scratch_prefix(path), suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def new_folder_beside(folder: Path) -> Path:
    """An empty hidden folder next to ``folder`` (``.NAME.HOST-PID.XXXX.tmp``) to build its new
    contents in before :func:`replace_folder`; mode 0777 less the umask, as ``mkdir``
    gives (``mkdtemp`` makes 0700, which would keep the finished folder private)."""
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=_scratch_prefix(folder), suffix=".tmp"))
    os.chmod(tmp, 0o777 & ~_umask())
    return tmp


def _scratch_prefix(path: Path) -> str:
    """``.NAME.HOST-PID.``: whose scratch it is, after removing dead writers' scratch."""
    _remove_dead_scratch(path)
    return f".{path.name}.{socket.gethostname()}-{os.getpid()}."


def _remove_dead_scratch(path: Path) -> None:
    """Remove the scratch of ``path`` left by processes of this host that no longer run."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.(.+)-(\d+)\.[^.]+\.tmp")
    host = socket.gethostname()
    with contextlib.suppress(OSError):
        for entry in os.scandir(path.parent):
            found = pattern.fullmatch(entry.name)
            if found and found[1] == host and not is_running(int(found[2])):
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path)
                    else:
                        os.unlink(entry.path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable; not possible on every platform.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def replace_folder(new: str | Path, folder: str | Path) -> None:
    """Put the finished folder ``new`` at ``folder``; a folder already there is replaced whole.

    On Linux the two folders are swapped in one step (``renameat2`` with
    ``RENAME_EXCHANGE``) and the old one, now at ``new``'s scratch name, is
    deleted, so ``folder`` is always the old version or the new one, never a mix
    and never missing, even for a process killed in between. Elsewhere (or on a
    file system without the exchange) the old folder is renamed aside first: a
    kill between the two renames leaves ``folder`` missing, its old version in a
    hidden sibling ``.NAME.old-XXXX``.
    """
    new, folder = Path(new), Path(folder)
    if folder.exists() and _exchange(new, folder):
        shutil.rmtree(new, ignore_errors=True)  # the old version, under the scratch name
        return
    old = None
    if folder.exists():
        old = folder.with_name(f".{folder.name}.old-{secrets.token_hex(4)}")
        os.replace(folder, old)
    os.replace(new, folder)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2  # <fcntl.h>, <linux/fs.h>
_NO_EXCHANGE = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM})


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths ``a`` and ``b`` in one step; False where the system or the file
    system cannot (then nothing was changed).

    Raises:
        OSError: the exchange was possible but failed (e.g. permissions); names ``b``.
    """
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in _NO_EXCHANGE:
        return False
    raise OSError(err, os.strerror(err), str(b))


@functools.cache
def _renameat2():
    """glibc's ``renameat2`` (2.28 and later), or None (another libc or system)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    except OSError:
        return None
