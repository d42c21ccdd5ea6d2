"""The translator: architectures behind one interface, and the pipeline around them.

The rooms (docs/architecture.md): ``models`` (the :class:`Translator` interface,
the registry that builds one from ``model.arch``, the RNN and Transformer
architectures), ``config`` (the validated run config), ``data``, ``runs``,
``decoding`` (greedy and beam search), ``analysis`` and ``training``.

The names below are imported on first use (PEP 562), so ``import
attnkit.nmt.config`` does not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Hypothesis": ".decoding.search",
    "beam_search": ".decoding.search",
    "decode_examples": ".decoding.search",
    "greedy_decode": ".decoding.search",
    "ModelConfig": ".models.registry",
    "build_translator": ".models.registry",
    "RNNConfig": ".models.rnn",
    "RNNTranslator": ".models.rnn",
    "Translator": ".models.translator",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
