"""Dotted overrides (``model.hidden_size=128``) applied to a raw config, and blamed for errors."""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ..models.registry import ARCHITECTURES, DEFAULT_ARCH
from .section import _model_at, _shown_loc
from .yaml_text import load_yaml


def apply_overrides(
    raw: dict, overrides: Sequence[str], root: type[BaseModel] | None = None
) -> dict:
    """Return a copy of ``raw`` with each ``a.b.c=value`` set (value: :func:`override_value`).

    Raises:
        ValueError: an override lacks ``=`` or walks through a non-section value.
        TypeError: ``overrides`` is one string, or holds something else than strings.
    """
    result = _deep_copy(raw)
    for item in override_list(overrides):
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override must look like section.key=value, got {item!r}")
        value = override_value(key, text, root)
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


_YAML_NULLS = frozenset({"", "~", "null", "Null", "NULL"})


def override_list(overrides: Iterable[str]) -> list[str]:
    """``overrides`` as a list, checked to hold ``key=value`` strings: one string would be
    read character by character (``override ... got 't'``).

    Raises:
        TypeError: ``overrides`` is one string, or holds something else than strings.
    """
    if isinstance(overrides, str):
        raise TypeError(
            f"overrides must be a list of 'section.key=value' strings, got one string "
            f"{overrides!r}; pass [{overrides!r}]"
        )
    items = list(overrides)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(
                f"overrides must be 'section.key=value' strings, got {type(item).__name__} {item!r}"
            )
    return items


def override_value(key: str, text: str, root: type[BaseModel] | None = None) -> Any:
    """The value that an override's ``text`` gives ``key``: ``text`` read as YAML, or, for
    a key of ``root`` that holds text (a file name, a language code, the run's name), the
    text itself unless it is quoted or a YAML null.

    A command line has no YAML around the value, and its quotes are the shell's: read
    as YAML, ``--data.src_lang no`` (Norwegian) was the boolean False, ``--name 2024``
    a number and ``--data.train.src "corpus #2.de"`` the file ``corpus`` (the rest a
    comment). Text that YAML cannot read is kept as it is.
    """
    stripped = text.strip()
    if (
        root is not None
        and stripped not in _YAML_NULLS
        and stripped[:1] not in ("'", '"')
        and _holds_text(key, root)
    ):
        return text
    try:
        return load_yaml(text)
    except yaml.YAMLError:
        return text


def _holds_text(key: str, root: type[BaseModel]) -> bool:
    """Whether the dotted ``key`` of ``root`` is a ``str`` (or ``str | None``) field."""
    parts = key.split(".")
    section = _model_at(parts[:-1], root)
    field = section.model_fields.get(parts[-1]) if section is not None else None
    if field is None:
        return False
    annotation = field.annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [arg for arg in typing.get_args(annotation) if arg is not type(None)] == [str]
    return annotation is str


# The overrides that name a user file: a relative one means the current folder, as in
# any command line, while a config file's own relative paths mean the config's folder.
PATH_KEYS = frozenset(
    [f"data.{split}.{key}" for split in ("train", "valid", "test") for key in ("src", "tgt", "tsv")]
    + ["train.guided_alignment.file", "train.init_from"]
)


def anchor_paths(
    overrides: Sequence[str], base: Path, root: type[BaseModel] | None = None
) -> list[str]:
    """``overrides`` with each relative path in a :data:`PATH_KEYS` key made absolute against
    ``base`` (``data.valid.src=va.de`` -> ``data.valid.src="/base/va.de"``), also inside a
    section's mapping (``data.train={tsv: p.tsv}``); the rest as given. Values are read as
    :func:`apply_overrides` reads them (``root``: :func:`override_value`); TypeError as there."""
    anchored = []
    for item in override_list(overrides):
        key, sep, text = item.partition("=")
        holds_path = any(p == key or p.startswith(f"{key}.") for p in PATH_KEYS)
        if sep and holds_path:
            value = override_value(key, text, root)
            moved = _anchored(key, value, base)
            if moved != value:
                item = f"{key}={json.dumps(moved)}"
        anchored.append(item)
    return anchored


