"""Every ``attnkit`` command that docs/*.md shows uses options its parser has."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from attnkit.cli import build_parser

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _commands(text: str) -> list[str]:
    """The ``attnkit ...`` commands of a page's shell blocks and inline code spans."""
    blocks = re.findall(r"```(?:bash|console)\n(.*?)```", text, re.S)
    spans = re.findall(r"`(attnkit [^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    found = [line[line.index("attnkit ") :] for line in lines if "attnkit " in line]
    return [" ".join(command.split()) for command in found + spans]


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(name)
    return None


def _words(command: str) -> list[str]:
    """The shell words of ``command`` up to a comment, pipe, redirection or ``;``."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars="|>&;")
    lexer.whitespace_split, lexer.commenters = True, "#"
    words = []
    for word in lexer:
        if word and set(word) <= set("|>&;"):
            break
        words.append(word)
    return words


def _unknown_options(command: str) -> list[str]:
    """The ``--options`` of ``command`` (up to a comment, pipe or redirection) that its
    (sub)command does not take; none when the word after ``attnkit`` is no command."""
    words = _words(command)[1:]
    parser = _subparser(build_parser(), words[0]) if words else None
    if parser is None:
        return []
    if len(words) > 1 and _subparser(parser, words[1]) is not None:
        parser = _subparser(parser, words[1])
    known = {option for action in parser._actions for option in action.option_strings}
    options = {word.split("=")[0] for word in words if re.match(r"--[a-z]", word)}
    return sorted(options - known)


def test_the_docs_show_attnkit_commands():
    assert len(_commands("\n".join(p.read_text("utf-8") for p in DOCS.glob("*.md")))) >= 40


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_every_option_a_doc_gives_attnkit_exists(page):
    wrong = {c: u for c in _commands(page.read_text("utf-8")) if (u := _unknown_options(c))}
    assert wrong == {}


def test_a_misspelt_option_is_caught():
    assert _unknown_options("attnkit translate runs/quick --beam-size 5 # --nothing") == [
        "--beam-size"
    ]
    assert _unknown_options("attnkit plot mask --causal 5 -o m.png") == []
    assert _unknown_options("attnkit is a toolkit --for things") == []
