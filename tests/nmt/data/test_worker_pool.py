"""ordered_map: results in input order from worker processes, errors re-raised, small
streams mapped in this process."""

import os

import pytest

from attnkit.nmt.data.worker_pool import ordered_map


def square_and_pid(x):
    return x * x, os.getpid()


def fail_on_seven(x):
    if x == 7:
        raise ValueError(f"item {x} is bad")
    return x


def test_results_come_back_in_input_order_from_other_processes():
    found = list(ordered_map(square_and_pid, range(40), workers=2))
    assert [value for value, _ in found] == [x * x for x in range(40)]
    pids = {pid for _, pid in found[1:]}
    assert found[0][1] == os.getpid() and os.getpid() not in pids and 1 <= len(pids) <= 2


def test_an_error_in_a_worker_is_raised_here_after_the_items_before_it():
    seen = []
    with pytest.raises(ValueError, match="item 7 is bad"):
        for x in ordered_map(fail_on_seven, range(20), workers=2):
            seen.append(x)
    assert seen == list(range(7))


def test_a_stream_that_ends_in_process_starts_no_worker():
    # a lambda does not pickle: it can only have run here
    assert list(ordered_map(lambda x: x + 1, [1], workers=4)) == [2]
    assert list(ordered_map(lambda x: x + 1, [1, 2, 3], workers=1)) == [2, 3, 4]
    assert list(ordered_map(lambda x: x, [], workers=2)) == []
