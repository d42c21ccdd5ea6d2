"""The ``attnkit`` command line: the only place that parses arguments.

Each command group lives in its own module with a ``register(subparsers)``
function that adds its parsers and sets ``func`` to a handler taking the parsed
arguments and returning an exit status: ``lessons`` (explain, saturation),
``plot`` (plot mask, plot weights), ``train`` (train, prepare), ``nmt`` (translate,
evaluate), ``align``, ``inspect`` (attention diagnostics), ``average`` (a run's last
snapshots into its ``averaged`` checkpoint), ``export`` (a run for CTranslate2),
``bench`` and ``serve`` (the explorer in the browser).
Bad user input raises :class:`UsageError` (or ``ValueError``), which is printed
as one line on stderr with exit status 2, never as a traceback; so is a file the
command cannot open (one the user may not read, a folder given as a file).

When the reader of stdout goes away (``attnkit explain ... | head -1``), the
command stops quietly with exit status 141 (128 + SIGPIPE), the status a shell
reports for ``cat`` or ``yes`` in the same place, so ``set -o pipefail``
scripts see the same thing they would for any other Unix tool.

A file that cannot be written (a full disk, a folder without permission) is
one line naming the file, with exit status 74 (``EX_IOERR`` of sysexits.h);
stdout is named ``<stdout>`` (``attnkit translate ... > FILE`` on a full disk,
or a process started with stdout closed, ``>&-``, refused before any work);
``train`` adds the last good checkpoint and the command that resumes the run.
A process started with stderr closed (``2>&-``) writes its notes, warnings and
progress to /dev/null, never to stdout (where Python's ``print`` would put them).

A character that stdout's encoding lacks (an ASCII locale, ``LC_ALL=C``,
``PYTHONIOENCODING=ascii``; a name with undecodable bytes) is written as ``?``,
as Python writes stderr's with a backslash escape, never an encoding error.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import errno
import os
import sys
import warnings
from collections.abc import Iterator, Sequence

from .. import __version__
from ..atomic import STDOUT, WriteError, writing
from .errors import NamedStdout, UsageError, warn
from .parsing import attach_negative_values

__all__ = ["BROKEN_PIPE_STATUS", "UsageError", "WRITE_ERROR_STATUS", "build_parser", "main"]

BROKEN_PIPE_STATUS = 141  # 128 + SIGPIPE (13), as for a process the signal ended
WRITE_ERROR_STATUS = 74  # EX_IOERR: a file could not be written (e.g. the disk is full)
# what only a write meets: a full disk or quota, a file too large, a read-only file system
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


def build_parser() -> argparse.ArgumentParser:
    from . import align, average, bench, export, inspect, lessons, nmt, plot, serve, train

    parser = _Parser(
        prog="attnkit",
        description="The attention mechanism of neural translation: "
        "explain, plot, train, translate.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in (lessons, plot, train, nmt, align, inspect, average, export, bench, serve):
        group.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``attnkit`` command and return its exit status.

    Args:
        argv: the arguments after ``attnkit``; default ``sys.argv[1:]``.

    Returns:
        0 on success, 2 for bad input (one line on stderr), 74 when a file
        could not be written (one line on stderr), 130 when interrupted, 141
        when stdout's reader went away; a command may return
        others (``train`` returns 1 when training fails).
    """
    if sys.stdout is None:  # started with stdout closed (`>&-`): said before any work is lost
        print(f"attnkit: error: cannot write {STDOUT}: it is closed", file=sys.stderr)
        return WRITE_ERROR_STATUS
    if sys.stderr is None:  # started with stderr closed (`2>&-`)
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (until exit)
    try:
        with _unencodable_replaced(sys.stdout), warnings.catch_warnings():
            warnings.showwarning = _warning_line  # both restored for an in-process caller
            status = _run(sys.argv[1:] if argv is None else argv)
            sys.stdout.flush()  # a reader that left shows up here when output was buffered
    except BrokenPipeError:
        return _reader_gone()
    except WriteError as err:  # argparse's `--help > FILE` on a full disk (see _Parser)
        print(f"attnkit: error: {err}", file=sys.stderr)
        _stdout_to_devnull()
        return WRITE_ERROR_STATUS
    return status


class _Parser(argparse.ArgumentParser):
    """argparse's parser, except that ``--help`` or ``--version`` that cannot be written
    to stdout is a :class:`WriteError` (argparse ignores a failed write, so
    ``attnkit --help > /dev/full`` exited 0 with the text lost)."""

    def _print_message(self, message: str, file=None) -> None:
        if message and (file is sys.stdout):
            with writing(STDOUT):
                file.write(message)
        else:
            super()._print_message(message, file)

    def exit(self, status: int = 0, message: str | None = None):
        with writing(STDOUT):
            sys.stdout.flush()  # a buffered help text meets a full disk here
        super().exit(status, message)


@contextlib.contextmanager
def _unencodable_replaced(stream) -> Iterator[None]:
    """Inside, ``stream`` writes ``?`` for a character its encoding lacks instead of raising
    UnicodeEncodeError: on an ASCII terminal ``attnkit train --out Prüfung`` trained, then
    failed with status 2 on its summary line, and ``saturation --help`` was a traceback.
    Its strict errors come back afterwards (a caller of :func:`main` keeps its stream)."""
    if getattr(stream, "errors", None) != "strict" or not hasattr(stream, "reconfigure"):
        yield
        return
    stream.reconfigure(errors="replace")
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):  # a reader gone, a stream closed
            stream.reconfigure(errors="strict")


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:
    """A Python warning raised under a command, as one ``attnkit: warning:`` line (no source
    path and line: they mean nothing to the user)."""
    warn(str(message))


