"""Pictures of attention: weight heatmaps, masks and the saturation curves.

This module draws what it is given and never computes attention. It uses
matplotlib's object API with the Agg renderer (no pyplot, no global backend
switch, no window), so it is safe on headless machines and in threads. Every
function returns the :class:`~matplotlib.figure.Figure`; with ``path=`` it also
saves it, as PNG, SVG or PDF chosen by the file extension (written atomically).
All pictures share one palette, font size and resolution (:data:`DPI`).

Conventions: in a weights or mask picture, rows are queries (target tokens)
and columns are keys (source tokens), as in Bahdanau et al. 2015, fig. 3.

Text is drawn as given: every label, axis title and title passes through
``_escape_text`` here, so a token such as ``$x^$`` never reaches matplotlib's
mathtext parser, and title lines longer than :data:`TITLE_MAX` characters are cut
with "...". Callers pass raw tokens and never escape them themselves.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from matplotlib import colormaps
from matplotlib.collections import PatchCollection
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

__all__ = [
    "DPI",
    "FORMATS",
    "TITLE_MAX",
    "SavedWeights",
    "check_path",
    "coverage_histogram",
    "heatmap",
    "heatmap_grid",
    "image_size",
    "learning_curve",
    "mask_plot",
    "read_weights",
    "saturation_plot",
    "save",
]

DPI = 100
FORMATS = (".png", ".svg", ".pdf")
CMAP = "Blues"
MAIN_COLOR = "#08519c"  # the dark end of CMAP
ACCENT_COLOR = "#d9622b"
BLOCKED_COLOR = "#eeeeee"
HATCH_COLOR = "#8c8c8c"
MASKED_HATCH = "///"
FONT_SIZE = 9
ANNOTATE_MAX_SIDE = 16  # annotate cells when both sides are at most this long
CELL_INCHES = 0.45
TITLE_MAX = 70  # characters of a title; longer ones end in "..."


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
    fig, ax = _matrix_axes(values.shape, title, xlabel, ylabel)
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
) -> Figure:
    """Draw several weight matrices of one shape side by side (e.g. every head of a layer).

    Args:
        weights: ``(N, T, S)``: N matrices of queries x keys, drawn as in :func:`heatmap`
            (shared colour scale, masked cells hatched, no annotations).
        row_labels: ``T`` labels shared by every panel.
        col_labels: ``S`` labels shared by every panel.
        mask: broadcastable to ``(T, S)``, True = may attend.
        panel_titles: ``N`` titles, default ``head 0 .. head N-1`` (the ``--head`` indices).
        title: text above the whole figure.
        xlabel: the column axes' title.
        ylabel: the row axes' title.
        path: save to this file (``.png``, ``.svg`` or ``.pdf``).

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
    side = (
        min(max(2.0 + CELL_INCHES * 0.6 * cols, 3.0), 8.0),
        min(max(1.5 + 0.3 * rows, 2.5), 8.0),
    )
    fig = _figure((round(side[0] * len(names), 2), round(side[1], 2)))
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, matrix, name in zip(axes, stack, names, strict=True):
        _draw_weights(ax, _as_matrix("weights", matrix), blocked, row_labels, col_labels, False, 2)
        ax.set_title(_escape_text(name), fontsize=FONT_SIZE)
        ax.set_xlabel(_escape_text(xlabel), fontsize=FONT_SIZE)
    axes[0].set_ylabel(_escape_text(ylabel), fontsize=FONT_SIZE)
    if title:
        fig.suptitle(_escape_text(_shorten_title(title)), fontsize=FONT_SIZE + 1)
    return _finish(fig, path)


def _draw_weights(ax, values, blocked, row_labels, col_labels, annotate, precision):
    """One weights matrix on ``ax``: masked cells hatched; returns the image (for a colour bar)."""
    vrange = _color_range(values if blocked.all() else values[~blocked])
    cmap = colormaps[CMAP].with_extremes(bad=BLOCKED_COLOR)
    shown = np.ma.masked_array(values, mask=blocked)
    image = ax.imshow(shown, cmap=cmap, vmin=vrange[0], vmax=vrange[1], aspect="auto")
    _label_axes(ax, values.shape, row_labels, col_labels)
    if _should_annotate(annotate, values.shape):
        _annotate(ax, values, blocked, vrange, precision)
    if blocked.any():
        _hatch_masked(ax, blocked)
    return image


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


