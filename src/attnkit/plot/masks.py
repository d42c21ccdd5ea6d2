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
    fig, ax = _matrix_axes(values.shape, title, xlabel, ylabel)
    cmap = ListedColormap([BLOCKED_COLOR, MAIN_COLOR])
    image = ax.imshow(values, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    _label_axes(ax, values.shape, row_labels, col_labels)
    # Cell borders make single cells countable in a mostly blocked or allowed mask.
    ax.set_xticks(np.arange(values.shape[1] + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(values.shape[0] + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.03, ticks=[0.25, 0.75])
    bar.ax.set_yticklabels(["masked", "may attend"], fontsize=FONT_SIZE - 1)
    return _finish(fig, path)
