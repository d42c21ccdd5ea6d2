"""The attnkit command line as a whole: dispatch, errors, argument order."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import attnkit
from attnkit.cli import BROKEN_PIPE_STATUS, main
from attnkit.cli.parsing import attach_negative_values


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().err


def test_sentences_may_follow_options(tmp_path, capsys):
    missing = tmp_path / "no_run"
    assert main(["translate", str(missing), "--beam", "2", "Ein Hund."]) == 2
    err = capsys.readouterr().err
    assert "unrecognized" not in err and str(missing) in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "sentences"),
    [
        (["--beam", "2", "--", "-s1 s2", "s3"], ["-s1 s2", "s3"]),  # `--` ends the options
        (["--beam", "2", "- Hallo!", "-- Tschüss!"], ["- Hallo!", "-- Tschüss!"]),  # dialogue
        (["Ja.", "--beam", "2", "--", "--beam"], ["Ja.", "--beam"]),
        (["--beam", "2", "--"], []),  # nothing after `--`: stdin is read
    ],
)
def test_sentences_after_options_may_start_with_a_dash(monkeypatch, argv, sentences):
    # `translate RUN --beam 2 -- "-s1 s2"` and `translate RUN --beam 2 "- Hallo!"` were
    # "unrecognized arguments", where argparse itself reads both as sentences
    seen = []
    monkeypatch.setattr("attnkit.cli.nmt.run_translate", lambda args: seen.append(args) or 0)
    assert main(["translate", "runs/x", *argv]) == 0
    assert seen[0].sentences == sentences and seen[0].beam == 2


def test_unknown_options_are_still_rejected(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["translate", str(tmp_path), "--bogus", "x"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --bogus x" in capsys.readouterr().err


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    captured = capsys.readouterr()
    assert exit_.value.code == 0 and not captured.err
    assert captured.out == f"attnkit {attnkit.__version__}\n" == "attnkit 0.1.0\n"


def test_negative_values_are_joined_to_their_number_option_only():
    argv = ["explain", "--query", "-1.5,2", "--keys", "-1,0;0,1", "--values", "-.5,1;2,3"]
    assert attach_negative_values(argv) == [
        "explain", "--query=-1.5,2", "--keys=-1,0;0,1", "--values=-.5,1;2,3",
    ]  # fmt: skip
    untouched = ["translate", "run", "--show-attention", "-5", "--beam", "-1", "--", "--keys", "-1"]
    assert attach_negative_values(untouched) == untouched


@pytest.mark.parametrize(
    "argv",
    [
        ["explain", "--query", "2,0,1", "--keys", "1,0,0;0,1,0;0,0,1", "--format", "json"],
        ["saturation", "--dims", "4", "--trials", "5"],
    ],
)
def test_a_reader_that_leaves_ends_the_command_quietly_with_141(argv):
    env = {**os.environ, "PYTHONPATH": str(Path(attnkit.__file__).parents[1])}
    command = [sys.executable, "-m", "attnkit.cli", *argv]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # the reader leaves before the first line (the child is still importing)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 == BROKEN_PIPE_STATUS
    assert err == ""  # no BrokenPipeError traceback, no "Exception ignored" at exit


def _started_with_closed(fd: int, argv: list[str]) -> subprocess.CompletedProcess:
    """``attnkit ARGV`` started with descriptor ``fd`` closed (``>&-`` or ``2>&-``)."""
    env = {**os.environ, "PYTHONPATH": str(Path(attnkit.__file__).parents[1])}
    command = [sys.executable, "-m", "attnkit.cli", *argv]
    return subprocess.run(
        command, capture_output=True, env=env, timeout=120, preexec_fn=lambda: os.close(fd)
    )


def test_a_closed_stdout_is_refused_before_any_work_with_74():
    # it was an AttributeError traceback (status 1) at the first result, after the work
    done = _started_with_closed(1, ["explain", "--query", "2,0,1", "--keys", "1,0,0;0,1,0"])
    assert done.returncode == 74
    assert done.stderr.decode() == "attnkit: error: cannot write <stdout>: it is closed\n"


def test_a_closed_stderr_keeps_errors_and_notes_off_stdout(tmp_path):
    # print(..., file=sys.stderr) with stderr closed writes to stdout: a script's
    # `attnkit translate ... 2>&- > out.txt` found the error message in out.txt
    done = _started_with_closed(2, ["translate", str(tmp_path / "no_run"), "s1"])
    assert done.returncode == 2 and done.stdout == b""


def test_a_file_that_cannot_be_opened_is_one_line_not_a_traceback(tmp_path, capsys):
    # `attnkit plot weights FOLDER` (or a weights file or config the user may not read) ended
    # in an IsADirectoryError / PermissionError traceback with status 1
    assert main(["plot", "weights", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"attnkit plot: error: {tmp_path}: Is a directory\n"


def test_a_full_disk_met_outside_the_named_writers_is_still_status_74(monkeypatch, capsys):
    """An OSError naming a file is a usage error (2), unless only a write meets it: a full
    disk keeps the write-error status the README promises."""
    import errno

    from attnkit.cli import lessons

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device", "out.png")

    monkeypatch.setattr(lessons, "_run_explain", full)
    status = main(["explain", "--query", "1,0", "--keys", "1,0;0,1"])
    assert status == 74
    assert capsys.readouterr().err == "attnkit explain: error: out.png: No space left on device\n"
