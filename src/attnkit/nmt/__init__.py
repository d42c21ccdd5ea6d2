"""The translator: architectures behind one interface, and the pipeline around them.

The rooms (docs/architecture.md): ``models`` (the :class:`Translator` interface,
the registry that builds one from ``model.arch``, the RNN and Transformer
architectures), ``config`` (the validated run config), ``data``, ``runs``,
``decoding`` (greedy and beam search), ``export`` (CTranslate2), ``analysis`` and
``training``.

The names below are imported on first use (PEP 562), so ``import
attnkit.nmt.config`` does not load torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ imports them
    from .config import RunConfig as RunConfig
    from .decoding.search import Hypothesis as Hypothesis
    from .decoding.search import beam_search as beam_search
    from .decoding.search import decode_examples as decode_examples
    from .decoding.search import greedy_decode as greedy_decode
    from .decoding.translate import translate_lines as translate_lines
    from .models.registry import ModelConfig as ModelConfig
    from .models.registry import build_translator as build_translator
    from .models.rnn import RNNConfig as RNNConfig
    from .models.rnn import RNNTranslator as RNNTranslator
    from .models.transformer import TransformerConfig as TransformerConfig
    from .models.transformer import TransformerTranslator as TransformerTranslator
    from .models.translator import Translator as Translator
    from .runs.loaded_run import load_run as load_run
    from .training.loop import train as train

_LAZY = {
    "Hypothesis": ".decoding.search",
    "beam_search": ".decoding.search",
    "decode_examples": ".decoding.search",
    "greedy_decode": ".decoding.search",
    "ModelConfig": ".models.registry",
    "build_translator": ".models.registry",
    "RNNConfig": ".models.rnn",
    "RNNTranslator": ".models.rnn",
    "TransformerConfig": ".models.transformer",
    "TransformerTranslator": ".models.transformer",
    "Translator": ".models.translator",
    "RunConfig": ".config",
    "load_run": ".runs.loaded_run",
    "train": ".training.loop",
    "translate_lines": ".decoding.translate",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
