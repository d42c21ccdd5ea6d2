"""benchmarks/align_aer.py: eflomal's rows are the means of several sampled draws."""

import pytest

from benchmarks import align_aer
from benchmarks.align_aer import SizedGold, _eflomal_mean_rows

GOLD = SizedGold([{(0, 0), (1, 1)}], [{(0, 0), (1, 1)}], [4])
DRAWS = iter([
    ([{(0, 0), (1, 1)}], [{(0, 0), (1, 1)}]),  # every link right: AER 0
    ([{(0, 1), (1, 1)}], [{(0, 0), (1, 0)}]),  # half right each way
])  # fmt: skip


def test_the_rows_average_the_draws_and_name_their_range(monkeypatch):
    monkeypatch.setattr(align_aer, "eflomal_links", lambda *args: next(DRAWS))
    rows = _eflomal_mean_rows(None, None, None, None, 0, GOLD, draws=2)
    forward, reverse, intersection, _ = rows
    assert forward["system"] == "eflomal forward, mean of 2 (AER 0.000-0.500)"
    assert forward["aer"] == pytest.approx(0.25)
    assert forward["precision"] == pytest.approx(0.75)
    assert forward["aer_by_length"] == {"<=20": pytest.approx(0.25), "21-40": None, ">40": None}
    assert reverse["aer"] == pytest.approx(0.25)
    # the second draw's directions share no link: its intersection is empty (AER 1)
    assert intersection["aer"] == pytest.approx(0.5) and intersection["bleu"] is None
