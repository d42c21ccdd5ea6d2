"""attnkit.plot.heatmap / heatmap_grid: rows are queries, masked cells hatched, loud errors."""

import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from plot_helpers import CAUSAL_WEIGHTS, WEIGHTS, png_pixels

from attnkit import causal_mask, plot


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


def test_heatmap_axis_titles_name_source_and_target():
    ax = plot.heatmap(WEIGHTS).axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("source (keys)", "target (queries)")
    ax = plot.heatmap(WEIGHTS, xlabel="source (de)", ylabel="target (en)").axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("source (de)", "target (en)")


def test_masked_cells_are_hatched_unannotated_and_explained_in_a_legend():
    fig = plot.heatmap(CAUSAL_WEIGHTS, mask=causal_mask(3))
    ax = fig.axes[0]
    assert len(ax.texts) == 6  # the three masked cells carry no number
    assert ax.images[0].get_array().mask.tolist() == (~causal_mask(3)).tolist()
    (hatched,) = ax.collections
    assert len(hatched.get_paths()) == 3 and hatched.get_hatch() == "///"
    assert "masked" in ax.get_legend().get_texts()[0].get_text()
    assert plot.heatmap(CAUSAL_WEIGHTS).axes[0].get_legend() is None  # no mask, no note


def cell_pixels(fig, row, col, half=8):
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    rgb = np.asarray(canvas.buffer_rgba())[..., :3].astype(float)
    x, y = fig.axes[0].transData.transform((col, row))
    r, c = rgb.shape[0] - round(y), round(x)  # display y grows upwards
    return rgb[r - half : r + half, c - half : c + half]


def test_a_masked_zero_looks_different_from_a_real_zero():
    fig = plot.heatmap(CAUSAL_WEIGHTS, mask=causal_mask(3), annotate=False)
    masked, real = cell_pixels(fig, 0, 1), cell_pixels(fig, 2, 1)
    assert masked.std() > 15 > real.std()  # hatching against a flat cell
    assert np.abs(masked.mean((0, 1)) - real.mean((0, 1))).max() > 10


def test_heatmap_mask_broadcasts_a_row_and_rejects_bad_masks():
    fig = plot.heatmap(WEIGHTS, mask=[[1, 1, 0]])
    assert len(fig.axes[0].collections[0].get_paths()) == 2
    with pytest.raises(ValueError, match="does not broadcast to the weights' .2, 3."):
        plot.heatmap(WEIGHTS, mask=[[1, 0]])
    with pytest.raises(ValueError, match="mask must hold booleans or 0/1"):
        plot.heatmap(WEIGHTS, mask=[[0.5, 1, 1]])


def test_heatmap_takes_a_key_mask_vector_as_documented():
    # "broadcastable to (T, S)": a (S,) key mask, as explain() takes, was refused as not 2-D
    fig = plot.heatmap(WEIGHTS, mask=[True, True, False])
    assert fig.axes[0].images[0].get_array().mask.tolist() == [[False, False, True]] * 2
    grid = plot.heatmap_grid([WEIGHTS, WEIGHTS], mask=torch.tensor([1, 0, 1]))
    assert grid.axes[1].images[0].get_array().mask.tolist() == [[False, True, False]] * 2


def test_heatmap_grid_draws_one_panel_per_matrix_with_shared_masking():
    weights = torch.softmax(torch.randn(3, 2, 4, generator=torch.Generator().manual_seed(0)), -1)
    fig = plot.heatmap_grid(weights, ["a", "b"], list("wxyz"), mask=[[1, 1, 1, 0]], title="layer 0")
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["head 0", "head 1", "head 2"]
    for ax, matrix in zip(panels, weights, strict=True):
        shown = ax.images[0].get_array()
        assert np.allclose(shown.data, matrix.numpy()) and shown.mask[:, 3].all()
        assert len(ax.collections[0].get_paths()) == 2  # the masked column hatched
    assert fig.get_suptitle() == "layer 0"
    assert [ax.get_legend() for ax in panels] == [None] * 3  # under each, they overlapped
    (note,) = fig.legends
    assert [t.get_text() for t in note.get_texts()] == [
        "masked: may not attend (weight 0 by the mask)"
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"weights": np.zeros((2, 3))}, r"weights must be \(N, T, S\) with N >= 1, got shape"),
        ({"weights": np.zeros((0, 2, 3))}, "with N >= 1"),
        ({"panel_titles": ["only one"]}, "panel_titles has 1 titles for 2 panels"),
        ({"mask": [[1, 0]]}, "does not broadcast"),
    ],
)
def test_heatmap_grid_bad_input_raises(kwargs, message):
    kwargs = {"weights": np.full((2, 2, 3), 0.3), **kwargs}
    with pytest.raises(ValueError, match=message):
        plot.heatmap_grid(**kwargs)


