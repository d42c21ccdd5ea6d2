"""Reading saved attention weights (JSON, or one line of JSON Lines) for :func:`heatmap`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple


class SavedWeights(NamedTuple):
    """Weights read by :func:`read_weights`, ready for :func:`heatmap`.

    Attributes:
        weights: ``(T, S)`` rows = queries (target), columns = keys (source).
        row_labels: ``T`` labels, or None.
        col_labels: ``S`` labels, or None.
        mask: booleans broadcastable to ``(T, S)``, True = may attend, or None.
    """

    weights: list[list[float]]
    row_labels: list[str] | None
    col_labels: list[str] | None
    mask: list[list[bool]] | None


def read_weights(path: str | os.PathLike, index: int | None = None) -> SavedWeights:
    """Read saved weights for :func:`heatmap` from a JSON file (or one line of JSON Lines).

    The format is ``{"weights": [[...], ...], "row_labels": [...], "col_labels": [...],
    "mask": [[...], ...]}`` with rows = queries (target tokens) and columns = keys
    (source tokens); all but the weights are optional, the mask holds booleans
    (true = may attend). The JSON written by ``attnkit explain --format json``
    has this shape too, and so does each line of ``attnkit translate
    --attention-json``: pass ``index`` (1-based line) to read one line of such
    a JSON Lines file.

    Returns:
        the weights, labels and mask, each of the last three None when absent.

    Raises:
        FileNotFoundError: no such file.
        ValueError: text that is not UTF-8 (a leading byte order mark is dropped),
            invalid JSON, no ``weights`` key (or ``null`` weights: an empty
            input line), ``index`` past the last line or given for a file that is
            one JSON document over several lines, or labels or a mask that are
            not lists.
    """
    path = Path(path)
    text = _read_text(path)
    where = str(path)
    if index is not None:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) > 1 and _one_document(text):
            raise ValueError(
                f"{path} is one JSON document, not JSON Lines: --index {index} picks a line "
                "of 'translate --attention-json' output; leave it out for this file"
            )
        if not 1 <= index <= len(lines):
            raise ValueError(
                f"{path} has {len(lines)} entries; --index {index} is not one "
                f"(entries count from 1: 1 to {len(lines)})"
            )
        text, where = lines[index - 1], f"{path} entry {index}"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        entries = _json_lines(text) if index is None else 0
        if entries:
            raise ValueError(
                f"{where} is JSON Lines ({entries} entries, one per line, as "
                f"'translate --attention-json' writes); pick one with --index N, "
                f"N from 1 to {entries}"
            ) from None
        raise ValueError(f"{where} is not valid JSON: {err}") from None
    if not isinstance(data, dict) or "weights" not in data:
        raise ValueError(f'{where} has no "weights" key; expected {{"weights": [[...]], ...}}')
    if data["weights"] is None:
        raise ValueError(f"{where} has no weights (an empty input line)")
    rows, cols, mask = (_list_or_none(path, data, k) for k in ("row_labels", "col_labels", "mask"))
    labels = [None if x is None else [str(v) for v in x] for x in (rows, cols)]
    return SavedWeights(data["weights"], *labels, mask)


def _read_text(path: Path) -> str:
    """The file's text: UTF-8, without the byte order mark some editors and shells write.

    Raises:
        ValueError: the bytes are not UTF-8 (the message names the file and the byte).
    """
    try:
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path} is not UTF-8 text (invalid byte at {err.start}: {err.reason}); "
            "save it as UTF-8"
        ) from None


def _one_document(text: str) -> bool:
    """Whether ``text`` is a single JSON document (e.g. ``explain --format json``)."""
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def _json_lines(text: str) -> int:
    """How many JSON objects ``text`` holds one per line; 0 when it is not JSON Lines."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        return 0
    try:
        return len(lines) if all(isinstance(json.loads(x), dict) for x in lines) else 0
    except json.JSONDecodeError:
        return 0


def _list_or_none(path: Path, data: dict, key: str) -> list | None:
    value = data.get(key)
    if value is not None and not isinstance(value, list):
        raise ValueError(f"{path}: {key} must be a list, got {type(value).__name__}")
    return value
