"""attnkit.plot: images of the expected size and format, and loud errors on bad input."""

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imread

from attnkit import causal_mask, explain, padding_mask, plot
from attnkit.lessons import SaturationResult

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
WEIGHTS = [[0.7, 0.2, 0.1], [0.1, 0.8, 0.1]]
TEX_LABELS = ["$x^$", "a_b", "c^d", "e\\f"]  # "$x^$" is invalid mathtext
CAUSAL_WEIGHTS = [[1.0, 0.0, 0.0], [0.3, 0.7, 0.0], [0.2, 0.0, 0.8]]  # (2, 1) is a real 0


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
    assert plot.read_weights(plain) == (WEIGHTS, ["a", "b"], None, None)
    trace = tmp_path / "trace.json"
    t = explain([[2.0, 0.0, 1.0], [0.0, 1.0, 0.0]], np.eye(3), causal=True)
    trace.write_text(json.dumps(t.to_dict()))
    saved = plot.read_weights(trace)
    assert saved == (t.weights, ["q1", "q2"], ["k1", "k2", "k3"], t.mask)
    assert saved.mask == [[True, True, False], [True, True, True]]


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


@pytest.mark.parametrize("suffix", plot.FORMATS)
def test_saturation_and_learning_curve_save_in_every_format(tmp_path, suffix):
    result = SaturationResult([4, 16], 5, 8, 0, [4.0, 16.0], [1.0, 1.0], [0.5, 0.7], [0.3, 0.3])
    plot.saturation_plot(result, path=tmp_path / f"s{suffix}")
    history = [{"step": s, "train_loss": 3.0, "valid_loss": 2.9, "valid_bleu": 1.0} for s in (1, 2)]
    plot.learning_curve(history, path=tmp_path / f"c{suffix}")
    assert {p.name for p in tmp_path.iterdir()} == {f"s{suffix}", f"c{suffix}"}


def test_long_titles_are_cut_with_an_ellipsis():
    title = "$" + "x" * 100
    shown = plot.heatmap(WEIGHTS, title=title).axes[0].get_title()
    assert len(shown) == plot.TITLE_MAX + 1 and shown.startswith("\\$xx") and shown.endswith("...")
    assert plot.mask_plot(causal_mask(2), title="short").axes[0].get_title() == "short"
    two = plot.heatmap(WEIGHTS, title="y" * 100 + "\nlayer 0, head 1").axes[0].get_title()
    assert two == "y" * (plot.TITLE_MAX - 3) + "...\nlayer 0, head 1"  # each line on its own


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


def test_check_path_accepts_new_folders_and_rejects_what_cannot_be_written(tmp_path):
    target = tmp_path / "new" / "deeper" / "w.svg"
    assert plot.check_path(target) == target and not (tmp_path / "new").exists()
    (tmp_path / "file.txt").write_text("x")
    for bad, message in [
        (tmp_path / "w.jpg", "cannot save a picture as 'w.jpg'"),
        (tmp_path / "file.txt" / "w.png", "cannot write in"),
    ]:
        with pytest.raises(ValueError, match=message):
            plot.check_path(bad)
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(ValueError, match="it is a folder"):
        plot.check_path(tmp_path / "dir.png")


def test_no_module_but_plot_touches_matplotlib_and_none_imports_pyplot():
    package = Path(plot.__file__).parent
    users = {
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if re.search(r"^\s*(from|import) matplotlib", p.read_text(encoding="utf-8"), re.M)
    }
    assert users == {"plot.py"}
    source = Path(plot.__file__).read_text(encoding="utf-8")
    assert not re.search(r"^\s*(from|import) matplotlib\.pyplot|import pyplot", source, re.M)
