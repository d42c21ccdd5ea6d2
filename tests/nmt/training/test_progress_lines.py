"""Progress written to a file or a pipe: plain lines, no carriage returns."""

from __future__ import annotations

import io

from attnkit.nmt.training.progress_lines import LineProgress, progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_pipe_gets_plain_periodic_lines(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr("sys.stderr", out)
    bar = progress(True, total=10, desc="epoch 1", unit="batch", every_s=0.0)
    assert isinstance(bar, LineProgress)
    for _ in range(3):
        bar.update(1)
        bar.set_postfix(loss="0.5", refresh=False)
    bar.close()
    lines = out.getvalue().splitlines()
    # 3 updates; the close adds no line, the last update already gave the final count
    assert "\r" not in out.getvalue() and len(lines) == 3
    assert lines[0].startswith("epoch 1: 1/10 batch, ") and lines[-1].endswith("loss 0.5")


def test_lines_come_only_every_so_often(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr("sys.stderr", out)
    with progress(True, unit=" lines", desc="translate", every_s=3600) as bar:
        bar.update(5)
        bar.update(5)
    assert out.getvalue().splitlines() == [out.getvalue().splitlines()[0]]
    assert out.getvalue().startswith("translate: 10 lines, ")


def test_a_terminal_gets_the_bar_and_disabled_means_silent(monkeypatch):
    monkeypatch.setattr("sys.stderr", _Terminal())
    assert not isinstance(progress(True, total=3), LineProgress)
    quiet = io.StringIO()
    monkeypatch.setattr("sys.stderr", quiet)
    bar = progress(False, total=3)
    bar.update(3)
    bar.close()
    assert quiet.getvalue() == ""
