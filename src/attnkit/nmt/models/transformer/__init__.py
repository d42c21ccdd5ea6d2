"""The Transformer encoder-decoder translator (Vaswani et al. 2017) on attnkit's attention.

``layers`` (encoder and decoder layers, pre-/post-LN), ``embedding`` (sinusoidal
or learned positions) and ``model`` (``TransformerTranslator`` and its config
``TransformerConfig``).
"""

from .model import TransformerConfig, TransformerMemory, TransformerState, TransformerTranslator

__all__ = ["TransformerConfig", "TransformerMemory", "TransformerState", "TransformerTranslator"]
