"""What users type on the command line, read into numbers: vectors, matrices, masks, widths.

Vectors are comma-separated numbers and matrices are rows separated by
semicolons: ``--keys "1,0,0;0,1,0;0,0,1"``. A value may start with a minus
sign as typed (``--query -1.5,2``): :func:`attach_negative_values` keeps
argparse from reading it as an option. Every parse error is a
:class:`~attnkit.cli.errors.UsageError` naming the option, row and entry.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from .errors import UsageError

__all__ = ["NUMBER_OPTIONS", "attach_negative_values", "parse_ints", "parse_mask", "parse_matrix"]

#: The options that take numbers typed as vectors or matrices (explain, saturation, plot mask).
NUMBER_OPTIONS = frozenset({"--query", "--keys", "--values", "--mask", "--dims", "--lengths"})
_NEGATIVE = re.compile(r"-\.?\d")  # a minus sign, then a digit or a decimal point


def attach_negative_values(argv: Sequence[str]) -> list[str]:
    """``["--query", "-1.5,2"]`` -> ``["--query=-1.5,2"]``: negative values as users type them.

    argparse takes ``-1.5`` for a number but ``-1.5,2`` or ``-1,0;0,1`` for an
    unknown option ("expected one argument"). A token that starts with a minus
    and a digit is joined to the option of :data:`NUMBER_OPTIONS` just before
    it; other tokens, and everything after ``--``, are left alone.
    """
    out: list[str] = []
    for i, token in enumerate(argv):
        if token == "--":
            return [*out, *argv[i:]]
        if out and out[-1] in NUMBER_OPTIONS and _NEGATIVE.match(token):
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


def parse_matrix(text: str, option: str) -> list[list[float]]:
    """``"1,0;0,1"`` -> ``[[1.0, 0.0], [0.0, 1.0]]``; rows by ``;``, entries by ``,``.

    Raises:
        UsageError: empty input, an empty row or entry, a non-number, a
            non-finite number, or rows of different lengths (naming the row).
    """
    if not text.strip():
        raise UsageError(f"{option} is empty; give numbers like 1,0,0 (rows separated by ;)")
    rows = []
    for r, row in enumerate(text.split(";"), start=1):
        entries = [e.strip() for e in row.split(",")]
        if entries == [""]:
            raise UsageError(f"{option} row {r} is empty")
        rows.append([_number(e, option, r, c) for c, e in enumerate(entries, start=1)])
        if len(rows[-1]) != len(rows[0]):
            raise UsageError(
                f"{option} rows have different lengths: row 1 has {len(rows[0])} numbers, "
                f"row {r} has {len(rows[-1])}"
            )
    return rows


def _number(entry: str, option: str, row: int, col: int) -> float:
    where = f"{option} row {row}, entry {col}"
    if not entry:
        raise UsageError(f"{where} is empty (two commas in a row?)")
    try:  # a minus sign typeset as U+2212 (copied from a lesson or a web page) is a minus
        value = float(entry.replace("\u2212", "-"))
    except ValueError:
        raise UsageError(f"{where}: {entry!r} is not a number") from None
    if not math.isfinite(value):
        raise UsageError(f"{where}: {entry!r} is not a finite number")
    return value


def parse_mask(text: str, option: str) -> list[list[bool]]:
    """``"1,1,0"`` or ``"1,0;1,1"`` -> booleans (1/true = may attend).

    Raises:
        UsageError: an entry other than 1/0/true/false, or rows of different lengths.
    """
    words = {"1": True, "true": True, "0": False, "false": False}
    rows = []
    for r, row in enumerate(text.split(";"), start=1):
        entries = [e.strip().lower() for e in row.split(",")]
        bad = [e for e in entries if e not in words]
        if bad:
            raise UsageError(f"{option} row {r}: {bad[0]!r} is not 1/0 (or true/false)")
        rows.append([words[e] for e in entries])
        if len(rows[-1]) != len(rows[0]):
            raise UsageError(f"{option} rows have different lengths (row {r})")
    return rows


def parse_ints(text: str, option: str, minimum: int = 1) -> list[int]:
    """``"4,16,64"`` -> ``[4, 16, 64]``, each at least ``minimum``.

    Raises:
        UsageError: an entry that is not a whole number, or one below ``minimum``.
    """
    values = []
    for entry in (e.strip() for e in text.split(",")):
        try:
            value = int(entry)
        except ValueError:
            raise UsageError(f"{option}: {entry!r} is not a whole number") from None
        if value < minimum:
            raise UsageError(f"{option}: {value} is below the minimum of {minimum}")
        values.append(value)
    return values
