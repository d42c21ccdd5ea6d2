"""Writing a figure to a file: PNG, SVG or PDF by the extension, atomically, checked first."""

from __future__ import annotations

import io
import os
import re
import warnings
from pathlib import Path

from matplotlib.figure import Figure

from ..atomic import atomic_write_bytes
from .style import DPI

FORMATS = (".png", ".svg", ".pdf")


def check_path(path: str | os.PathLike) -> Path:
    """Check that :func:`save` can write a picture to ``path``, before any work is done.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: an extension other than ``.png``, ``.svg`` or ``.pdf``; a
            path that is a folder or ends with ``/``; or a folder that cannot be
            created or written (the nearest existing one is named).
    """
    named = os.fspath(path)
    path = Path(path)  # drops a trailing '/': "out.png/" would become the file out.png
    if named.endswith(("/", os.sep)):
        raise ValueError(f"cannot save a picture as {named!r}: it names a folder (ends with '/')")
    if path.suffix.lower() not in FORMATS:
        raise ValueError(f"cannot save a picture as {path.name!r}: use a {', '.join(FORMATS)} file")
    if path.is_dir():
        raise ValueError(f"cannot save a picture as {str(path)!r}: it is a folder")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"cannot save a picture as {str(path)!r}: cannot write in {str(folder)!r}")
    return path


def save(fig: Figure, path: str | os.PathLike) -> Path:
    """Save ``fig`` atomically as PNG, SVG or PDF, chosen by the extension of ``path``.

    Raises:
        ValueError: anything :func:`check_path` rejects.
        attnkit.atomic.WriteError: the file could not be written (a full disk).
    """
    path = check_path(path)
    picture = io.BytesIO()  # drawn first, then written whole (:mod:`attnkit.atomic`)
    _savefig(fig, picture, path)
    atomic_write_bytes(path, picture.getvalue())
    return path


def _savefig(fig: Figure, handle, path: Path) -> None:
    """``fig.savefig``, with matplotlib's warning per character the font lacks (emoji,
    CJK in DejaVu Sans) replaced by one warning naming them all."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(handle, format=path.suffix.lower()[1:], dpi=DPI)
    missing = set()
    for w in caught:
        glyph = re.match(r"Glyph (\d+) .*missing from font", str(w.message))
        if glyph:
            missing.add(chr(int(glyph.group(1))))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if missing:
        warnings.warn(
            f"{path.name}: the plot font has no glyph for {' '.join(sorted(missing))}; "
            "they are drawn as boxes",
            stacklevel=3,
        )


def _finish(fig: Figure, path: str | os.PathLike | None) -> Figure:
    if path is not None:
        save(fig, path)
    return fig


def image_size(fig: Figure) -> tuple[int, int]:
    """The (width, height) in pixels that :func:`save` writes for ``fig`` as PNG."""
    width, height = fig.get_size_inches()
    return round(width * DPI), round(height * DPI)
