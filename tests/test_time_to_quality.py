"""The time-to-quality bench reads both toolkits' logs, times them, keeps the runs comparable."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save_file

from benchmarks import time_to_quality as ttq

ROOT = Path(__file__).resolve().parent.parent


def test_reads_joey_validation_lines(tmp_path):
    (tmp_path / "validations.txt").write_text(
        "Steps: 250\tloss: 4.93471\tacc: 0.08375\tppl: 139.03300\tbleu: 21.03077\t"
        "LR: 0.00200000\t*\n"
        "Steps: 500\tloss: 3.06670\tacc: 0.37161\tppl: 21.64977\tbleu: 30.50000\t"
        "LR: 0.00100000\t\n"
    )
    assert ttq.joey_validations(tmp_path) == [(250, 21.03077), (500, 30.5)]
    assert ttq.joey_validations(tmp_path / "missing") == []


def test_reads_attnkit_metrics_and_counts_only_model_weights(tmp_path):
    rows = [{"step": 250, "valid_bleu": 12.5}, {"step": 500, "valid_bleu": 31.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert ttq.attnkit_validations(tmp_path) == [(250, 12.5), (500, 31.0)]
    weights = {
        "model.a": torch.zeros(2, 3),
        "model.b": torch.zeros(4),
        "optim.a.exp_avg": torch.zeros(6),
    }
    save_file(weights, tmp_path / "last.0123abcd.safetensors")
    assert ttq.attnkit_params(tmp_path) == 10


def test_minutes_to_a_level_and_the_ratio_bound_when_joey_never_gets_there():
    ours = ttq.Curve("attnkit", [(60.0, 250, 20.0), (300.0, 1000, 30.2), (540.0, 2250, 35.1)])
    rows = [(600.0, 250, 10.0), (3500.0, 1750, 31.0)]
    peer = ttq.Curve("Joey NMT", rows, note="time cap of 60 min", minutes=60.0)
    assert ours.minutes_to(30) == 5.0 and ours.minutes_to(35) == 9.0 and ours.minutes_to(40) is None
    text = ttq.report([ours, peer], threads=1)
    assert "ttq_bleu30_attnkit_vs_joey: 0.09" in text  # 5 min against 58.3 min
    assert "ttq_bleu35_attnkit_vs_joey: <= 0.15 (Joey NMT not there after 60.0 min)" in text


def ours_at(minutes: float) -> ttq.Curve:
    return ttq.Curve("attnkit", [(minutes * 60, 250, 31.0)])


def test_a_missing_or_crashed_peer_is_reported_not_fatal(tmp_path):
    assert not ttq.joey_installed(tmp_path / "no-venv")
    missing = ttq.Curve("Joey NMT", note="not installed (run with --setup)")
    text = ttq.report([ours_at(1.0), missing], threads=2)
    assert "| Joey NMT | - | 0 | - | - | - | not installed (run with --setup) |" in text
    assert "ttq_bleu30_attnkit_vs_joey: -" in text
    crashed = ttq.Curve("Joey NMT", [(60.0, 250, 1.0)], note="exited with status 1", minutes=1.5)
    assert "ttq_bleu30_attnkit_vs_joey: -" in ttq.report([ours_at(1.0), crashed], threads=1)


def test_watch_times_each_validation_and_stops_the_run_at_the_top_level(tmp_path):
    log = tmp_path / "validations.txt"
    script = (
        "import sys, time\n"
        "for step, bleu in [(250, 20.0), (500, 36.0), (750, 37.0)]:\n"
        "    time.sleep(1.5)\n"
        f"    open({str(log)!r}, 'a').write(f'Steps: {{step}}\\tbleu: {{bleu}}\\n')\n"
        "time.sleep(30)\n"
    )
    rows, note, minutes = ttq.watch(
        [sys.executable, "-c", script],
        lambda: ttq.joey_validations(tmp_path),
        cap_minutes=1.0,
        env=ttq.thread_env(1),
        log=tmp_path / "run.log",
    )
    assert [(step, bleu) for _, step, bleu in rows] == [(250, 20.0), (500, 36.0)]
    assert note == "reached BLEU 35" and 1 < rows[0][0] < rows[1][0] < 30
    assert rows[1][0] / 60 <= minutes < 0.5


def test_joey_config_is_the_quick_preset(tmp_path):
    quick = yaml.safe_load((ROOT / "configs" / "quick.yaml").read_text())
    spm = tmp_path / "spm.model"
    cfg = ttq.joey_config(tmp_path, tmp_path / "joey", spm)
    train, enc, dec = cfg["training"], cfg["model"]["encoder"], cfg["model"]["decoder"]
    assert train["batch_size"] == quick["train"]["batch_size"]
    assert train["learning_rate"] == ttq.LR and train["scheduling"] == "plateau"
    command = ttq.attnkit_command(tmp_path, threads=1)
    assert command[command.index("--train.lr") + 1] == str(ttq.LR)
    assert command[command.index("--train.lr_schedule") + 1] == "plateau"
    assert train["label_smoothing"] == quick["train"]["label_smoothing"]
    assert train["validation_freq"] == ttq.VALID_EVERY == quick["train"]["valid_every"]
    for side in (enc, dec):
        assert side["hidden_size"] == quick["model"]["hidden_size"]
        assert side["embeddings"]["embedding_dim"] == quick["model"]["embed_dim"]
        assert side["dropout"] == quick["model"]["dropout"] and side["rnn_type"] == "gru"
    assert enc["bidirectional"] and not dec["input_feeding"] and dec["attention"] == "bahdanau"
    assert (
        ttq.joey_config(tmp_path, tmp_path, spm, "luong")["model"]["decoder"]["attention"]
        == "luong"
    )
    assert (
        quick["model"]["query_timing"] == "current"
    )  # Joey's recurrent decoder attends after the step
    for lang in ("src", "trg"):
        assert cfg["data"][lang]["max_length"] == quick["data"]["max_src_len"]
        assert cfg["data"][lang]["tokenizer_cfg"]["model_file"] == str(spm.resolve())
    assert cfg["testing"]["beam_size"] == 1  # greedy validation, as attnkit's


def test_only_one_toolkit_reuses_the_other_saved_curve(tmp_path):
    saved = ttq.Curve("attnkit", [(70.0, 250, 7.9), (533.4, 2250, 35.06)], 2610848, "reached")
    (tmp_path / "attnkit.json").write_text(json.dumps(ttq.asdict(saved)))
    args = argparse.Namespace(only="joey", out=tmp_path)
    assert ttq.measured("attnkit", args) == saved
    with pytest.raises(SystemExit, match="no earlier joey curve"):
        ttq.measured("joey", argparse.Namespace(only="attnkit", out=tmp_path))
