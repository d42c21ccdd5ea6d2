"""The base of every validated config model: unknown keys and YAML's booleans as numbers are errors.

pydantic reads ``True`` as the number 1, and YAML reads ``yes``, ``no``, ``on``,
``off``, ``true`` and ``false`` as booleans, so without this ``--train.max_steps
true`` would train one step and ``model.hidden_size: yes`` build a one-unit
model. A boolean is accepted only where the key is a boolean.

Plain pydantic, no torch; it lives beside the architectures' configs because the
run config's sections (:mod:`attnkit.nmt.config`) import those, not the reverse.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

__all__ = ["ConfigModel"]


class ConfigModel(BaseModel):
    """A config model: unknown keys are errors, and so is a boolean for a key that is not one."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_other_types(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and not _admits_bool(
            cls.model_fields[info.field_name].annotation
        ):
            raise ValueError(
                f"must not be a boolean, got {value!r} (YAML reads yes/no, on/off and "
                "true/false as booleans; quote the word, e.g. 'no', to mean text)"
            )
        return value


def _admits_bool(annotation: Any) -> bool:
    """Whether ``annotation`` (``bool``, ``bool | None``, ``Annotated[bool, ...]``, ``Any``)
    takes a boolean."""
    if annotation is bool or annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _admits_bool(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return any(_admits_bool(arg) for arg in typing.get_args(annotation))
    if origin is typing.Literal:
        return any(isinstance(arg, bool) for arg in typing.get_args(annotation))
    return False
