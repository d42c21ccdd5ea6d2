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


def test_write_labels_without_eflomal_is_one_line_naming_the_venv(tmp_path, monkeypatch, capsys):
    # eflomal missing and not installable (offline, or a venv folder not writable): before,
    # --write-labels ended in subprocess's CalledProcessError traceback
    import subprocess

    def fail(cmd, check):
        raise subprocess.CalledProcessError(1, cmd)

    monkeypatch.setattr(align_aer.subprocess, "run", fail)
    corpus = tmp_path / "train.tsv"
    corpus.write_text("a b\tc d\n")
    config = tmp_path / "run.yaml"
    config.write_text(f"data: {{train: {{tsv: {corpus}}}, valid: {{tsv: {corpus}}}}}\n")
    venv = tmp_path / "no-eflomal"
    out = tmp_path / "labels.align"
    with pytest.raises(SystemExit) as stop:
        align_aer.main(["--write-labels", str(out), "--config", str(config),
                        "--eflomal-venv", str(venv)])  # fmt: skip
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"--write-labels: eflomal is not installed in --eflomal-venv {venv}" in err
    assert f"{venv}/bin/pip install eflomal" in err
    assert not out.exists()


@pytest.mark.parametrize("pairs", ["0", "447", "-1"])
def test_table_refuses_a_dev_split_that_leaves_no_pairs_to_choose_or_score(pairs, capsys):
    # --dev-pairs 0 or the whole gold ended in a ValueError traceback from the layer choice
    # or the AER of no pairs, after eflomal had run
    with pytest.raises(SystemExit) as stop:
        align_aer.main(["--table", "--rnn", "RUN", "--dev-pairs", pairs])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"--dev-pairs must be from 1 to 446 (the gold has 447 pairs), got {pairs}" in err
