"""The search settings: one frozen object, built once per command from the run's ``decode``
section and the caller's overrides, and handed to every search function.

Nothing here changes the loaded run's config: overrides make a new
:class:`SearchSettings` (``settings.with_overrides(beam_size=4)``).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields, replace
from typing import Any

from ..config import DecodeConfig
from ..config.decode import MAX_PENALTY

__all__ = ["GREEDY", "SearchSettings"]


@dataclass(frozen=True)
class SearchSettings:
    """How greedy and beam search decode (see :mod:`attnkit.nmt.decoding.search`).

    Attributes:
        beam_size: K >= 1; 1 is greedy search.
        length_penalty: alpha of the GNMT length penalty ``((5 + |y|) / 6) ** alpha``
            (Wu et al. 2016, eq. 14), beam search only.
        coverage_penalty: beta >= 0 of the GNMT coverage penalty (0 = off), beam search only.
        no_repeat_ngram: n > 0 never emits a token that repeats an n-gram (0 = off).
        max_len_a: length limit slope: a sentence emits at most
            ``int(max_len_a * src_len + max_len_b)`` tokens, ``<eos>`` included.
        max_len_b: length limit intercept.
        batch_size: sentences decoded together.
        early_stopping: beam search only: a sentence stops as soon as it has K
            finished hypotheses (fairseq's rule, close to CTranslate2's), instead
            of only once no live beam can still beat its best finished one under
            the length penalty (exact, the default: with ``length_penalty > 0``
            it may keep a sentence going many steps longer).

    Raises:
        ValueError: ``beam_size`` or ``batch_size`` not an int >= 1, ``no_repeat_ngram``
            not an int >= 0, ``max_len_a`` or ``max_len_b`` not a finite number, or a
            ``length_penalty`` or ``coverage_penalty`` not a number in
            0..``MAX_PENALTY`` (100; the message names the field).
    """

    beam_size: int = 5
    length_penalty: float = 1.0
    coverage_penalty: float = 0.0
    no_repeat_ngram: int = 0
    max_len_a: float = 1.5
    max_len_b: float = 10
    batch_size: int = 64
    early_stopping: bool = False

    def __post_init__(self) -> None:
        for name, least in (("beam_size", 1), ("batch_size", 1), ("no_repeat_ngram", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        if not isinstance(self.early_stopping, bool):  # "no" or "false" would read as True
            raise ValueError(f"early_stopping must be True or False, got {self.early_stopping!r}")
        for name in ("max_len_a", "max_len_b"):  # inf or NaN would give a limit of -2**63
            value = getattr(self, name)
            if not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        for name in ("length_penalty", "coverage_penalty"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Real) or isinstance(value, bool):  # "1" from a form
                raise ValueError(f"{name} must be a number, got {value!r}")
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")
            if not value <= MAX_PENALTY:
                raise ValueError(f"{name} must be at most {MAX_PENALTY:g}, got {value!r}")

    @classmethod
    def from_config(cls, decode: DecodeConfig, **overrides: Any) -> SearchSettings:
        """The run's ``decode`` section with ``overrides`` (a ``None`` override keeps the config's).

        Raises:
            TypeError: an override that is no field of :class:`SearchSettings`.
            ValueError: as the class.
        """
        values = {f.name: getattr(decode, f.name) for f in fields(cls)}
        return cls(**values).with_overrides(**overrides)

    def with_overrides(self, **overrides: Any) -> SearchSettings:
        """These settings with each override that is not ``None`` put in.

        Raises:
            TypeError: an override that is no field of :class:`SearchSettings`.
            ValueError: as the class.
        """
        known = [f.name for f in fields(self)]
        if unknown := [name for name in overrides if name not in known]:
            raise TypeError(
                f"unknown search setting(s) {', '.join(map(repr, unknown))}; "
                f"the settings are {', '.join(known)}"
            )
        given = {name: value for name, value in overrides.items() if value is not None}
        return replace(self, **given) if given else self


GREEDY = SearchSettings(beam_size=1)