def saturation_plot(result: Any, *, path: str | os.PathLike | None = None) -> Figure:
    """Draw the saturation experiment: max weight and score variance against ``d_k``.

    Args:
        result: a :class:`~attnkit.lessons.SaturationResult` (or any object
            with its attributes ``dims``, ``num_keys``, ``score_variance``,
            ``scaled_variance``, ``max_weight_unscaled``, ``max_weight_scaled``).
        path: save to this file (``.png``, ``.svg`` or ``.pdf``).

    Returns:
        the figure: left, the mean largest softmax weight with and without
        ``1/sqrt(d_k)``; right, the variance of the scores (log-log).

    Raises:
        ValueError: series of different lengths, or an unknown extension.
    """
    dims = np.asarray(result.dims, dtype=float)
    series = (
        result.max_weight_unscaled,
        result.max_weight_scaled,
        result.score_variance,
        result.scaled_variance,
    )
    if any(len(s) != len(dims) for s in series):
        raise ValueError(f"saturation series must each have {len(dims)} values, one per d_k")
    fig = _figure((9.0, 3.6))
    left, right = fig.subplots(1, 2)
    left.plot(dims, result.max_weight_unscaled, "o-", color=ACCENT_COLOR, label="q·k (unscaled)")
    left.plot(dims, result.max_weight_scaled, "s-", color=MAIN_COLOR, label="q·k / sqrt(d_k)")
    left.axhline(1.0 / result.num_keys, color="grey", ls=":", lw=1, label="uniform (1/Tk)")
    left.set(ylim=(0.0, 1.05), ylabel="mean max attention weight")
    left.set_title("softmax saturation", fontsize=FONT_SIZE + 1)
    right.plot(dims, result.score_variance, "o-", color=ACCENT_COLOR, label="var(q·k)")
    right.plot(dims, result.scaled_variance, "s-", color=MAIN_COLOR, label="var(q·k / sqrt(d_k))")
    right.plot(dims, dims, color="grey", ls=":", lw=1, label="d_k")
    right.set(yscale="log", ylabel="variance of the score")
    right.set_title("score variance", fontsize=FONT_SIZE + 1)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(dims, [str(int(d)) for d in dims])
        ax.set_xlabel("d_k (query/key width)", fontsize=FONT_SIZE)
        ax.grid(True, color="#dddddd", lw=0.6)
        ax.legend(fontsize=FONT_SIZE - 1, frameon=False)
        ax.tick_params(labelsize=FONT_SIZE - 1)
    return _finish(fig, path)


def learning_curve(history: Sequence[dict], *, path: str | os.PathLike | None = None) -> Figure:
    """Draw a training run: train and validation loss per step, validation BLEU on a second axis.

    Args:
        history: validation records with keys ``step``, ``train_loss``,
            ``valid_loss`` and ``valid_bleu`` (the rows of a run's ``metrics.jsonl``).
        path: save to this file (``.png``, ``.svg`` or ``.pdf``).

    Returns:
        the figure.
    """
    steps = [h["step"] for h in history]
    fig = _figure((6.0, 4.0))
    ax = fig.add_subplot()
    ax.plot(steps, [h["train_loss"] for h in history], "o-", label="train loss (smoothed)")
    ax.plot(steps, [h["valid_loss"] for h in history], "s-", label="valid loss")
    ax.set_xlabel("step", fontsize=FONT_SIZE)
    ax.set_ylabel("cross-entropy per token", fontsize=FONT_SIZE)
    right = ax.twinx()
    right.plot(steps, [h["valid_bleu"] for h in history], "^-", color="tab:green", label="BLEU")
    right.set_ylabel("valid BLEU (greedy)", fontsize=FONT_SIZE)
    handles, labels = ax.get_legend_handles_labels()
    more_handles, more_labels = right.get_legend_handles_labels()
    ax.legend(handles + more_handles, labels + more_labels, loc="center right")
    return _finish(fig, path)


