"""CLI misuse and damaged run folders: exit status 2, one message on stderr, no traceback;
``attnkit train --resume RUN_DIR`` continues from the folder's own config; a full disk
is one line naming the file, with exit status 74 (stdout's named ``<stdout>``)."""

import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import attnkit
import attnkit.nmt.decoding.output as output_module
from attnkit.cli import main

REVERSE = str(Path(__file__).resolve().parents[2] / "configs" / "reverse.yaml")
TINY = [
    "--no-progress",
    "--train.max_steps", "4",
    "--train.valid_every", "2",
    "--train.threads", "1",
    "--data.toy.train_size", "64",
    "--data.toy.valid_size", "8",
    "--model.hidden_size", "8",
    "--model.embed_dim", "8",
]  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "run"
    assert main(["train", REVERSE, "--out", str(out), *TINY]) == 0
    return out


def error_of(argv, capsys, code=2):
    assert main(argv) == code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    head = f"attnkit {argv[0]}: error: "
    assert captured.err.count(head) == 1
    return captured.err[captured.err.index(head) :]  # the message, possibly several lines


def test_resume_run_dir_form_reuses_the_saved_config(run_dir, capsys):
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "holds a finished run with this config; reusing it" in captured.err
    assert f"run folder: {run_dir}" in captured.out


def test_reusing_a_finished_run_names_the_budget_that_still_holds_it(run_dir, capsys):
    # a larger max_steps with the time cap spent was reused with "a larger
    # train.epochs/max_steps/max_minutes/early_stopping goes on": it did not go on
    more = ["--train.max_steps", "8", "--train.max_minutes", "0.0001"]
    assert main(["train", "--resume", str(run_dir), "--no-progress", *more]) == 0
    err = capsys.readouterr().err
    assert "resuming with train.max_minutes: null in the run, 0.0001 given" in err
    assert (
        "holds a finished run with this config; reusing it (max_minutes=0.0001 reached: "
        "raise train.max_minutes to train on; --overwrite retrains)"
    ) in err
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 0
    assert "(max_steps=4 reached: raise train.max_steps to train on;" in capsys.readouterr().err


def test_train_argument_misuse(run_dir, capsys, tmp_path):
    assert "give a CONFIG.yaml, or --resume RUN_DIR" in error_of(["train"], capsys)
    assert "is a folder; to continue that run pass --resume" in error_of(
        ["train", str(run_dir)], capsys
    )
    assert f"{tmp_path}/config.yaml not found" in error_of(
        ["train", "--resume", str(tmp_path)], capsys
    )
    other = tmp_path / "other"
    assert "differs from the run folder" in error_of(
        ["train", "--resume", str(run_dir), "--out", str(other)], capsys
    )
    assert "the config differs from the one saved" in error_of(
        ["train", "--resume", str(run_dir), "--model.hidden_size", "9"], capsys
    )


def copy_run(run_dir, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in run_dir.iterdir():
        if path.is_file():
            (copy / path.name).write_bytes(path.read_bytes())
    return copy


def test_damaged_checkpoints_are_named(run_dir, capsys, tmp_path):
    run = copy_run(run_dir, tmp_path)
    best = json.loads((run / "best.json").read_text())["weights"]
    (run / best).write_bytes((run / best).read_bytes()[:100])
    message = error_of(["translate", str(run), "s1 s2", "--checkpoint", "best"], capsys)
    assert f"{run / best}: checksum mismatch" in message and "truncated or corrupt" in message
    (run / "last.json").write_text('{"format": "attnkit-checkpoint", "weights": "../x"}')
    (run / "last.prev.json").unlink()
    message = error_of(["translate", str(run), "s1", "--checkpoint", "last"], capsys)
    assert f"{run / 'last.json'}: the 'weights' field must name a file beside it" in message
    (run / "config.yaml").write_text("model: {hidden_size: 0}\n")
    message = error_of(["evaluate", str(run)], capsys)
    assert (
        "data: required key is missing" in message and "model.hidden_size: must be > 0" in message
    )


def test_resume_with_both_checkpoints_damaged_is_one_error(run_dir, capsys, tmp_path):
    run = copy_run(run_dir, tmp_path)
    for name in ("last.json", "last.prev.json"):
        (run / name).write_bytes(b"\x00" * 10)
    message = error_of(["train", "--resume", str(run), "--no-progress"], capsys)
    assert "no usable checkpoint" in message and "last.prev.json" in message


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("tokenizer.json", "{}", "tokenizer.json: not a valid tokenizer manifest"),
        ("tokenizer.json", '{"kind": "word", "joint": true, "src": "/etc/passwd", "tgt": "x"}',
         "tokenizer.json: unknown kind 'word' or bad file names"),
        ("vocab.json", '{"a": 1}', "vocab.json: not a JSON list of words"),
    ],
)  # fmt: skip
def test_damaged_tokenizer_files_are_named(run_dir, capsys, tmp_path, name, text, expected):
    run = copy_run(run_dir, tmp_path)
    (run / name).write_text(text)
    assert expected in error_of(["translate", str(run), "s1"], capsys)


