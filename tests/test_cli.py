"""The attnkit command line as a whole: dispatch, errors, argument order."""

import pytest

from attnkit.cli import main


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().err


def test_sentences_may_follow_options(tmp_path, capsys):
    missing = tmp_path / "no_run"
    assert main(["translate", str(missing), "--beam", "2", "Ein Hund."]) == 2
    err = capsys.readouterr().err
    assert "unrecognized" not in err and str(missing) in err
    assert "Traceback" not in err


def test_unknown_options_are_still_rejected(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["translate", str(tmp_path), "--bogus", "x"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --bogus x" in capsys.readouterr().err
