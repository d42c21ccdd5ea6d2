"""attnkit.plot curves: the saturation plot, the learning curve and the coverage histogram."""

import pytest
from plot_helpers import png_pixels

from attnkit import plot
from attnkit.lessons import SaturationResult


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


@pytest.mark.parametrize("suffix", plot.FORMATS)
def test_saturation_and_learning_curve_save_in_every_format(tmp_path, suffix):
    result = SaturationResult([4, 16], 5, 8, 0, [4.0, 16.0], [1.0, 1.0], [0.5, 0.7], [0.3, 0.3])
    plot.saturation_plot(result, path=tmp_path / f"s{suffix}")
    history = [{"step": s, "train_loss": 3.0, "valid_loss": 2.9, "valid_bleu": 1.0} for s in (1, 2)]
    plot.learning_curve(history, path=tmp_path / f"c{suffix}")
    assert {p.name for p in tmp_path.iterdir()} == {f"s{suffix}", f"c{suffix}"}


def test_learning_curve_draws_both_losses_and_bleu_on_a_second_axis():
    history = [
        {"step": 10, "train_loss": 3.0, "valid_loss": 2.8, "valid_bleu": 4.0},
        {"step": 20, "train_loss": 2.0, "valid_loss": 2.1, "valid_bleu": 9.5},
    ]
    loss_ax, bleu_ax = plot.learning_curve(history).axes
    assert [list(line.get_ydata()) for line in loss_ax.lines] == [[3.0, 2.0], [2.8, 2.1]]
    assert list(bleu_ax.lines[0].get_ydata()) == [4.0, 9.5]
    assert list(bleu_ax.lines[0].get_xdata()) == [10, 20]
    assert [t.get_text() for t in loss_ax.get_legend().get_texts()] == [
        "train loss (smoothed)",
        "valid loss",
        "BLEU",
    ]


def test_coverage_histogram_counts_every_token_and_marks_both_bounds(tmp_path):
    coverage = [0.2, 0.9, 1.0, 1.1, 2.0, 3.0]
    path = tmp_path / "coverage.png"
    fig = plot.coverage_histogram(coverage, low=0.4, high=1.6, title="$valid", path=path)
    ax = fig.axes[0]
    assert sum(bar.get_height() for bar in ax.patches) == len(coverage)
    assert ax.patches[-1].get_x() + ax.patches[-1].get_width() == pytest.approx(3.0)
    assert sorted(line.get_xdata()[0] for line in ax.lines) == [0.4, 1.6]
    assert ax.get_title() == "\\$valid"
    assert png_pixels(path) == plot.image_size(fig) == (600, 360)