def coverage_histogram(
    coverage: Sequence[float],
    *,
    low: float = 0.5,
    high: float = 1.5,
    title: str | None = None,
    path: str | os.PathLike | None = None,
) -> Figure:
    """Histogram of source-token coverage (summed attention), with the under/over bounds marked.

    Args:
        coverage: one value per source token (``attnkit inspect``'s coverage).
        low: under-coverage bound, drawn as a dashed line.
        high: over-coverage bound, drawn as a dashed line.
        title: figure title (escaped and shortened here).
        path: save to this file (``.png``, ``.svg`` or ``.pdf``).

    Returns:
        the figure.
    """
    values = np.asarray(coverage, dtype=float).ravel()
    fig = _figure((6.0, 3.6))
    ax = fig.add_subplot()
    ax.hist(
        values, bins=40, range=(0.0, max(2.5, float(values.max(initial=0.0)))), color=MAIN_COLOR
    )
    for bound in (low, high):
        ax.axvline(bound, color=ACCENT_COLOR, ls="--", lw=1)
    ax.set_xlabel("coverage: attention summed over the output", fontsize=FONT_SIZE)
    ax.set_ylabel("source tokens", fontsize=FONT_SIZE)
    if title:
        ax.set_title(_escape_text(_shorten_title(title)), fontsize=FONT_SIZE + 1)
    return _finish(fig, path)


class SavedWeights(NamedTuple):
    """Weights read by :func:`read_weights`, ready for :func:`heatmap`.

    Attributes:
        weights: ``(T, S)`` rows = queries (target), columns = keys (source).
        row_labels: ``T`` labels, or None.
        col_labels: ``S`` labels, or None.
        mask: booleans broadcastable to ``(T, S)``, True = may attend, or None.
    """

    weights: list[list[float]]
    row_labels: list[str] | None
    col_labels: list[str] | None
    mask: list[list[bool]] | None


def read_weights(path: str | os.PathLike, index: int | None = None) -> SavedWeights:
    """Read saved weights for :func:`heatmap` from a JSON file (or one line of JSON Lines).

    The format is ``{"weights": [[...], ...], "row_labels": [...], "col_labels": [...],
    "mask": [[...], ...]}`` with rows = queries (target tokens) and columns = keys
    (source tokens); all but the weights are optional, the mask holds booleans
    (true = may attend). The JSON written by ``attnkit explain --format json``
    has this shape too, and so does each line of ``attnkit translate
    --attention-json``: pass ``index`` (1-based line) to read one line of such
    a JSON Lines file.

    Returns:
        the weights, labels and mask, each of the last three None when absent.

    Raises:
        FileNotFoundError: no such file.
        ValueError: invalid JSON, no ``weights`` key (or ``null`` weights: an empty
            input line), ``index`` past the last line, or labels or a mask that
            are not lists.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    where = str(path)
    if index is not None:
        lines = [line for line in text.splitlines() if line.strip()]
        if not 1 <= index <= len(lines):
            raise ValueError(f"{path} has {len(lines)} entries; --index {index} is not one")
        text, where = lines[index - 1], f"{path} entry {index}"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where} is not valid JSON: {err}") from None
    if not isinstance(data, dict) or "weights" not in data:
        raise ValueError(f'{where} has no "weights" key; expected {{"weights": [[...]], ...}}')
    if data["weights"] is None:
        raise ValueError(f"{where} has no weights (an empty input line)")
    rows, cols, mask = (_list_or_none(path, data, k) for k in ("row_labels", "col_labels", "mask"))
    labels = [None if x is None else [str(v) for v in x] for x in (rows, cols)]
    return SavedWeights(data["weights"], *labels, mask)


def _list_or_none(path: Path, data: dict, key: str) -> list | None:
    value = data.get(key)
    if value is not None and not isinstance(value, list):
        raise ValueError(f"{path}: {key} must be a list, got {type(value).__name__}")
    return value


def check_path(path: str | os.PathLike) -> Path:
    """Check that :func:`save` can write a picture to ``path``, before any work is done.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: an extension other than ``.png``, ``.svg`` or ``.pdf``; a
            path that is a folder; or a folder that cannot be created or written
            (the nearest existing one is named).
    """
    path = Path(path)
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
    """
    path = check_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A temporary file beside the target, created with open() so the usual
    # permissions (umask) apply, then renamed over it: readers never see half a file.
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "xb") as handle:
            fig.savefig(handle, format=path.suffix.lower()[1:], dpi=DPI)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _figure(size: tuple[float, float]) -> Figure:
    return Figure(figsize=size, dpi=DPI, layout="constrained")


