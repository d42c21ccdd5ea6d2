"""The Transformer encoder-decoder translator (Vaswani et al. 2017) on attnkit's attention.

``config`` (``TransformerConfig``, plain pydantic), ``layers`` (encoder and
decoder layers, pre-/post-LN), ``embedding`` (sinusoidal or learned positions)
and ``model`` (``TransformerTranslator``). The torch modules are imported on
first use, so validating a config does not load torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .config import TransformerConfig

if TYPE_CHECKING:  # imported by __getattr__ at run time
    from .model import TransformerMemory as TransformerMemory
    from .model import TransformerState as TransformerState
    from .model import TransformerTranslator as TransformerTranslator

__all__ = ["TransformerConfig", "TransformerMemory", "TransformerState", "TransformerTranslator"]


def __getattr__(name: str) -> Any:
    if name in ("TransformerMemory", "TransformerState", "TransformerTranslator"):
        return getattr(importlib.import_module(".model", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
