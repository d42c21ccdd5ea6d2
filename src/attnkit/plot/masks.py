"""Boolean attention masks drawn as they are: which query may attend to which key."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from .matrix import _as_zero_one, _label_axes, _matrix_axes
from .saving import _finish
from .style import BLOCKED_COLOR, FONT_SIZE, MAIN_COLOR

BORDER_MAX_CELLS = 100  # cells of a side that still get borders (about 12 px or more each)


def mask_plot(
    mask: Any,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    *,
    title: str | None = None,
    xlabel: str = "keys",
    ylabel: str = "queries",
    path: str | os.PathLike | None = None,
) -> Figure:
    """Draw a boolean attention mask: dark cells may attend, light cells are masked.

    Args:
        mask: ``(Tq, Tk)`` or ``(B, T)`` booleans or 0/1 (True = may attend), e.g.
            :func:`~attnkit.causal_mask` or :func:`~attnkit.padding_mask`.
        row_labels, col_labels: labels for the sides; default 1..n.
        title, xlabel, ylabel: text around the picture.
        path: save to this file (``.png``, ``.svg`` or ``.pdf``).

    Returns:
        the figure.

    Raises:
        ValueError: not a 2-D matrix of booleans or 0/1, empty, label counts
            that differ from the matrix, or an unknown extension.
    """
    values = _as_zero_one("mask", mask)
    labelled = (row_labels is not None, col_labels is not None)
    fig, ax = _matrix_axes(values.shape, title, xlabel, ylabel, labelled)
    cmap = ListedColormap([BLOCKED_COLOR, MAIN_COLOR])
    image = ax.imshow(values, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    _label_axes(ax, values.shape, row_labels, col_labels)
    _cell_borders(ax, values.shape)
    bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.03, ticks=[0.25, 0.75])
    bar.ax.set_yticklabels(["masked", "may attend"], fontsize=FONT_SIZE - 1)
    return _finish(fig, path)


def _cell_borders(ax, shape: tuple[int, int]) -> None:
    """White lines between the cells of each side of at most :data:`BORDER_MAX_CELLS` cells.

    Borders make single cells countable in a mostly blocked or allowed mask. A line
    is about 2 px wide, so on a side of hundreds of cells (a few px each) they would
    cover the cells and the mask would be drawn blank: such a side gets none.
    """
    rows, cols = shape
    if cols <= BORDER_MAX_CELLS:
        ax.set_xticks(np.arange(cols + 1) - 0.5, minor=True)
        ax.grid(which="minor", axis="x", color="white", linewidth=1.5)
    if rows <= BORDER_MAX_CELLS:
        ax.set_yticks(np.arange(rows + 1) - 0.5, minor=True)
        ax.grid(which="minor", axis="y", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
