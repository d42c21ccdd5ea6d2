"""The translator architectures a run config can name, and the one place that builds them.

``model.arch`` in a run config picks the architecture; :data:`ModelConfig` is
the validated union of the architectures' configs and :func:`build_translator`
turns one into a :class:`~attnkit.nmt.model.Translator`. Nothing else in
attnkit branches on the architecture.
"""

from __future__ import annotations

from .model import Translator
from .rnn import RNNConfig, RNNTranslator

__all__ = ["ModelConfig", "build_translator"]

ModelConfig = RNNConfig


def build_translator(config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> Translator:
    """A freshly initialised translator of the architecture ``config.arch``.

    Args:
        config: a validated model config (``RNNConfig``).
        src_vocab_size: source vocabulary size, including the special tokens.
        tgt_vocab_size: target vocabulary size, including the special tokens.

    Raises:
        ValueError: a vocabulary smaller than the special tokens plus one symbol.
    """
    return RNNTranslator(config, src_vocab_size, tgt_vocab_size)
