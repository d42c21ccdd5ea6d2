"""attnkit.plot.mask_plot: the mask drawn as it is, loud errors on non-boolean masks."""

import numpy as np
import pytest
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
