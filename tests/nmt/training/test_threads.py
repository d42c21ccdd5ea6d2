"""train.threads: the fixed default, /proc/stat reading and the auto governor."""

import pytest
import torch

from attnkit.nmt.training import threads as threads_mod
from attnkit.nmt.training.threads import ThreadGovernor, cpu_busy_seconds, default_threads

STAT = """cpu  900 0 300 5000 100 0 0 0 0 0
cpu0 400 0 100 2500 50 0 0 0 0 0
cpu1 500 0 200 2500 50 10 5 5 0 0
intr 12345
"""


@pytest.fixture
def keep_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    count = torch.get_num_threads()
    yield
    torch.set_num_threads(count)


def test_cpu_busy_seconds_counts_busy_ticks_of_the_chosen_cpus(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    monkeypatch.setattr(threads_mod.os, "sysconf", lambda name: 100)
    # busy = all eight counted fields but idle and iowait
    assert cpu_busy_seconds({0}, stat) == pytest.approx(5.0)
    assert cpu_busy_seconds({1}, stat) == pytest.approx(7.2)
    assert cpu_busy_seconds(None, stat) == pytest.approx(12.2)
    assert cpu_busy_seconds({5}, stat) is None
    assert cpu_busy_seconds(None, tmp_path / "missing") is None


class FakeMachine:
    """Two cores; ``others`` cores kept busy by other processes, ``mine`` by us."""

    def __init__(self, cores=2):
        self.now = self.busy = self.own = 0.0
        self.cores, self.others, self.mine = cores, 0.0, float(cores)

    def advance(self, seconds):
        self.now += seconds
        self.own += self.mine * seconds
        self.busy += min(self.others + self.mine, self.cores) * seconds


def governor(machine, setting="auto", processes=1):
    return ThreadGovernor(
        setting,
        processes,
        interval_s=2.0,
        busy=lambda: machine.busy,
        own=lambda: machine.own,
        clock=lambda: machine.now,
    )


def test_auto_gives_back_a_busy_core_and_takes_it_again(keep_threads, monkeypatch):
    monkeypatch.setattr(threads_mod, "_allowed_cpus", lambda: {0, 1})
    torch.set_num_threads(2)
    machine = FakeMachine()
    gov = governor(machine)
    assert gov.adaptive and gov.threads == 2
    machine.advance(1.0)
    assert gov.tick() is None  # the interval has not passed
    machine.advance(1.5)
    assert gov.tick() is None and torch.get_num_threads() == 2  # idle: keep both
    machine.others, machine.mine = 1.0, 0.7  # a busy process arrives; we get squeezed
    machine.advance(2.0)
    assert gov.tick() == 1 and torch.get_num_threads() == 1
    machine.mine = 1.0
    machine.advance(2.0)
    assert gov.tick() is None and gov.threads == 1  # still busy
    machine.others = 0.0
    machine.advance(2.0)
    assert gov.tick() == 2 and torch.get_num_threads() == 2


def test_a_light_background_load_keeps_every_thread(keep_threads, monkeypatch):
    monkeypatch.setattr(threads_mod, "_allowed_cpus", lambda: {0, 1})
    torch.set_num_threads(2)
    machine = FakeMachine()
    gov = governor(machine)
    machine.others, machine.mine = 0.3, 1.7
    machine.advance(2.0)
    assert gov.tick() is None and gov.threads == 2


def test_fixed_settings_and_torchrun_processes_do_not_adapt(keep_threads, monkeypatch):
    monkeypatch.setattr(threads_mod, "_allowed_cpus", lambda: {0, 1, 2, 3})
    torch.set_num_threads(4)
    machine = FakeMachine()
    fixed = governor(machine, setting=1)
    assert not fixed.adaptive and torch.get_num_threads() == 1
    torch.set_num_threads(4)
    shared = governor(machine, setting="auto", processes=2)
    assert not shared.adaptive and shared.threads == 2
    machine.others = 2.0
    machine.advance(3.0)
    assert shared.tick() is None and torch.get_num_threads() == 2


def test_auto_stays_fixed_where_proc_stat_cannot_be_read(keep_threads, monkeypatch):
    monkeypatch.setattr(threads_mod, "_allowed_cpus", lambda: {0, 1})
    torch.set_num_threads(2)
    gov = ThreadGovernor("auto", busy=lambda: None)
    assert not gov.adaptive and gov.threads == 2 and gov.tick() is None


def test_default_threads_takes_omp_num_threads_then_the_share(keep_threads, monkeypatch):
    monkeypatch.setattr(threads_mod, "_allowed_cpus", lambda: set(range(8)))
    torch.set_num_threads(8)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert default_threads() == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert default_threads() == 8 and default_threads(processes=3) == 2
    assert default_threads(processes=16) == 1


def test_a_count_lowered_by_auto_does_not_lower_the_next_default(keep_threads, monkeypatch):
    monkeypatch.setattr(threads_mod, "_allowed_cpus", lambda: {0, 1, 2, 3})
    torch.set_num_threads(4)
    machine = FakeMachine(cores=4)
    gov = governor(machine)
    machine.others, machine.mine = 1.0, 3.0
    machine.advance(2.0)
    assert gov.tick() == 3 and torch.get_num_threads() == 3
    assert default_threads() == 4  # the user's 4, not auto's 3
    torch.set_num_threads(2)  # a later choice of the user's own is respected
    assert default_threads() == 2