def test_evaluate_warns_about_truncated_sources(run_dir, capsys, tmp_path):
    run = copy_run(run_dir, tmp_path)
    config = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(config.replace("max_input_len: null", "max_input_len: 3"))
    assert main(["evaluate", str(run), "--split", "valid"]) == 0
    captured = capsys.readouterr()
    assert "valid: 8 sentences" in captured.out
    assert "tokens, truncated to the model's limit of 3" in captured.err


def test_nothing_is_unpickled_when_reading_a_run(run_dir, capsys, monkeypatch):
    import pickle

    import torch

    def forbidden(*args, **kwargs):
        raise AssertionError("a user file was unpickled")

    for module, name in [(torch, "load"), (pickle, "load"), (pickle, "loads")]:
        monkeypatch.setattr(module, name, forbidden)
    assert main(["translate", str(run_dir), "s1 s2", "--checkpoint", "last"]) == 0
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("sink", ["--attention-json", "--show-attention", "--plot", "--html"])
def test_translate_onto_a_full_disk_is_one_line_and_status_74(
    run_dir, capsys, tmp_path, monkeypatch, sink
):
    target = {"--attention-json": "/dev/full", "--plot": str(tmp_path / "maps")}
    target["--html"] = str(tmp_path / "t.html")
    argv = ["translate", str(run_dir), "a b c", sink]
    if sink == "--show-attention":
        argv += ["--attention-out", "/dev/full"]  # every write: ENOSPC
    else:
        argv.append(target[sink])
    named = {"--plot": str(tmp_path / "maps" / "sentence_001.png")}.get(sink, argv[-1])
    monkeypatch.setattr(output_module, "write_heatmaps", full_disk)
    monkeypatch.setattr(os, "fsync", full_disk)
    message = error_of(argv, capsys, code=74)
    assert message == f"attnkit translate: error: cannot write {named}: No space left on device\n"


