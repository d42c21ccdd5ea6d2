"""benchmarks/align_aer.py: eflomal's rows are the means of several sampled draws."""

import pytest

from benchmarks import align_aer
from benchmarks.align_aer import SizedGold, _eflomal_mean_rows

GOLD = SizedGold([{(0, 0), (1, 1)}], [{(0, 0), (1, 1)}], [4])


def test_the_rows_average_the_draws_and_name_their_range(monkeypatch):
    draws = iter([
        ([{(0, 0), (1, 1)}], [{(0, 0), (1, 1)}]),  # every link right: AER 0
        ([{(0, 1), (1, 1)}], [{(0, 0), (1, 0)}]),  # half right each way
    ])  # fmt: skip
    text = []
    monkeypatch.setattr(align_aer, "eflomal_text", lambda *args: text.append(args) or ["x"])
    monkeypatch.setattr(align_aer, "_eflomal", lambda venv, lines: next(draws))
    rows = _eflomal_mean_rows(None, None, [["s"]], [["t"]], 0, GOLD, draws=2)
    assert len(text) == 1  # the text is read once, eflomal sampled twice
    forward, reverse, intersection, _ = rows
    assert forward["system"] == "eflomal forward, mean of 2 (AER 0.000-0.500)"
    assert forward["aer"] == pytest.approx(0.25)
    assert forward["precision"] == pytest.approx(0.75)
    assert forward["aer_by_length"] == {"<=20": pytest.approx(0.25), "21-40": None, ">40": None}
    assert reverse["aer"] == pytest.approx(0.25)
    # the second draw's directions share no link: its intersection is empty (AER 1)
    assert intersection["aer"] == pytest.approx(0.5) and intersection["bleu"] is None