def _anchored(key: str, value: Any, base: Path) -> Any:
    """``value`` of the dotted ``key`` with the relative paths of :data:`PATH_KEYS` in it,
    at any depth of a mapping, made absolute against ``base``."""
    if isinstance(value, dict):
        return {name: _anchored(f"{key}.{name}", item, base) for name, item in value.items()}
    if key in PATH_KEYS and isinstance(value, str):
        return str(base / Path(value).expanduser())
    return value


def switch_architecture(raw: dict, result: dict, overrides: Sequence[str]) -> list[str]:
    """Drop the keys of another architecture from ``result``'s model section; the notes to show.

    ``raw`` is the config as written, ``result`` the same after ``overrides``
    (changed in place). When an override sets ``model.arch`` to another
    architecture than the file's (``--model.arch transformer`` on an RNN
    preset), the file's model keys that the new architecture does not have but
    another one does (``embed_dim``, ``hidden_size``, ...) are dropped, and one
    note names them. An override ``model.KEY=null`` for a key the chosen
    architecture does not have removes it quietly (what the user asked for).
    Keys the chosen architecture has, keys no architecture has, and keys an
    override set to a value are left for validation to judge.
    """
    model = result.get("model")
    if not isinstance(model, dict):
        return []
    arch = model.get("arch", DEFAULT_ARCH)
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        return []
    own = set(ARCHITECTURES[arch].model_fields)
    set_here = {}
    for item in overrides:
        key, _, text = item.partition("=")
        if key.startswith("model.") and key.count(".") == 1:
            set_here[key.removeprefix("model.")] = text
    for key, text in set_here.items():
        if key not in own and key in model and model[key] is None and text.strip():
            del model[key]
    before = raw.get("model") if isinstance(raw.get("model"), dict) else {}
    if "arch" not in set_here or before.get("arch", DEFAULT_ARCH) == arch:
        return []
    others = {k for name, c in ARCHITECTURES.items() if name != arch for k in c.model_fields}
    dropped = [k for k in model if k not in own and k in others and k not in set_here]
    for key in dropped:
        del model[key]
    if not dropped:
        return []
    names = ", ".join(f"model.{k}" for k in dropped)
    old = before.get("arch", DEFAULT_ARCH)
    return [f"model.arch {arch}: dropped the {old} keys {names} ({arch} has no such keys)"]


def _blamed_overrides(err: ValidationError, overrides: Sequence[str]) -> list[str]:
    """The overrides behind every error of ``err``; empty when some error is the file's own.

    An override ``a.b=v`` is behind an error at ``a.b``, below it (``a.b.c``) or
    above it (``a``, a whole section rejected for the value it set), and behind a key
    missing beside it (``a.c``: the override made section ``a`` that lacks it). A check
    across keys (an error at the top level or at a section) is blamed on the overrides
    whose keys its message names, where it names one.
    """
    keys = {item.partition("=")[0]: item for item in overrides}
    blamed: list[str] = []
    for error in err.errors():
        where = ".".join(str(part) for part in _shown_loc(error["loc"]))
        section = where.rpartition(".")[0] if error["type"] == "missing" else None
        found = _named_by(error, keys) or [
            item
            for key, item in keys.items()
            if where and (_nested(key, where) or (section and key.rpartition(".")[0] == section))
        ]
        if not found:
            return []
        blamed += [item for item in found if item not in blamed]
    return blamed


# a dotted key in a message, whole: train.max_steps, not inside train.max_steps_x
_DOTTED_KEY = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\.\w+)+")


def _named_by(error: dict, keys: dict[str, str]) -> list[str]:
    """The overrides of the keys that the message of a check across keys names, or of a
    section or key around or inside one it names (``train.subword_sampling.alpha=0.1``
    made the ``train.subword_sampling`` its message names); none for an error at one value,
    whose location already says which key it is."""
    if error["type"] != "value_error" or len(_shown_loc(error["loc"])) > 1:
        return []
    named = _DOTTED_KEY.findall(error["msg"])
    return [item for key, item in keys.items() if any(_nested(key, name) for name in named)]


def _nested(key: str, other: str) -> bool:
    """Whether the dotted keys are the same, or one is a section holding the other."""
    return f"{key}.".startswith(f"{other}.") or f"{other}.".startswith(f"{key}.")


def _deep_copy(raw: Any) -> Any:
    if isinstance(raw, dict):
        return {k: _deep_copy(v) for k, v in raw.items()}
    return raw
