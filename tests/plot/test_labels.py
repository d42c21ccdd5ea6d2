"""Labels and titles reach matplotlib as given: "$" escaped, long title lines cut."""

import io

import numpy as np
import pytest
from matplotlib.figure import Figure
from plot_helpers import TEX_LABELS, WEIGHTS

from attnkit import causal_mask, plot


def test_the_tex_label_really_breaks_unescaped_mathtext():
    fig = Figure()
    fig.text(0, 0, TEX_LABELS[0])
    with pytest.raises(ValueError):
        fig.savefig(io.BytesIO(), format="png")


def draw_heatmap(labels, path):
    n = len(labels)
    return plot.heatmap(
        np.eye(n), labels, labels, mask=np.tril(np.ones((n, n))), title=" ".join(labels),
        xlabel=labels[0], ylabel=labels[-1], path=path,
    )  # fmt: skip


def draw_mask(labels, path):
    n = len(labels)
    return plot.mask_plot(
        causal_mask(n), labels, labels, title=" ".join(labels), xlabel=labels[0],
        ylabel=labels[-1], path=path,
    )  # fmt: skip


@pytest.mark.parametrize("suffix", plot.FORMATS)
@pytest.mark.parametrize("draw", [draw_heatmap, draw_mask])
def test_labels_with_dollar_underscore_caret_backslash_render_and_save(tmp_path, draw, suffix):
    path = tmp_path / f"tex{suffix}"
    fig = draw(TEX_LABELS, path)
    assert path.stat().st_size > 0
    ax = fig.axes[0]
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert ticks == ["\\$x^\\$", "a_b", "c^d", "e\\f"]  # only "$" is escaped


def test_long_titles_are_cut_with_an_ellipsis():
    title = "$" + "x" * 100
    shown = plot.heatmap(WEIGHTS, title=title).axes[0].get_title()
    assert len(shown) == plot.TITLE_MAX + 1 and shown.startswith("\\$xx") and shown.endswith("...")
    assert plot.mask_plot(causal_mask(2), title="short").axes[0].get_title() == "short"
    two = plot.heatmap(WEIGHTS, title="y" * 100 + "\nlayer 0, head 1").axes[0].get_title()
    assert two == "y" * (plot.TITLE_MAX - 3) + "...\nlayer 0, head 1"  # each line on its own
