"""saturation(): the sqrt(d_k) argument, measured with a fixed seed."""

import numpy as np
import pytest

from attnkit.lessons import DEFAULT_DIMS, saturation


@pytest.fixture(scope="module")
def result():
    return saturation(trials=400, seed=0)


def test_unscaled_max_weight_rises_with_width_and_saturates(result):
    unscaled = result.max_weight_unscaled
    assert result.dims == list(DEFAULT_DIMS)
    assert all(a < b for a, b in zip(unscaled, unscaled[1:], strict=False))
    assert unscaled[result.dims.index(256)] > 0.9
    assert unscaled[-1] > 0.94


def test_scaled_max_weight_stays_roughly_flat(result):
    scaled = result.max_weight_scaled
    assert max(scaled) - min(scaled) < 0.05
    assert all(0.2 < w < 0.45 for w in scaled)  # well above uniform (0.1), far from one-hot


def test_score_variance_grows_linearly_in_width(result):
    ratio = np.array(result.score_variance) / np.array(result.dims)
    assert ratio == pytest.approx(np.ones(len(result.dims)), abs=0.1)
    assert result.scaled_variance == pytest.approx([1.0] * len(result.dims), abs=0.1)


def test_a_widths_row_does_not_depend_on_the_other_widths_asked_for():
    alone, together = saturation([16], trials=50), saturation([4, 16, 16], trials=50)
    assert together.score_variance[1:] == alone.score_variance * 2
    assert together.max_weight_scaled[1:] == alone.max_weight_scaled * 2


def test_same_seed_same_numbers_other_seed_other_numbers():
    a = saturation([8, 32], trials=50, seed=3)
    assert a == saturation([8, 32], trials=50, seed=3)
    assert a.score_variance != saturation([8, 32], trials=50, seed=4).score_variance


def test_table_has_a_row_per_width(result):
    text = result.to_text()
    assert "var(q·k)" in text and "max w, unscaled" in text
    for d in DEFAULT_DIMS:
        assert f"\n{d:>6}  " in text
    assert result.to_dict()["dims"] == list(DEFAULT_DIMS)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dims": []}, "dims must be a non-empty"),
        ({"dims": [4, 0]}, "positive whole widths"),
        ({"dims": [4.5]}, r"positive whole widths, got \[4.5\]"),
        ({"dims": [float("inf")]}, r"positive whole widths, got \[inf\]"),
        ({"dims": [float("nan")]}, r"positive whole widths, got \[nan\]"),
        ({"dims": ["8"]}, r"positive whole widths, got \['8'\]"),
        ({"trials": 1}, "trials must be >= 2"),
        ({"num_keys": 1}, "num_keys must be >= 2"),
        ({"seed": 10**17}, "seed must be between -9,223,344,366,821 and 9,223,344,366,"),
        ({"seed": -(10**17)}, "seed must be between"),
        ({"trials": 100.5}, "trials must be a whole number, got 100.5"),
        ({"trials": "100"}, "trials must be a whole number, got '100'"),
        ({"num_keys": 2.5}, "num_keys must be a whole number, got 2.5"),
        ({"seed": 0.5}, "seed must be a whole number, got 0.5"),
        ({"seed": None}, "seed must be a whole number, got None"),
    ],
)
def test_bad_settings_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        saturation(**kwargs)


def test_whole_numbers_typed_as_floats_are_taken_as_they_are_for_dims():
    # trials=1e3 in a notebook stopped in torch.randn ("received an invalid combination
    # of arguments"); it is 1000 trials, as dims=[4.0] is the width 4
    as_float = saturation([4], trials=2e2, num_keys=10.0, seed=1.0)
    assert as_float == saturation([4], trials=200, num_keys=10, seed=1)
    assert (as_float.trials, as_float.num_keys, as_float.seed) == (200, 10, 1)


def test_a_draw_too_large_for_memory_is_refused_with_the_settings_named():
    # 10**9 trials at d_k 1024 need 82 TiB of float64: torch's allocator failed deep
    # inside (RuntimeError: DefaultCPUAllocator), and 10**5 trials (8 GiB) could
    # take a laptop's memory; the draw is now checked before it is made.
    with pytest.raises(ValueError, match=r"trials=1000000000 with num_keys=10 at d_k=1024"):
        saturation([4, 1024], trials=10**9)
    saturation([4], trials=10**5, num_keys=2)  # 12 million numbers: fine
