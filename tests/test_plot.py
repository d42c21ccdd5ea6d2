"""attnkit.plot: images of the expected size and format, and loud errors on bad input."""

import json

import numpy as np
import pytest
import torch
from matplotlib.image import imread

from attnkit import causal_mask, explain, padding_mask, plot
from attnkit.saturation import SaturationResult

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
WEIGHTS = [[0.7, 0.2, 0.1], [0.1, 0.8, 0.1]]


def png_pixels(path):
    """(width, height) of a PNG, read from its header and checked against the decoded image."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert imread(path).shape[:2] == (height, width)
    return width, height


def test_heatmap_png_has_the_figure_size(tmp_path):
    path = tmp_path / "w.png"
    fig = plot.heatmap(WEIGHTS, ["le", "chat"], ["the", "cat", "<eos>"], path=path)
    assert png_pixels(path) == plot.image_size(fig)
    width, height = plot.image_size(fig)
    assert 300 <= width <= 1600 and 300 <= height <= 1600
    assert path.stat().st_size < 150_000


def test_heatmap_draws_rows_as_queries_and_annotates_small_matrices():
    fig = plot.heatmap(WEIGHTS, ["le", "chat"], ["the", "cat", "<eos>"])
    ax = fig.axes[0]
    assert ax.images[0].get_array().shape == (2, 3)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["le", "chat"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["the", "cat", "<eos>"]
    assert sorted(t.get_text() for t in ax.texts) == sorted(f"{v:.2f}" for r in WEIGHTS for v in r)
    assert not plot.heatmap(np.full((20, 20), 0.05)).axes[0].texts


def test_heatmap_takes_a_tensor_and_grows_with_the_matrix():
    small = plot.image_size(plot.heatmap(torch.full((2, 3), 0.5)))
    large = plot.image_size(plot.heatmap(torch.full((10, 12), 0.5)))
    assert large[0] > small[0] and large[1] > small[1]


@pytest.mark.parametrize("suffix", [".svg", ".pdf"])
def test_heatmap_format_follows_the_extension(tmp_path, suffix):
    path = tmp_path / f"w{suffix}"
    plot.heatmap(WEIGHTS, path=path)
    head = path.read_bytes()[:200]
    assert (b"<svg" in head) if suffix == ".svg" else head.startswith(b"%PDF")
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"row_labels": ["a"]},
            r"row_labels has 1 labels but the matrix has 2 rows \(shape \(2, 3\)\)",
        ),
        ({"col_labels": ["a", "b"]}, "col_labels has 2 labels but the matrix has 3 columns"),
        ({"weights": []}, "must be a 2-D matrix"),
        ({"weights": np.zeros((0, 3))}, "weights is empty"),
        ({"weights": [[0.5, float("nan")]]}, "1 NaN or infinite entry .first at row 0, column 1"),
        ({"weights": [[0.5, 0.5], [1.0]]}, "rectangular matrix"),
        ({"path": "w.jpg"}, "cannot save a picture as 'w.jpg'"),
    ],
)
def test_heatmap_bad_input_raises(kwargs, message):
    kwargs = {"weights": WEIGHTS, **kwargs}
    with pytest.raises(ValueError, match=message):
        plot.heatmap(**kwargs)


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


def test_saturation_plot_draws_both_panels(tmp_path):
    result = SaturationResult(
        dims=[4, 16, 64],
        trials=10,
        num_keys=8,
        seed=0,
        score_variance=[4.1, 15.8, 63.0],
        scaled_variance=[1.02, 0.99, 0.98],
        max_weight_unscaled=[0.5, 0.7, 0.85],
        max_weight_scaled=[0.33, 0.32, 0.33],
    )
    path = tmp_path / "sat.png"
    fig = plot.saturation_plot(result, path=path)
    assert png_pixels(path) == (900, 360) == plot.image_size(fig)
    left, right = fig.axes
    assert list(left.lines[0].get_ydata()) == result.max_weight_unscaled
    assert list(right.lines[0].get_ydata()) == result.score_variance
    bad = SaturationResult(**{**result.__dict__, "max_weight_scaled": [0.3]})
    with pytest.raises(ValueError, match="one per d_k"):
        plot.saturation_plot(bad)


def test_read_weights_accepts_the_documented_format_and_explain_json(tmp_path):
    plain = tmp_path / "w.json"
    plain.write_text(json.dumps({"weights": WEIGHTS, "row_labels": ["a", "b"]}))
    assert plot.read_weights(plain) == (WEIGHTS, ["a", "b"], None)
    trace = tmp_path / "trace.json"
    t = explain([[2.0, 0.0, 1.0], [0.0, 1.0, 0.0]], np.eye(3))
    trace.write_text(json.dumps(t.to_dict()))
    assert plot.read_weights(trace) == (t.weights, ["q1", "q2"], ["k1", "k2", "k3"])


def test_read_weights_errors(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ValueError, match="is not valid JSON"):
        plot.read_weights(broken)
    broken.write_text('{"w": []}')
    with pytest.raises(ValueError, match='has no "weights" key'):
        plot.read_weights(broken)
    with pytest.raises(FileNotFoundError):
        plot.read_weights(tmp_path / "missing.json")
