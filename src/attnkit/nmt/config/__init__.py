"""Validated run configurations (pydantic v2) for training and translating.

A run config is YAML with five sections — ``data``, ``tokenizer``, ``model``
(:data:`attnkit.nmt.models.registry.ModelConfig`), ``train``, ``decode`` — plus an
optional ``name``. Every section forbids unknown keys. :meth:`RunConfig.load`
turns any validation failure into one ``ValueError`` whose lines read
``section.key: what is allowed, got VALUE``, and applies dotted overrides
(``model.hidden_size=128``) through the same validation.

Modules: ``section`` (the sections' base and walking them), ``data`` (the data
and tokenizer sections), ``train``, ``guided_alignment`` and ``subword_sampling``
(the ``train`` section's sub-sections of those names), ``decode``, ``run``
(:class:`RunConfig`, loading), ``presets`` (the configs shipped in the package,
found by name), ``yaml_text`` (how YAML text is read: no repeated keys, ``1e4`` a
number), ``overrides``, ``errors`` (the messages) and ``keys`` (dotted keys:
listing and comparing them).
"""

from .data import DataConfig, SplitFiles, TokenizerConfig, ToyConfig
from .decode import DecodeConfig
from .errors import format_validation_error
from .keys import config_changes, leaf_keys
from .overrides import apply_overrides
from .run import RunConfig
from .train import TrainConfig

__all__ = [
    "DataConfig",
    "DecodeConfig",
    "RunConfig",
    "SplitFiles",
    "TokenizerConfig",
    "ToyConfig",
    "TrainConfig",
    "apply_overrides",
    "config_changes",
    "format_validation_error",
    "leaf_keys",
]