def test_heatmap_grid_has_one_shared_colour_bar_and_values_when_small(tmp_path):
    weights = torch.softmax(torch.randn(4, 3, 5, generator=torch.Generator().manual_seed(1)), -1)
    fig = plot.heatmap_grid(weights, path=tmp_path / "grid.png")
    panels = [ax for ax in fig.axes if ax.images]
    bars = [ax for ax in fig.axes if not ax.images]
    assert len(panels) == 4 and len(bars) == 1  # one colour bar for every head
    assert {ax.images[0].get_clim() for ax in panels} == {(0.0, 1.0)}
    first = sorted(text.get_text() for text in panels[0].texts)
    assert len(first) == 15 and first == sorted(f"{v:.2f}" for v in weights[0].flatten().tolist())
    assert (tmp_path / "grid.png").stat().st_size > 0


def test_heatmap_grid_leaves_values_out_of_large_matrices_and_on_request():
    big = torch.softmax(torch.randn(2, 20, 20, generator=torch.Generator().manual_seed(2)), -1)
    assert not any(ax.texts for ax in plot.heatmap_grid(big).axes)
    small = torch.full((2, 2, 2), 0.5)
    assert not any(ax.texts for ax in plot.heatmap_grid(small, annotate=False).axes)


def test_heatmap_grid_shares_one_colour_scale_beyond_weights():
    values = np.stack([np.zeros((2, 2)), np.full((2, 2), 4.0)])
    fig = plot.heatmap_grid(values)
    assert {ax.images[0].get_clim() for ax in fig.axes if ax.images} == {(0.0, 4.0)}


def label_overlaps(fig, axis: str) -> int:
    """How many neighbouring tick labels of the first axes' ``axis`` overlap when drawn."""
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    labels = ax.get_yticklabels() if axis == "y" else ax.get_xticklabels()
    boxes = [t.get_window_extent(renderer) for t in labels if t.get_text()]
    return sum(a.overlaps(b) for a, b in zip(boxes, boxes[1:], strict=False))


def test_a_long_sentence_keeps_every_token_label_readable():
    # 150 subword pieces: in a figure capped at 16 inches a label had 6.5 pt for 8 pt text
    tokens = [f"tok{i}" for i in range(150)]
    weights = np.full((150, 150), 1 / 150)
    fig = plot.heatmap(weights, tokens, tokens)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == tokens
    assert label_overlaps(fig, "y") == 0 and label_overlaps(fig, "x") == 0
    # unlabelled, a side is numbered every 10th cell and the figure keeps its size
    assert plot.image_size(plot.heatmap(weights)) == (1600, 1600)
    assert plot.image_size(plot.mask_plot(np.eye(150), tokens)) == (1600, 2260)


def test_heatmap_grid_keeps_long_token_labels_readable():
    tokens = [f"tok{i}" for i in range(100)]
    fig = plot.heatmap_grid(np.full((2, 100, 3), 1 / 3), tokens)
    assert label_overlaps(fig, "y") == 0


def test_a_very_long_labelled_side_stays_within_ten_thousand_pixels():
    """Labelled sides grew up to 600 inches: a 2000-token heatmap would be ~28,000 px
    square, gigabytes of pixels. The matrix is never drawn here: only its size is asked."""
    from attnkit.plot.matrix import MAX_LABELLED_INCHES, _side_inches

    assert _side_inches(2000, 2.2, 4.0, 16.0, 0.1, True) == MAX_LABELLED_INCHES == 100.0
    assert _side_inches(256, 2.2, 4.0, 16.0, 0.1, True) == pytest.approx(2.2 + 0.14 * 256)
