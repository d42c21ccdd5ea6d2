"""The RNN encoder-decoder with attention (Bahdanau et al. 2015; Luong et al. 2015).

``config`` (``RNNConfig``, plain pydantic), ``encoder`` (bidirectional GRU/LSTM
each sentence for its own length: a GRU that keeps its state past it, a packed
LSTM), ``decoder`` (the attention decoder, Bahdanau or Luong
timing), ``fused_loop`` (its Bahdanau/GRU teacher-forced loop with a
hand-written backward) and ``model`` (``RNNTranslator``). The torch modules are
imported on first use, so validating a config does not load torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .config import RNNConfig

if TYPE_CHECKING:  # imported by __getattr__ at run time
    from .model import RNNMemory as RNNMemory
    from .model import RNNState as RNNState
    from .model import RNNTranslator as RNNTranslator

__all__ = ["RNNConfig", "RNNMemory", "RNNState", "RNNTranslator"]


def __getattr__(name: str) -> Any:
    if name in ("RNNMemory", "RNNState", "RNNTranslator"):
        return getattr(importlib.import_module(".model", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