def test_evaluate_output_onto_a_full_disk_is_status_74(run_dir, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(os, "fsync", full_disk)
    out = tmp_path / "hyp.txt"
    message = error_of(["evaluate", str(run_dir), "--output", str(out)], capsys, code=74)
    assert message == f"attnkit evaluate: error: cannot write {out}: No space left on device\n"


class FullStdout(io.StringIO):
    """A stdout on a full disk: every write fails with ENOSPC."""

    def write(self, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("command", [["translate", "a b c"], ["evaluate"]])
def test_stdout_onto_a_full_disk_is_one_line_and_status_74(run_dir, capsys, monkeypatch, command):
    monkeypatch.setattr(sys, "stdout", FullStdout())
    argv = [command[0], str(run_dir), *command[1:]]
    message = error_of(argv, capsys, code=74)
    assert (
        message == f"attnkit {command[0]}: error: cannot write <stdout>: No space left on device\n"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["explain", "--query", "1,0", "--keys", "1,0;0,1"],
        ["explain", "--query", "1,0", "--keys", "1,0;0,1", "--format", "json"],
        ["saturation", "--dims", "4", "--trials", "2"],
        ["plot", "mask", "--causal", "3", "-o", "MASK"],
        ["train", REVERSE, "--out", "RUN", *TINY],
    ],
)
def test_every_command_onto_a_full_stdout_is_one_line_and_status_74(
    argv, capsys, monkeypatch, tmp_path
):
    """Not only translate and evaluate: a command that writes stdout in one go (explain's
    trace) or flushes it (plot's 'wrote' line) met the full disk with a traceback."""
    paths = {"MASK": str(tmp_path / "mask.png"), "RUN": str(tmp_path / "run")}
    monkeypatch.setattr(sys, "stdout", FullStdout())
    message = error_of([paths.get(a, a) for a in argv], capsys, code=74)
    assert message.startswith(
        f"attnkit {argv[0]}: error: cannot write <stdout>: No space left on device"
    )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_buffered_stdout_onto_a_full_disk_fails_at_the_last_flush_with_74(run_dir):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(Path(attnkit.__file__).parents[1])
    command = [sys.executable, "-m", "attnkit.cli", "translate", str(run_dir), "a b c"]
    with open("/dev/full", "w") as full:
        proc = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, env=env, timeout=120)
    err = proc.stderr.decode()
    assert proc.returncode == 74
    assert err == "attnkit translate: error: cannot write <stdout>: No space left on device\n"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["explain", "--help"]])
@pytest.mark.parametrize("unbuffered", [True, False])
def test_help_onto_a_full_disk_is_74_not_a_silent_0(argv, unbuffered):
    """argparse ignores a failed write of its help: the text was lost and the status 0."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(Path(attnkit.__file__).parents[1])
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    command = [sys.executable, "-m", "attnkit.cli", *argv]
    with open("/dev/full", "w") as full:
        proc = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, env=env, timeout=120)
    assert proc.returncode == 74
    assert (
        proc.stderr.decode() == "attnkit: error: cannot write <stdout>: No space left on device\n"
    )


def ascii_stdout():
    """A stdout whose encoding is ASCII (``LC_ALL=C``, ``PYTHONIOENCODING=ascii``)."""
    return io.TextIOWrapper(io.BytesIO(), encoding="ascii", write_through=True)


def test_train_onto_an_ascii_stdout_names_a_non_ascii_run_folder(monkeypatch, tmp_path):
    """The run trained, then its summary line could not encode the folder's name: status 2
    and 'ascii codec can't encode', though the checkpoints were written."""
    stdout = ascii_stdout()
    monkeypatch.setattr(sys, "stdout", stdout)
    out = tmp_path / "Prüfung"
    assert main(["train", REVERSE, "--out", str(out), *TINY]) == 0
    said = stdout.buffer.getvalue().decode("ascii")
    assert said.startswith(f"run folder: {tmp_path}/Pr?fung  best valid BLEU ")


def test_help_onto_an_ascii_stdout_is_written_not_a_traceback():
    """saturation's description has 'q·k': its --help was a UnicodeEncodeError traceback."""
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    env["PYTHONPATH"] = str(Path(attnkit.__file__).parents[1])
    command = [sys.executable, "-m", "attnkit.cli", "saturation", "--help"]
    proc = subprocess.run(command, capture_output=True, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stderr == b""
    assert b"variance of q?k and the mean largest" in b" ".join(proc.stdout.split())


def test_an_in_process_caller_keeps_its_strict_stdout(monkeypatch):
    """main() wrote '?' for what an ASCII stdout lacks, and left the caller's stream so."""
    import io

    stream = io.TextIOWrapper(io.BytesIO(), encoding="ascii", errors="strict")
    monkeypatch.setattr(sys, "stdout", stream)
    with pytest.raises(SystemExit):  # argparse's --help, its text with 'q·k'
        main(["saturation", "--help"])
    assert stream.errors == "strict"
    stream.flush()
    assert b"q?k" in stream.buffer.getvalue()
