"""ordered_map: results in input order from worker processes, errors re-raised, small
streams mapped in this process."""

import os
import subprocess
import sys
import time

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


OWNER = """
import multiprocessing, time
from attnkit.nmt.data.worker_pool import ordered_map

def items():
    yield from [0.0] * 4
    while len(multiprocessing.active_children()) < 2:
        time.sleep(0.05)
    print(*(p.pid for p in multiprocessing.active_children()), flush=True)
    time.sleep(600)  # still reading when it is killed
    yield 0.0

if __name__ == "__main__":
    for _ in ordered_map(time.sleep, items(), workers=2):
        pass
"""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_workers_end_when_the_process_that_started_them_is_killed(tmp_path):
    script = tmp_path / "owner.py"
    script.write_text(OWNER, encoding="utf-8")
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(pid) for pid in owner.stdout.readline().split()]
        assert len(workers) == 2 and all(map(_running, workers))
    finally:
        owner.kill()  # SIGKILL: no shutdown of the pool
        owner.wait()
    deadline = time.monotonic() + 20
    while any(map(_running, workers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(map(_running, workers)), "workers outlived the process that started them"


UNGUARDED = """
from attnkit.nmt.data.worker_pool import ordered_map

print(sum(ordered_map(abs, range(8), workers=2)))  # no __main__ guard: workers run this too
"""


def test_a_script_without_a_main_guard_is_told_what_broke_its_workers(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    parent = "concurrent.futures.process.BrokenProcessPool: "  # after the workers' tracebacks
    error = [line for line in done.stderr.splitlines() if line.startswith(parent)][-1]
    assert "a worker process ended abruptly" in error
    assert "'if __name__ == \"__main__\":'" in error
