"""Validation errors as the user reads them: one line per problem, named by its dotted key."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from ..models.registry import ARCHITECTURES
from .section import _model_at, _shown_loc, shown

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
    from ``root``), and a model key of another architecture names that one;
    ``model.<arch>.x`` is shown as ``model.x``, as the user wrote it.
    """
    lines = []
    for item in _merged_unions(err.errors(), root):
        loc = ".".join(_key_text(p) for p in _shown_loc(item["loc"])) or "(top level)"
        kind, message = item["type"], item["msg"]
        if kind in ("union_tag_invalid", "union_tag_not_found"):
            tag = item["input"].get("arch") if isinstance(item["input"], dict) else None
            allowed = " | ".join(ARCHITECTURES)
            lines.append(f"{loc}.arch: must be {allowed}, got {shown(tag)}")
        elif kind == "extra_forbidden":
            parent = _model_at(item["loc"][:-1], root)
            allowed = ", ".join(parent.model_fields) if parent else "?"
            hint = _other_architecture(item["loc"])
            got = shown(item.get("input"))
            lines.append(f"{loc}: unknown key{hint} (allowed here: {allowed}), got {got}")
        elif kind == "missing":
            lines.append(f"{loc}: required key is missing")
        elif kind == "value_error":
            lines.append(f"{loc}: {message.removeprefix('Value error, ')}")
        else:
            message = message.replace("Input should be", "must be")
            for words, sign in _COMPARISONS:
                message = message.replace(words, sign)
            lines.append(f"{loc}: {message}, got {shown(item.get('input'))}")
    return "\n".join(f"  {line}" for line in lines)


def _other_architecture(loc: tuple) -> str:
    """For a key of another architecture's model section (``model.heads`` under
    ``model.arch: rnn``), the words that say which architecture has it; else ``""``."""
    if len(loc) != 3 or loc[0] != "model" or loc[1] not in ARCHITECTURES:
        return ""
    owners = [arch for arch, config in ARCHITECTURES.items() if loc[2] in config.model_fields]
    if not owners:
        return ""
    return f" for model.arch {loc[1]}, a key of model.arch {' and '.join(owners)}"


def _merged_unions(items: list[dict], root: type[BaseModel]) -> list[dict]:
    """The errors with those of one value against each member of a union merged into one.

    pydantic reports ``train.max_steps: -5`` once per member of
    ``int > 0 | 'auto'``, at ``train.max_steps.constrained-int`` and
    ``train.max_steps.literal['auto']``; this gives one error at
    ``train.max_steps``: ``must be > 0 or 'auto'`` (each member's message up to
    its first comma).
    """
    merged: list[dict] = []
    for item in items:
        loc = item["loc"]
        member = len(loc) > 1 and isinstance(loc[-1], str) and _model_at(loc[:-1], root) is None
        if not member or item["type"] in ("extra_forbidden", "missing"):
            merged.append(item)
            continue
        message = item["msg"].removeprefix("Value error, ")
        allowed = message.replace("Input should be", "must be").split(", ")[0]
        if merged and merged[-1].get("union") and merged[-1]["loc"] == loc[:-1]:
            merged[-1]["msg"] += " or " + allowed.removeprefix("must be ")
        else:
            merged.append({**item, "loc": loc[:-1], "msg": allowed, "union": True})
    return merged