def _run(argv: Sequence[str]) -> int:
    parser = build_parser()
    argv = attach_negative_values(argv)
    _check_options(parser, argv)
    args, extra = parser.parse_known_args(argv)
    # argparse fills a nargs="*" positional only where it first meets it, so
    # `translate RUN --beam 5 "a sentence"` would leave the sentence over;
    # commands that declare `trailing_positionals` collect such leftovers, as argparse
    # reads them (`--beam 5 -- "-x"`, `--beam 5 "- Hallo!"`: words, not options).
    trailing = getattr(args, "trailing_positionals", None)
    command = _command_parser(parser, args)
    words = _positional_words(command, extra) if trailing else None
    if words is not None:
        setattr(args, trailing, [*getattr(args, trailing), *words])
    elif extra:  # the command's usage fits the mistake
        command.error(_unrecognized(command, extra))
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        with contextlib.redirect_stdout(NamedStdout(sys.stdout)):  # a full disk: one line, 74
            status = int(args.func(args) or 0)
        with writing(STDOUT):
            sys.stdout.flush()  # buffered output meets a full disk here
        return status
    except (UsageError, ValueError, FileNotFoundError) as err:
        print(f"attnkit {args.command}: error: {err}", file=sys.stderr)
        return 2
    except WriteError as err:
        print(f"attnkit {args.command}: error: {err}", file=sys.stderr)
        if str(err.path) == STDOUT:
            _stdout_to_devnull()  # the unwritten rest would fail again at exit
        return WRITE_ERROR_STATUS
    except OSError as err:
        if err.filename is None:  # not a file the user named (a broken pipe, the system's own)
            raise
        # a file the command could not open: one that user may not read, a folder, a socket;
        # a write that failed outside `writing` (a full disk) is still a write error
        print(f"attnkit {args.command}: error: {err.filename}: {err.strerror}", file=sys.stderr)
        return WRITE_ERROR_STATUS if err.errno in _WRITE_ERRNOS else 2
    except KeyboardInterrupt:
        print(f"attnkit {args.command}: interrupted", file=sys.stderr)
        return 130


def _positional_words(command: argparse.ArgumentParser, extra: Sequence[str]) -> list[str] | None:
    """``extra`` as positional words, as argparse reads a word: after ``--`` every word, and
    before it every word argparse takes for no option (``"- Hallo!"``, a subtitle's dialogue
    line, has a space); None where one is an option (``--bogus``)."""
    words, dashes = [], False
    for word in extra:
        if word == "--" and not dashes:
            dashes = True
        elif dashes or command._parse_optional(word) is None:
            words.append(word)
        else:
            return None
    return words


def _command_parser(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The parser of the command given, else the top one."""
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(getattr(args, "command", None), parser)
    return parser


def _check_options(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Stop at the first ``--option`` the command does not have, with the closest one it has.

    Checked before argparse parses, so a misspelt option is named even when
    argparse would first complain about a required one (``explain --querry``).
    A unique prefix of an option (which argparse accepts) is no mistake.
    """
    command, rest = parser, list(argv)
    while rest and (choices := _subcommands(command)) and rest[0] in choices:
        command, rest = choices[rest[0]], rest[1:]
    if command is parser:
        return
    known = list(command._option_string_actions)
    for i, word in enumerate(rest):
        if word == "--":
            return
        option = word.partition("=")[0]
        if not option.startswith("--") or option in known or command._parse_optional(word) is None:
            continue  # a sentence such as "-- Hallo!" is a word, as argparse reads it
        if not any(k.startswith(option) for k in known):
            value = rest[i + 1 : i + 2] if "=" not in word else []
            shown = [word, *(v for v in value if not v.startswith("-"))]
            command.error(_unrecognized(command, shown))


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


def _unrecognized(parser: argparse.ArgumentParser, extra: Sequence[str]) -> str:
    """``unrecognized arguments: ...``, with ``parser``'s closest option to a misspelt one.

    The closest options are the config keys of that name (train's ``--lr`` ->
    ``--train.lr``, ``--seed`` -> ``--data.toy.seed or --train.seed``), else one the
    word starts with (``--beam-size`` -> ``--beam``), else the most similar spelling;
    without any, the message says where the command's options are listed.
    """
    message = f"unrecognized arguments: {' '.join(extra)}"
    known = [k for k in parser._option_string_actions if k.startswith("--")]
    for word in extra:
        option = word.partition("=")[0]
        if option.startswith("--"):
            name = option[2:].replace("-", "_")
            keys = [k for k in known if "." in k and k.rpartition(".")[2] == name]
            stems = sorted((k for k in known if option.startswith(k + "-")), key=len)
            close = keys or stems[-1:] or difflib.get_close_matches(option, known, n=1, cutoff=0.6)
            if close:
                return f"{message} (did you mean {' or '.join(close)}?)"
    return f"{message} (see '{parser.prog} --help' for its options)"


def _reader_gone() -> int:
    """Stop quietly after stdout's reader closed the pipe (Python's documented recipe)."""
    _stdout_to_devnull()
    return BROKEN_PIPE_STATUS


def _stdout_to_devnull() -> None:
    """Point stdout at devnull after a write to it failed, so the interpreter's final flush
    of the unwritten rest does not fail again with a second traceback at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (captured, closed)
        pass
