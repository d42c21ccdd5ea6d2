"""Line and bar charts: the softmax-saturation experiment, a run's learning curve, and
the coverage histogram."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from .saving import _finish
from .style import ACCENT_COLOR, FONT_SIZE, MAIN_COLOR, _escape_text, _figure, _shorten_title


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
