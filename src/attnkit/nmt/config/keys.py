"""A config's settable values by dotted key (``model.hidden_size``): listing and comparing them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from .run import RunConfig
from .section import _section_models


def leaf_keys(model: type[BaseModel] = RunConfig, prefix: str = "") -> Iterator[str]:
    """Dotted names of every settable value, e.g. ``model.hidden_size``.

    A section that is a union (``model``: one config per architecture) lists
    the keys of every member once.
    """
    seen: set[str] = set()
    for name, field in model.model_fields.items():
        nested = _section_models(field.annotation)
        keys = (
            [f"{prefix}{name}"]
            if not nested
            else [k for member in nested for k in leaf_keys(member, f"{prefix}{name}.")]
        )
        for key in keys:
            if key not in seen:
                seen.add(key)
                yield key


def config_changes(before: RunConfig, after: RunConfig) -> list[tuple[str, Any, Any]]:
    """``(dotted key, value before, value after)`` for each value that differs, in key order."""
    old, new = _flat(before.model_dump(mode="json")), _flat(after.model_dump(mode="json"))
    return [(k, old.get(k), new.get(k)) for k in sorted({*old, *new}) if old.get(k) != new.get(k)]


def _flat(raw: Any, prefix: str = "") -> dict[str, Any]:
    """Nested sections as ``{"model.hidden_size": 64, ...}``."""
    if not isinstance(raw, dict):
        return {prefix.removesuffix("."): raw}
    return {
        k: v for name, value in raw.items() for k, v in _flat(value, f"{prefix}{name}.").items()
    }
