"""How config text is read as YAML: PyYAML's safe loader, minus two of its YAML 1.1 traps.

- A key given twice in one mapping is an error. PyYAML keeps the last value without a
  word, so a config with two ``train:`` sections trained with the first one's settings
  silently gone. Keys merged in with ``<<: *anchor`` may be set again beside the merge
  (that is what a merge is for).
- A number in exponent notation is a number, as in YAML 1.2 (and JSON): PyYAML's YAML 1.1
  reads ``1e4``, ``1e-3`` and ``1.0e4`` (no dot, or no sign in the exponent) as text, so
  ``max_steps: 1e4`` was refused as "unable to parse string as an integer". Text of that
  form is written quoted (:func:`dump_yaml`), so a saved config reads back as it was.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["ConfigDumper", "ConfigLoader", "RepeatedKeyError", "dump_yaml", "load_yaml"]

# exponent notation that YAML 1.1 leaves as text; PyYAML's own rule reads the rest
_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


class RepeatedKeyError(yaml.YAMLError):
    """A key given twice in one YAML mapping."""


class ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses repeated keys and reads ``1e4`` as a number."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key, line = self.construct_object(key_node), key_node.start_mark.line + 1
            if key in lines:
                raise RepeatedKeyError(
                    f"key {key!r} is given twice in one mapping, on lines {lines[key]} and "
                    f"{line}; YAML would keep only the last, so remove or merge one"
                )
            lines[key] = line
        return super().construct_mapping(node, deep)


class ConfigDumper(yaml.SafeDumper):
    """PyYAML's safe dumper that quotes the text :class:`ConfigLoader` would read as a number.

    PyYAML's own dumper writes the text ``'5e4'`` (a run named after ``5e4.yaml``) bare,
    as ``name: 5e4``, which :class:`ConfigLoader` reads back as the number 50000.0.
    """


for _cls in (ConfigLoader, ConfigDumper):
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789."))


def load_yaml(text: str) -> Any:
    """``text`` read by :class:`ConfigLoader`.

    Raises:
        yaml.YAMLError: the text is not YAML, or repeats a key in one mapping.
    """
    return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 (a SafeLoader)


def dump_yaml(data: Any) -> str:
    """``data`` as YAML text that :func:`load_yaml` reads back as ``data`` (keys in order)."""
    return yaml.dump(data, Dumper=ConfigDumper, sort_keys=False, allow_unicode=True)
