"""docs/explain.md shows what ``attnkit explain`` prints, line for line."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from cli_helpers import run

EXPLAIN_MD = Path(__file__).resolve().parents[1] / "docs" / "explain.md"


def _explain_examples() -> list[tuple[str, str]]:
    """Each ``$ attnkit explain ...`` console line with the output shown under it, where
    the page shows it whole (no ``...``) and it goes to the terminal (no ``>``)."""
    examples = []
    for block in re.findall(r"```console\n(.*?)```", EXPLAIN_MD.read_text(encoding="utf-8"), re.S):
        command, _, shown = block.partition("\n")
        if command.startswith("$ attnkit explain ") and ">" not in command and "..." not in shown:
            examples.append((command[2:], shown))
    return examples


def test_the_page_shows_explain_output():
    assert len(_explain_examples()) >= 2


@pytest.mark.parametrize(("command", "shown"), _explain_examples())
def test_explain_prints_what_the_page_shows(capsys, command, shown):
    status, out, err = run(capsys, *shlex.split(command)[1:])
    assert (status, err) == (0, "")
    assert out.splitlines() == shown.splitlines()
