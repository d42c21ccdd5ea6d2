"""Attention weights as heatmaps: one matrix (:func:`heatmap`) or several side by side
(:func:`heatmap_grid`), masked cells grey and hatched."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.collections import PatchCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from .matrix import _as_mask, _as_matrix, _label_axes, _matrix_axes, _side_inches
from .saving import _finish
from .style import (
    BLOCKED_COLOR,
    CELL_INCHES,
    CMAP,
    FONT_SIZE,
    _escape_text,
    _figure,
    _shorten_title,
)

HATCH_COLOR = "#8c8c8c"
MASKED_HATCH = "///"
ANNOTATE_MAX_SIDE = 16  # annotate cells when both sides are at most this long
# Labelled panels of a grid widen up to this in all (8 heads of 8 inches, 6400 px):
# each is a whole (Tq, Tk) picture, and 8 of 38 inches would be 30000 px to draw.
GRID_MAX_INCHES = 64.0


def heatmap(
    weights: Any,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    *,
    mask: Any = None,
    title: str | None = None,
    xlabel: str = "source (keys)",
    ylabel: str = "target (queries)",
    annotate: bool | None = None,
    precision: int = 2,
    path: str | os.PathLike | None = None,
) -> Figure:
    """Draw attention weights as a heatmap, one row per query and one column per key.

    Masked cells (``mask`` False) are drawn grey and hatched, without a number,
    and a legend note below the picture says so: a masked key's weight is 0 by
    construction, which is not the same as a real weight that rounds to 0.00.

    Args:
        weights: ``(T, S)`` (queries x keys), a nested list, numpy array or
            tensor of real numbers; the colour scale is [0, 1] when every
            unmasked weight lies there, else their range.
        row_labels: ``T`` labels for the rows (target tokens); default 1..T.
        col_labels: ``S`` labels for the columns (source tokens); default 1..S.
        mask: booleans or 0/1 broadcastable to ``(T, S)``, True = may attend
            (the attention core's convention); None draws every cell as a weight.
        title: text above the picture, each line cut to :data:`TITLE_MAX` characters.
        xlabel: the column axis's title, by default ``source (keys)``.
        ylabel: the row axis's title, by default ``target (queries)``.
        annotate: write each value in its cell; None does so when both sides
            are at most 16.
        precision: decimals of the annotations.
        path: save to this file (``.png``, ``.svg`` or ``.pdf``).

    Returns:
        the figure.

    Raises:
        ValueError: not a 2-D matrix, an empty matrix, NaN entries, label
            counts that differ from the matrix's sides, a mask that is not 0/1
            or does not broadcast to the weights, or an unknown extension.
    """
    values = _as_matrix("weights", weights)
    blocked = ~_as_mask(mask, values.shape)
    labelled = (row_labels is not None, col_labels is not None)
    fig, ax = _matrix_axes(values.shape, title, xlabel, ylabel, labelled)
    image = _draw_weights(ax, values, blocked, row_labels, col_labels, annotate, precision)
    fig.colorbar(image, ax=ax, fraction=0.05, pad=0.03).ax.tick_params(labelsize=FONT_SIZE - 1)
    return _finish(fig, path)


def heatmap_grid(
    weights: Any,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    *,
    mask: Any = None,
    panel_titles: Sequence[str] | None = None,
    title: str | None = None,
    xlabel: str = "source (keys)",
    ylabel: str = "target (queries)",
    path: str | os.PathLike | None = None,
    annotate: bool | None = None,
    precision: int = 2,
) -> Figure:
    """Draw several weight matrices of one shape side by side (e.g. every head of a layer).

    Args:
        weights: ``(N, T, S)``: N matrices of queries x keys, drawn as in :func:`heatmap`
            (one colour scale and one colour bar for all, masked cells hatched).
        row_labels: ``T`` labels shared by every panel.
        col_labels: ``S`` labels shared by every panel.
        mask: broadcastable to ``(T, S)``, True = may attend.
        panel_titles: ``N`` titles, default ``head 0 .. head N-1`` (the ``--head`` indices).
        title: text above the whole figure.
        xlabel: the column axes' title.
        ylabel: the row axes' title.
        path: save to this file (``.png``, ``.svg`` or ``.pdf``).
        annotate: write each value in its cell; None does so when both sides
            are at most ``ANNOTATE_MAX_SIDE``, as :func:`heatmap` does.
        precision: decimals of the annotations.

    Returns:
        the figure.

    Raises:
        ValueError: ``weights`` is not 3-D or holds an empty/NaN matrix, label or
            title counts that do not match, a bad mask, or an unknown extension.
    """
    if hasattr(weights, "detach"):
        weights = weights.detach().cpu().float().numpy()
    stack = np.asarray(weights, dtype=float)
    if stack.ndim != 3 or not stack.shape[0]:
        raise ValueError(f"weights must be (N, T, S) with N >= 1, got shape {stack.shape}")
    names = list(panel_titles or [f"head {i}" for i in range(stack.shape[0])])
    if len(names) != stack.shape[0]:
        raise ValueError(f"panel_titles has {len(names)} titles for {stack.shape[0]} panels")
    blocked = ~_as_mask(mask, stack.shape[1:])
    rows, cols = stack.shape[1:]
    panel = _side_inches(cols, 2.0, 3.0, 8.0, CELL_INCHES * 0.6, col_labels is not None)
    side = (
        min(panel, max(GRID_MAX_INCHES / len(names), 8.0)),  # N panels share the width
        _side_inches(rows, 1.5, 2.5, 8.0, 0.3, row_labels is not None),
    )
    fig = _figure((round(side[0] * len(names), 2), round(side[1], 2)))
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    matrices = [_as_matrix("weights", matrix) for matrix in stack]
    shared = _color_range(stack if blocked.all() else stack[:, ~blocked])
    for ax, matrix, name in zip(axes, matrices, names, strict=True):
        image = _draw_weights(
            ax, matrix, blocked, row_labels, col_labels, annotate, precision, shared, False
        )
        ax.set_title(_escape_text(name), fontsize=FONT_SIZE)
        ax.set_xlabel(_escape_text(xlabel), fontsize=FONT_SIZE)
    axes[0].set_ylabel(_escape_text(ylabel), fontsize=FONT_SIZE)
    bar = fig.colorbar(image, ax=list(axes), fraction=0.05 / len(names) ** 0.5, pad=0.02)
    bar.ax.tick_params(labelsize=FONT_SIZE - 1)
    if blocked.any():  # one note for every panel: one under each would overlap its neighbour's
        fig.legend(
            handles=[_mask_note()],
            loc="outside lower center",
            frameon=False,
            fontsize=FONT_SIZE - 1,
        )
    if title:
        fig.suptitle(_escape_text(_shorten_title(title)), fontsize=FONT_SIZE + 1)
    return _finish(fig, path)


def _draw_weights(
    ax, values, blocked, row_labels, col_labels, annotate, precision, vrange=None, legend=True
):
    """One weights matrix on ``ax``: masked cells hatched; returns the image (for a colour bar).

    ``vrange`` is the colour scale (shared by the panels of a grid); default the matrix's own.
    ``legend=False`` leaves the masked cells' legend to the caller (one for a whole grid).
    """
    if vrange is None:
        vrange = _color_range(values if blocked.all() else values[~blocked])
    cmap = colormaps[CMAP].with_extremes(bad=BLOCKED_COLOR)
    shown = np.ma.masked_array(values, mask=blocked)
    image = ax.imshow(shown, cmap=cmap, vmin=vrange[0], vmax=vrange[1], aspect="auto")
    _label_axes(ax, values.shape, row_labels, col_labels)
    if _should_annotate(annotate, values.shape):
        _annotate(ax, values, blocked, vrange, precision)
    if blocked.any():
        _hatch_masked(ax, blocked, legend)
    return image


def _color_range(values: np.ndarray) -> tuple[float, float]:
    """[0, 1] for weights that lie there, else the values' range (never empty)."""
    lo, hi = float(values.min()), float(values.max())
    if lo >= 0.0 and hi <= 1.0:
        return 0.0, 1.0
    return lo, hi if hi > lo else lo + 1.0


def _should_annotate(annotate: bool | None, shape: tuple[int, int]) -> bool:
    return max(shape) <= ANNOTATE_MAX_SIDE if annotate is None else bool(annotate)


def _annotate(ax, values: np.ndarray, blocked: np.ndarray, vrange, precision: int) -> None:
    """Write each unmasked value in its cell, white on dark cells."""
    vmin, vmax = vrange
    for (i, j), v in np.ndenumerate(values):
        if blocked[i, j]:
            continue
        color = "white" if (v - vmin) / (vmax - vmin) > 0.55 else "black"
        ax.text(j, i, f"{v:.{precision}f}", ha="center", va="center", color=color, fontsize=7)


def _hatch_masked(ax, blocked: np.ndarray, legend: bool = True) -> None:
    """Cover masked cells with grey hatching and explain it in a legend below the picture
    (``legend=False``: the caller explains it once for several panels, :func:`_mask_note`)."""
    cells = [Rectangle((j - 0.5, i - 0.5), 1.0, 1.0) for i, j in np.argwhere(blocked)]
    ax.add_collection(PatchCollection(cells, linewidth=0, **_HATCH_STYLE), autolim=False)
    if legend:
        ax.legend(
            handles=[_mask_note()],
            loc="upper center",
            bbox_to_anchor=(0.5, 0.0),
            frameon=False,
            fontsize=FONT_SIZE - 1,
        )


_HATCH_STYLE = {"facecolor": BLOCKED_COLOR, "edgecolor": HATCH_COLOR, "hatch": MASKED_HATCH}


def _mask_note() -> Patch:
    """The legend entry that says what a hatched cell means."""
    return Patch(label="masked: may not attend (weight 0 by the mask)", **_HATCH_STYLE)
