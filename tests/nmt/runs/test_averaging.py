"""Checkpoint averaging: the exact element-wise mean, dtypes kept, buffers from the newest."""

import pytest
import torch

from attnkit.nmt.runs.averaging import average_weights


def _states():
    """Three hand-made state dicts (oldest first) whose float means are exact in float32."""
    return [
        {
            "w": torch.tensor([[1.0, -2.0], [0.5, 3.0]]),
            "b": torch.tensor([0.25]),
            "steps": torch.tensor(10),
            "on": torch.tensor([True, False]),
        },
        {
            "w": torch.tensor([[4.0, -5.0], [1.5, 6.0]]),
            "b": torch.tensor([0.5]),
            "steps": torch.tensor(20),
            "on": torch.tensor([False, False]),
        },
        {
            "w": torch.tensor([[7.0, -11.0], [-2.0, 0.0]]),
            "b": torch.tensor([-0.75]),
            "steps": torch.tensor(30),
            "on": torch.tensor([False, True]),
        },
    ]


def test_mean_of_three_state_dicts_equals_the_numbers_by_hand():
    mean = average_weights(_states())
    assert torch.equal(mean["w"], torch.tensor([[4.0, -6.0], [0.0, 3.0]]))
    assert torch.equal(mean["b"], torch.tensor([0.0]))
    assert list(mean) == ["w", "b", "steps", "on"]


def test_integer_and_bool_buffers_come_from_the_newest_state():
    states = _states()
    mean = average_weights(states)
    assert mean["steps"].dtype == torch.int64 and int(mean["steps"]) == 30
    assert mean["on"].dtype == torch.bool and mean["on"].tolist() == [False, True]
    mean["steps"] += 1  # a copy: the newest state is untouched
    assert int(states[-1]["steps"]) == 30


def test_a_single_state_averages_to_itself():
    (state,) = _states()[:1]
    mean = average_weights([state])
    assert all(torch.equal(mean[k], state[k]) for k in state)
    assert mean["w"].data_ptr() != state["w"].data_ptr()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_each_tensor_keeps_its_dtype(dtype):
    states = [{"w": torch.full((3,), float(v), dtype=dtype)} for v in (1, 2, 6)]
    mean = average_weights(states)["w"]
    assert mean.dtype == dtype
    assert mean.tolist() == [3.0, 3.0, 3.0]


def test_float16_weights_near_the_top_of_their_range_do_not_overflow():
    # 3 x 60000 overflows float16 (max 65504) if summed in float16; the mean is 60000.
    states = [{"w": torch.tensor([60000.0], dtype=torch.float16)} for _ in range(3)]
    naive = sum(s["w"] for s in states)
    assert torch.isinf(naive).all()  # what the float64 sum avoids
    assert average_weights(states)["w"].item() == 60000.0


def test_float32_mean_is_the_float64_mean_rounded_once():
    generator = torch.Generator().manual_seed(0)
    states = [{"w": torch.randn(50, generator=generator)} for _ in range(5)]
    expected = (sum(s["w"].double() for s in states) / 5).float()
    assert torch.equal(average_weights(states)["w"], expected)


def test_no_states_is_an_error():
    with pytest.raises(ValueError, match="states is empty"):
        average_weights([])


def test_a_missing_key_is_named_with_the_state_index():
    states = _states()
    del states[0]["b"]
    with pytest.raises(ValueError, match=r"states\[0\] does not have the keys.*missing \['b'\]"):
        average_weights(states)


def test_a_shape_mismatch_is_named():
    states = _states()
    states[1]["w"] = torch.zeros(3, 2)
    with pytest.raises(ValueError, match=r"states\[1\]\['w'\] is \(3, 2\).*is \(2, 2\)"):
        average_weights(states)


def test_a_dtype_mismatch_is_named():
    states = _states()
    states[0]["b"] = states[0]["b"].double()
    with pytest.raises(ValueError, match=r"states\[0\]\['b'\] is \(1,\) torch.float64"):
        average_weights(states)
