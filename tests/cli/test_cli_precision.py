"""--train.precision and --precision through the CLI: a bf16-trained run decodes in fp32 and
bf16 with translate, evaluate, inspect, align and serve; bad values are one-line errors."""

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from attnkit.cli import main
from attnkit.cli.serve import _load_runs
from attnkit.serve import Limits, create_app
from cli_helpers import run

REVERSE = str(Path(__file__).resolve().parents[2] / "configs" / "reverse.yaml")
TINY = [
    "--no-progress",
    "--set", "train.max_steps=10",
    "--set", "train.valid_every=10",
    "--data.toy.train_size", "320",
    "--data.toy.valid_size", "10",
    "--data.toy.test_size", "6",
    "--model.hidden_size", "24",
    "--model.embed_dim=16",
    "--train.threads", "1",
]  # fmt: skip
BF16_NOTE = "attnkit: precision bf16: --precision is bf16"


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "reverse"
    assert main(["train", REVERSE, "--out", str(out), *TINY, "--train.precision", "bf16"]) == 0
    return out


def test_training_records_bf16(bf16_run):
    (session,) = json.loads((bf16_run / "precision.json").read_text())["sessions"]
    assert session["precision"] == session["setting"] == "bf16"
    assert "precision: bf16" in (bf16_run / "config.yaml").read_text()


@pytest.mark.parametrize("precision", ["fp32", "bf16", "auto"])
def test_translate_in_each_precision(bf16_run, capsys, tmp_path, precision):
    json_out = tmp_path / "a.json"
    status, out, err = run(
        capsys, "translate", str(bf16_run), "s1 s2 s3", "s4 s5", "--precision", precision,
        "--attention-json", str(json_out), "--plot", str(tmp_path / "maps"),
    )  # fmt: skip
    assert status == 0, err
    assert len(out.splitlines()) == 2
    assert (BF16_NOTE in err) == (precision == "bf16")
    records = [json.loads(line) for line in json_out.read_text().splitlines()]
    for record in records:
        rows = record["weights"] if "weights" in record else record["attention"]
        assert all(abs(sum(row) - 1) < 2e-2 for row in rows)
    assert len(list((tmp_path / "maps").glob("*.png"))) == 2


def test_evaluate_inspect_and_align_take_precision(bf16_run, capsys, tmp_path):
    status, out, err = run(capsys, "evaluate", str(bf16_run), "--precision", "bf16")
    assert status == 0 and "BLEU" in out and BF16_NOTE in err
    status, out, err = run(capsys, "inspect", str(bf16_run), "--precision", "bf16")
    assert status == 0 and "entropy" in out and BF16_NOTE in err
    (tmp_path / "src").write_text("s1 s2 s3\ns4 s5\n")
    (tmp_path / "tgt").write_text("s3 s2 s1\ns5 s4\n")
    status, out, err = run(
        capsys, "align", str(bf16_run), "--src", str(tmp_path / "src"),
        "--tgt", str(tmp_path / "tgt"), "--precision", "bf16",
    )  # fmt: skip
    assert status == 0 and len(out.splitlines()) == 2 and BF16_NOTE in err


def test_serve_translates_in_bf16(bf16_run, capsys):
    runs, missing = _load_runs([str(bf16_run)], "best", "bf16")
    assert not missing and runs[0].run.precision.name == "bf16"
    assert BF16_NOTE in capsys.readouterr().err  # announced, as the other commands do
    with TestClient(create_app(runs, Limits(), missing)) as client:
        response = client.post("/translate", json={"text": "s1 s2 s3"})
    assert response.status_code == 200, response.text
    (sentence,) = response.json()["sentences"]
    assert isinstance(sentence["translation"], str)


@pytest.mark.parametrize("command", ["translate", "evaluate", "inspect", "align", "serve"])
def test_an_unknown_precision_is_a_usage_error(bf16_run, capsys, command):
    with pytest.raises(SystemExit) as exit_:
        run(capsys, command, str(bf16_run), "--precision", "fp16")
    assert exit_.value.code == 2
    assert "--precision: invalid choice: 'fp16'" in capsys.readouterr().err


def test_serve_takes_device_and_threads_as_translate_does(bf16_run, capsys, monkeypatch):
    """serve had no --device or --threads: a server could not be given its share of the
    cores, nor a GPU."""
    import torch

    runs, _ = _load_runs([str(bf16_run)], "best", "fp32", "cpu")
    assert str(runs[0].run.device) == "cpu"
    with pytest.raises(ValueError, match="--device"):
        _load_runs([str(bf16_run)], "best", "fp32", "gpu0")
    status, _, err = run(capsys, "serve", str(bf16_run), "--threads", "0")
    assert status == 2 and "--threads must be >= 1, got 0" in err
    threads = torch.get_num_threads()
    monkeypatch.setattr(
        "attnkit.cli.serve._listen", lambda *a: (_ for _ in ()).throw(SystemExit(0))
    )
    try:
        with pytest.raises(SystemExit):
            run(capsys, "serve", str(bf16_run), "--threads", "1", "--precision", "fp32")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
