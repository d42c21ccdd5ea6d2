"""Names a package hands on from its modules, imported on first use (PEP 562).

``import attnkit`` and ``import attnkit.nmt.config`` then load no torch, which
keeps the ``attnkit`` command's start-up short.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for the names in ``table``.

    Args:
        package: the package's ``__name__``.
        table: name -> the module (relative to ``package``) it is imported from.

    Raises (from the returned ``__getattr__``):
        AttributeError: a name the package neither defines nor hands on.
    """

    def __getattr__(name: str) -> Any:
        if name in table:
            return getattr(importlib.import_module(table[name], package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted([*vars(sys.modules[package]), *table])

    return __getattr__, __dir__
