"""attnkit.plot.mask_plot: the mask drawn as it is, loud errors on non-boolean masks."""

import numpy as np
import pytest
from matplotlib.image import imread
from plot_helpers import png_pixels

from attnkit import causal_mask, padding_mask, plot


def test_causal_mask_picture(tmp_path):
    path = tmp_path / "causal.png"
    fig = plot.mask_plot(causal_mask(5), path=path)
    assert png_pixels(path) == plot.image_size(fig)
    shown = fig.axes[0].images[0].get_array()
    assert np.array_equal(shown, np.tril(np.ones((5, 5))))


def test_padding_mask_picture_and_bad_masks():
    fig = plot.mask_plot(padding_mask([3, 5]), ["3", "5"])
    assert fig.axes[0].images[0].get_array().tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    with pytest.raises(ValueError, match="booleans or 0/1"):
        plot.mask_plot([[0.5, 1.0]])


def test_large_mask_is_not_covered_by_its_cell_borders(tmp_path):
    # 300 cells a side are about 4 px each: 2 px borders between them hid a third
    # of the allowed cells, and from about 500 on the whole mask was drawn blank.
    path = tmp_path / "causal300.png"
    fig = plot.mask_plot(causal_mask(300), path=path)
    image = imread(path)[..., :3]
    box = fig.axes[0].get_window_extent()
    top, left = image.shape[0] - int(box.y1), int(box.x0)
    cells = image[top : image.shape[0] - int(box.y0), left : int(box.x1)]
    rows, cols = np.mgrid[0 : cells.shape[0], 0 : cells.shape[1]]
    allowed = rows / cells.shape[0] > cols / cells.shape[1] + 0.1  # below the diagonal
    dark = cells.sum(axis=2) < 1.5  # MAIN_COLOR, not white borders or BLOCKED_COLOR
    assert dark[allowed].mean() > 0.95


def test_a_long_unlabelled_side_is_numbered_every_round_step_and_given_labels_all_kept():
    ax = plot.mask_plot(causal_mask(300)).axes[0]
    numbers = [t.get_text() for t in ax.get_xticklabels()]
    assert numbers == ["1", *(str(k) for k in range(20, 301, 20))]  # 16, not 300 run together
    assert [int(t) for t in ax.get_yticks()] == [0, *range(19, 300, 20)]  # at their cells
    assert len(plot.mask_plot(causal_mask(40)).axes[0].get_xticklabels()) == 40
    words = [f"w{i}" for i in range(60)]
    labelled = plot.mask_plot(causal_mask(60), words, words).axes[0]
    assert [t.get_text() for t in labelled.get_xticklabels()] == words
