"""attnkit.atomic: scratch left by a killed writer is removed by the next write of the same
name; a symbolic link is written through; a folder replaced whole is never missing."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import sys

import pytest

from attnkit import atomic
from attnkit.atomic import WriteError, atomic_write_bytes, new_folder_beside


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _scratch(folder, name: str, host: str, pid: int, is_dir: bool):
    path = folder / f".{name}.{host}-{pid}.k3j_x9q2.tmp"
    if is_dir:
        path.mkdir()
        (path / "tokens.bin").write_bytes(b"\0" * 4096)
    else:
        path.write_bytes(b"half a checkpoint")
    return path


def test_a_new_write_removes_the_scratch_of_dead_writers_of_that_name_only(tmp_path):
    host, dead = socket.gethostname(), _dead_pid()
    gone = [
        _scratch(tmp_path, "last.safetensors", host, dead, is_dir=False),
        _scratch(tmp_path, "store", host, dead, is_dir=True),
    ]
    kept = [
        _scratch(tmp_path, "last.safetensors", host, os.getppid(), is_dir=False),  # running
        _scratch(tmp_path, "last.safetensors", "another-host", dead, is_dir=False),
        _scratch(tmp_path, "best.safetensors", host, dead, is_dir=False),  # another file's
    ]
    atomic_write_bytes(tmp_path / "last.safetensors", b"weights")
    folder = new_folder_beside(tmp_path / "store")
    assert [p.exists() for p in gone] == [False, False]
    assert all(p.exists() for p in kept)
    assert folder.is_dir() and folder.name.startswith(f".store.{host}-{os.getpid()}.")
    assert (tmp_path / "last.safetensors").read_bytes() == b"weights"


def test_a_sigkilled_writer_s_scratch_is_gone_after_the_next_write(tmp_path):
    target = tmp_path / "big.bin"
    code = (
        "import os, signal, attnkit.atomic as a\n"
        "from pathlib import Path\n"
        "def die(fd, *_):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "a.os.fsync = die\n"
        f"a.atomic_write_bytes(Path({str(target)!r}), b'x' * 1000)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], check=False)
    assert proc.returncode == -9
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".big.bin.") and left[0].endswith(".tmp")
    atomic_write_bytes(target, b"whole")
    assert [p.name for p in tmp_path.iterdir()] == ["big.bin"]


def test_a_symbolic_link_is_written_through_and_stays_a_link(tmp_path):
    # before, the link itself was replaced by a regular file: `evaluate --output latest.txt`
    # with latest.txt -> runs/2024.txt left runs/2024.txt as it was and the link gone
    (tmp_path / "runs").mkdir()
    real = tmp_path / "runs" / "2024.txt"
    real.write_bytes(b"old")
    link = tmp_path / "latest.txt"
    link.symlink_to("runs/2024.txt")  # relative, as ln -s makes it
    chain = tmp_path / "newest.txt"
    chain.symlink_to(link)
    atomic_write_bytes(chain, b"new")
    assert chain.is_symlink() and link.is_symlink()
    assert os.readlink(chain) == str(link) and os.readlink(link) == "runs/2024.txt"
    assert real.read_bytes() == b"new"
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["2024.txt"]  # no scratch


def test_a_dangling_link_gets_its_file_made(tmp_path):
    link = tmp_path / "out.txt"
    link.symlink_to(tmp_path / "made.txt")
    atomic_write_bytes(link, b"text")
    assert link.is_symlink() and (tmp_path / "made.txt").read_bytes() == b"text"


def test_a_file_in_the_way_of_the_folder_is_named(tmp_path):
    # before: "cannot write out/x.txt: File exists", as if x.txt were there already
    blocking = tmp_path / "out"
    blocking.write_text("a file, not a folder")
    for path in (blocking / "x.txt", blocking / "a" / "b" / "x.txt"):
        with pytest.raises(WriteError) as caught:
            atomic_write_bytes(path, b"text")
        assert str(caught.value) == f"cannot write {path}: {blocking} is a file, not a folder"
        assert caught.value.errno == errno.ENOTDIR
    assert blocking.read_text() == "a file, not a folder"


def _two_folders(tmp_path):
    for name, text in (("run", "old"), (".run.scratch.tmp", "new")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "meta.json").write_text(text)
    return tmp_path / ".run.scratch.tmp", tmp_path / "run"


@pytest.mark.skipif(atomic._renameat2() is None, reason="needs Linux renameat2")
def test_a_kill_while_a_folder_is_replaced_never_leaves_it_missing(tmp_path, monkeypatch):
    # the old folder was renamed aside, then the new one in: a kill in between left no folder
    new, folder = _two_folders(tmp_path)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", killed)
    monkeypatch.setattr(shutil, "rmtree", killed)  # killed before the old version is deleted
    with pytest.raises(KeyboardInterrupt):
        atomic.replace_folder(new, folder)
    assert (folder / "meta.json").read_text() == "new"
    assert (new / "meta.json").read_text() == "old"  # scratch, removed by the next build


def test_a_folder_is_replaced_whole_where_it_cannot_be_swapped(tmp_path, monkeypatch):
    new, folder = _two_folders(tmp_path)
    monkeypatch.setattr(atomic, "_renameat2", lambda: None)
    atomic.replace_folder(new, folder)
    assert (folder / "meta.json").read_text() == "new" and os.listdir(tmp_path) == ["run"]
