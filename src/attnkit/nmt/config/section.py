"""The base of every config section, and walking the sections of a config model.

Error messages and the list of settable keys both need to know which section
model sits at a dotted location (``model.hidden_size``, ``data.train.src``),
including the ``model`` section, which is a union of one config per
architecture (:data:`attnkit.nmt.models.registry.ARCHITECTURES`) that pydantic
reports under the architecture's tag (``model.rnn.hidden_size``).
"""

from __future__ import annotations

import reprlib
import types
import typing
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from ..models.config_base import ConfigModel
from ..models.registry import ARCHITECTURES

# A seed torch's generators take (torch.manual_seed: -2**63 to 2**64 - 1), with room above
# for the small number added to it (a rank, a split's index); a larger one failed at the
# first step with "Overflow when unpacking long long", naming no key.
Seed = Annotated[int, Field(ge=-(2**63), lt=2**63)]


# How a message shows a value from a config: as repr() does, cut short. YAML aliases can
# name a list of aliases of lists (nine levels of nine "lol" are 387 million strings held
# in a few kilobytes of text), which repr() would spell out whole.
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel = 3
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxset = _SHOWN.maxdict = 6
_SHOWN.maxstring = _SHOWN.maxother = _SHOWN.maxlong = 100
_SHOWN_CHARS = 300


def shown(value: Any) -> str:
    """``repr(value)`` for an error message, cut short: 6 items a list or mapping, 3 levels
    deep, 100 characters a string or number, 300 in all (``[[1, 2, ...], ...]``)."""
    text = _SHOWN.repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


class _Section(ConfigModel):
    """A config section: unknown keys, non-finite numbers and booleans for other types
    are errors (:class:`~attnkit.nmt.models.config_base.ConfigModel`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def _section_models(annotation: Any) -> list[type[BaseModel]]:
    """The BaseModels inside ``annotation``: ``Model``, ``Model | None``, a tagged union."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _section_models(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _section_models(arg)]
    return []


def _arch_tag(loc: Sequence[Any]) -> bool:
    """Whether ``loc`` starts ``model.<arch tag>`` (pydantic names the union member chosen)."""
    return len(loc) > 1 and loc[0] == "model" and loc[1] in ARCHITECTURES


def _shown_loc(loc: Sequence[Any]) -> Sequence[Any]:
    """An error location as the user writes the key: ``model.<arch tag>.x`` -> ``model.x``."""
    return loc[:1] + loc[2:] if _arch_tag(loc) else loc


def _model_at(loc: Sequence[Any], root: type[BaseModel]) -> type[BaseModel] | None:
    """The section model at an error location below ``root`` (architecture tags resolved).

    None when the location is not one section (a value, or a union of several).
    """
    if _arch_tag(loc):
        arch_config = ARCHITECTURES[loc[1]]
        return _model_at(loc[2:], arch_config) if len(loc) > 2 else arch_config
    models: list[type[BaseModel]] = [root]
    for part in loc:
        field = models[0].model_fields.get(str(part)) if len(models) == 1 else None
        models = _section_models(field.annotation) if field else []
    return models[0] if len(models) == 1 else None
