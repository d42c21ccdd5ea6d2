"""The look every picture shares: palette, font size, resolution, figure size and text.

Text is drawn as given: every label, axis title and title passes through
:func:`_escape_text`, so a token such as ``$x^$`` never reaches matplotlib's
mathtext parser, and title lines longer than :data:`TITLE_MAX` characters are
cut with "..." (:func:`_shorten_title`).
"""

from __future__ import annotations

from matplotlib.figure import Figure

DPI = 100
CMAP = "Blues"
MAIN_COLOR = "#08519c"  # the dark end of CMAP
ACCENT_COLOR = "#d9622b"
BLOCKED_COLOR = "#eeeeee"
FONT_SIZE = 9
CELL_INCHES = 0.45
TITLE_MAX = 70  # characters of a title; longer ones end in "..."


def _figure(size: tuple[float, float]) -> Figure:
    return Figure(figsize=size, dpi=DPI, layout="constrained")


def _escape_text(text: str) -> str:
    """``text`` as matplotlib should draw it, character for character.

    A ``$`` is escaped to ``\\$`` so that no pair of them starts mathtext (a
    token like ``$x^$`` would otherwise fail to parse when the figure is
    saved); ``_``, ``^`` and ``\\`` are drawn as they are outside mathtext.
    Assumes matplotlib's default ``text.usetex = False``.
    """
    return str(text).replace("$", r"\$")


def _shorten_title(title: str) -> str:
    """Each line of ``title`` cut to :data:`TITLE_MAX` characters, the last three being "..."."""
    return "\n".join(
        line if len(line) <= TITLE_MAX else line[: TITLE_MAX - 3] + "..."
        for line in str(title).split("\n")
    )
