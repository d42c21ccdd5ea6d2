"""Dotted overrides (``model.hidden_size=128``) applied to a raw config, and blamed for errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import ValidationError

from .section import _shown_loc


def apply_overrides(raw: dict, overrides: Sequence[str]) -> dict:
    """Return a copy of ``raw`` with each ``a.b.c=value`` set (value parsed as YAML).

    Raises:
        ValueError: an override lacks ``=`` or walks through a non-section value.
    """
    result = _deep_copy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override must look like section.key=value, got {item!r}")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        node = result
        parts = key.split(".")
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise ValueError(f"override {key}: {where} is a value ({child!r}), not a section")
            node = child
        node[parts[-1]] = value
    return result


def _blamed_overrides(err: ValidationError, overrides: Sequence[str]) -> list[str]:
    """The overrides behind every error of ``err``; empty when some error is the file's own.

    An override ``a.b=v`` is behind an error at ``a.b``, below it (``a.b.c``) or
    above it (``a``, a whole section rejected for the value it set).
    """
    keys = {item.partition("=")[0]: item for item in overrides}
    blamed: list[str] = []
    for error in err.errors():
        where = ".".join(str(part) for part in _shown_loc(error["loc"]))
        found = [
            item
            for key, item in keys.items()
            if where and (f"{where}.".startswith(f"{key}.") or f"{key}.".startswith(f"{where}."))
        ]
        if not found:
            return []
        blamed += [item for item in found if item not in blamed]
    return blamed


def _deep_copy(raw: Any) -> Any:
    if isinstance(raw, dict):
        return {k: _deep_copy(v) for k, v in raw.items()}
    return raw
