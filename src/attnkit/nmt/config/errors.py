"""Validation errors as the user reads them: one line per problem, named by its dotted key."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from ..models.registry import ARCHITECTURES
from .section import _model_at, _shown_loc

_COMPARISONS = (
    ("greater than or equal to", ">="),
    ("less than or equal to", "<="),
    ("greater than", ">"),
    ("less than", "<"),
)


def _key_text(part: Any) -> str:
    """A key as written in a message: quoted when empty or holding odd characters."""
    if isinstance(part, int) or (isinstance(part, str) and part.isprintable() and part.strip()):
        return str(part)
    return repr(part)


def format_validation_error(err: ValidationError, root: type[BaseModel]) -> str:
    """One indented line per error of validating ``root``: ``key.path: what is allowed, got VALUE``.

    An unknown key's line lists the keys allowed in its section (looked up
    from ``root``); ``model.<arch>.x`` is shown as ``model.x``, as the user wrote it.
    """
    lines = []
    for item in err.errors():
        loc = ".".join(_key_text(p) for p in _shown_loc(item["loc"])) or "(top level)"
        kind, message = item["type"], item["msg"]
        if kind in ("union_tag_invalid", "union_tag_not_found"):
            tag = item["input"].get("arch") if isinstance(item["input"], dict) else None
            allowed = " | ".join(ARCHITECTURES)
            lines.append(f"{loc}.arch: must be {allowed}, got {tag!r}")
        elif kind == "extra_forbidden":
            parent = _model_at(item["loc"][:-1], root)
            allowed = ", ".join(parent.model_fields) if parent else "?"
            lines.append(f"{loc}: unknown key (allowed here: {allowed}), got {item.get('input')!r}")
        elif kind == "missing":
            lines.append(f"{loc}: required key is missing")
        elif kind == "value_error":
            lines.append(f"{loc}: {message.removeprefix('Value error, ')}")
        else:
            message = message.replace("Input should be", "must be")
            for words, sign in _COMPARISONS:
                message = message.replace(words, sign)
            lines.append(f"{loc}: {message}, got {item.get('input')!r}")
    return "\n".join(f"  {line}" for line in lines)
