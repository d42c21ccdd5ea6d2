"""The translator: architectures behind one interface, and the pipeline around them.

The rooms (docs/architecture.md): ``models`` (the :class:`Translator` interface,
the registry that builds one from ``model.arch``, the RNN and Transformer
architectures), ``config`` (the validated run config), ``data``, ``runs``,
``decoding`` (greedy and beam search), ``analysis`` and ``training``.

The names below are imported on first use (PEP 562), so ``import
attnkit.nmt.config`` does not load torch.
"""

from __future__ import annotations

from ..lazy import lazy_exports

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