def _matrix_axes(shape: tuple[int, int], title: str | None, xlabel: str, ylabel: str):
    rows, cols = shape
    width = min(max(2.2 + CELL_INCHES * cols, 4.0), 16.0)
    height = min(max(1.6 + CELL_INCHES * rows, 3.0), 16.0)
    fig = _figure((round(width, 2), round(height, 2)))  # whole pixels at DPI = 100
    ax = fig.add_subplot()
    ax.set_xlabel(_escape_text(xlabel), fontsize=FONT_SIZE)
    ax.set_ylabel(_escape_text(ylabel), fontsize=FONT_SIZE)
    if title:
        ax.set_title(_escape_text(_shorten_title(title)), fontsize=FONT_SIZE + 1)
    return fig, ax


def _label_axes(ax, shape: tuple[int, int], row_labels, col_labels) -> None:
    rows = _labels("row_labels", row_labels, shape[0], "rows", shape)
    cols = _labels("col_labels", col_labels, shape[1], "columns", shape)
    ax.set_yticks(range(shape[0]), rows, fontsize=FONT_SIZE - 1)
    rotate = 90 if max(len(c) for c in cols) * shape[1] > 40 else 0
    ax.set_xticks(range(shape[1]), cols, fontsize=FONT_SIZE - 1, rotation=rotate)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")


def _labels(arg: str, labels, n: int, side: str, shape: tuple[int, int]) -> list[str]:
    if labels is None:
        return [str(i + 1) for i in range(n)]
    if len(labels) != n:
        raise ValueError(
            f"{arg} has {len(labels)} labels but the matrix has {n} {side} (shape {shape})"
        )
    return [_escape_text(str(x)) for x in labels]


def _as_matrix(arg: str, x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().float().numpy()
    try:
        values = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{arg} must be a rectangular matrix of numbers: {err}") from None
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


def _as_zero_one(arg: str, x: Any) -> np.ndarray:
    values = _as_matrix(arg, x)
    if not np.isin(values, (0.0, 1.0)).all():
        raise ValueError(f"{arg} must hold booleans or 0/1 (1 = may attend)")
    return values


def _as_mask(mask: Any, shape: tuple[int, int]) -> np.ndarray:
    """The heatmap's mask as booleans of ``shape``, True = may attend; all True for None."""
    if mask is None:
        return np.ones(shape, dtype=bool)
    values = _as_zero_one("mask", mask)
    try:
        return np.broadcast_to(values.astype(bool), shape)
    except ValueError:
        raise ValueError(
            f"mask has shape {values.shape}, which does not broadcast to the weights' {shape}"
        ) from None


def _color_range(values: np.ndarray) -> tuple[float, float]:
    """[0, 1] for weights that lie there, else the values' range (never empty)."""
    lo, hi = float(values.min()), float(values.max())
    if lo >= 0.0 and hi <= 1.0:
        return 0.0, 1.0
    return lo, hi if hi > lo else lo + 1.0


def _annotate(ax, values: np.ndarray, blocked: np.ndarray, vrange, precision: int) -> None:
    """Write each unmasked value in its cell, white on dark cells."""
    vmin, vmax = vrange
    for (i, j), v in np.ndenumerate(values):
        if blocked[i, j]:
            continue
        color = "white" if (v - vmin) / (vmax - vmin) > 0.55 else "black"
        ax.text(j, i, f"{v:.{precision}f}", ha="center", va="center", color=color, fontsize=7)


def _hatch_masked(ax, blocked: np.ndarray) -> None:
    """Cover masked cells with grey hatching and explain it in a legend below the picture."""
    cells = [Rectangle((j - 0.5, i - 0.5), 1.0, 1.0) for i, j in np.argwhere(blocked)]
    style = {"facecolor": BLOCKED_COLOR, "edgecolor": HATCH_COLOR, "hatch": MASKED_HATCH}
    ax.add_collection(PatchCollection(cells, linewidth=0, **style), autolim=False)
    note = Patch(label="masked: may not attend (weight 0 by the mask)", **style)
    ax.legend(
        handles=[note],
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        frameon=False,
        fontsize=FONT_SIZE - 1,
    )


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


def _should_annotate(annotate: bool | None, shape: tuple[int, int]) -> bool:
    return max(shape) <= ANNOTATE_MAX_SIDE if annotate is None else bool(annotate)


def _finish(fig: Figure, path: str | os.PathLike | None) -> Figure:
    if path is not None:
        save(fig, path)
    return fig


def image_size(fig: Figure) -> tuple[int, int]:
    """The (width, height) in pixels that :func:`save` writes for ``fig`` as PNG."""
    width, height = fig.get_size_inches()
    return round(width * DPI), round(height * DPI)
