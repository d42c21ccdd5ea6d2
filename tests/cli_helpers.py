"""Shared helpers for the CLI tests (imported explicitly): run a command in-process."""

from attnkit.cli import main

LESSON = ["explain", "--query", "2,0,1", "--keys", "1,0,0;0,1,0;0,0,1"]


def run(capsys, *argv):
    """``attnkit ARGV...`` -> ``(exit status, stdout, stderr)``."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def assert_one_line_error(err: str, command: str, message: str) -> None:
    """stderr is exactly ``attnkit COMMAND: error: ...MESSAGE...`` on one line, no traceback."""
    assert err.startswith(f"attnkit {command}: error: ") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
