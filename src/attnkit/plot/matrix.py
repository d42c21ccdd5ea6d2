"""A matrix picture's input and axes: numbers and masks checked, rows and columns labelled.

Rows are queries (target tokens) and columns are keys (source tokens), as in
Bahdanau et al. 2015, fig. 3; the column labels sit on top.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .style import CELL_INCHES, FONT_SIZE, _escape_text, _figure, _shorten_title

#: Least room along a labelled side per cell: one tick label (FONT_SIZE - 1 pt) and a gap.
LABEL_INCHES = 0.14
#: A labelled side never grows past this: 10,000 px at DPI = 100, room for about 700
#: labels (translate cuts a sentence at 256 tokens), and at most 400 MB of RGBA for a
#: square picture; 600 inches (Agg's own limit) would be 14 GB.
MAX_LABELLED_INCHES = 100.0


def _side_inches(
    n: int, base: float, least: float, most: float, cell: float, labelled: bool
) -> float:
    """Inches for a side of ``n`` cells: ``base`` plus ``cell`` a cell, within
    [``least``, ``most``]; a labelled side grows past ``most`` when its labels need
    :data:`LABEL_INCHES` each, so that a long sentence's tokens do not run together."""
    size = min(max(base + cell * n, least), most)
    if labelled:
        size = max(size, min(base + LABEL_INCHES * n, MAX_LABELLED_INCHES))
    return size


def _matrix_axes(
    shape: tuple[int, int],
    title: str | None,
    xlabel: str,
    ylabel: str,
    labelled: tuple[bool, bool] = (False, False),
):
    """A figure and axes for a ``(rows, cols)`` matrix; ``labelled``: whether the rows and
    the columns get a label each (room for them, see :func:`_side_inches`)."""
    rows, cols = shape
    width = _side_inches(cols, 2.2, 4.0, 16.0, CELL_INCHES, labelled[1])
    height = _side_inches(rows, 1.6, 3.0, 16.0, CELL_INCHES, labelled[0])
    fig = _figure((round(width, 2), round(height, 2)))  # whole pixels at DPI = 100
    ax = fig.add_subplot()
    ax.set_xlabel(_escape_text(xlabel), fontsize=FONT_SIZE)
    ax.set_ylabel(_escape_text(ylabel), fontsize=FONT_SIZE)
    if title:
        ax.set_title(_escape_text(_shorten_title(title)), fontsize=FONT_SIZE + 1)
    return fig, ax


NUMBERED_MAX = 40  # unlabelled sides longer than this number every k-th cell only


def _label_axes(ax, shape: tuple[int, int], row_labels, col_labels) -> None:
    row_ticks, rows = _labels("row_labels", row_labels, shape[0], "rows", shape)
    col_ticks, cols = _labels("col_labels", col_labels, shape[1], "columns", shape)
    ax.set_yticks(row_ticks, rows, fontsize=FONT_SIZE - 1)
    rotate = 90 if max(len(c) for c in cols) * len(cols) > 40 else 0
    ax.set_xticks(col_ticks, cols, fontsize=FONT_SIZE - 1, rotation=rotate)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")


def _labels(
    arg: str, labels, n: int, side: str, shape: tuple[int, int]
) -> tuple[list[int], list[str]]:
    """Tick positions and their labels: every given label, or the numbers 1..n; on a
    side of more than :data:`NUMBERED_MAX` unlabelled cells, 1 and every multiple of a
    round step (10, 20, 50, 100, ...), so that the numbers do not run together."""
    if labels is None:
        step = _round_step(n)
        ticks = [i for i in range(n) if i == 0 or (i + 1) % step == 0]
        return ticks, [str(i + 1) for i in ticks]
    if len(labels) != n:
        raise ValueError(
            f"{arg} has {len(labels)} labels but the matrix has {n} {side} (shape {shape})"
        )
    return list(range(n)), [_escape_text(str(x)) for x in labels]


def _round_step(n: int) -> int:
    """1 up to :data:`NUMBERED_MAX` cells, else the least of 10, 20, 50, 100, 200, ...
    that leaves at most 20 numbers."""
    if n <= NUMBERED_MAX:
        return 1
    step = 10
    while n / step > 20:
        step = step * 5 // 2 if str(step)[0] == "2" else step * 2
    return step


def _as_matrix(arg: str, x: Any, row_ok: bool = False) -> np.ndarray:
    """``x`` as a finite 2-D float array; a vector is one row when ``row_ok``."""
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().float().numpy()
    try:
        values = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{arg} must be a rectangular matrix of numbers: {err}") from None
    if row_ok and values.ndim == 1:
        values = values[None]  # (S,) -> (1, S): a key mask for every query
    if values.ndim != 2:
        raise ValueError(f"{arg} must be a 2-D matrix (rows x columns), got shape {values.shape}")
    if values.size == 0:
        raise ValueError(f"{arg} is empty (shape {values.shape})")
    bad = np.argwhere(~np.isfinite(values))
    if len(bad):
        i, j = bad[0]
        raise ValueError(
            f"{arg} has {len(bad)} NaN or infinite entr{'y' if len(bad) == 1 else 'ies'} "
            f"(first at row {i}, column {j})"
        )
    return values


def _as_zero_one(arg: str, x: Any, row_ok: bool = False) -> np.ndarray:
    values = _as_matrix(arg, x, row_ok)
    if not np.isin(values, (0.0, 1.0)).all():
        raise ValueError(f"{arg} must hold booleans or 0/1 (1 = may attend)")
    return values


def _as_mask(mask: Any, shape: tuple[int, int]) -> np.ndarray:
    """The heatmap's mask as booleans of ``shape``, True = may attend; all True for None."""
    if mask is None:
        return np.ones(shape, dtype=bool)
    values = _as_zero_one("mask", mask, row_ok=True)
    try:
        return np.broadcast_to(values.astype(bool), shape)
    except ValueError:
        raise ValueError(
            f"mask has shape {values.shape}, which does not broadcast to the weights' {shape}"
        ) from None
