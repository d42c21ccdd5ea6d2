"""The translator: architectures behind one interface, and the pipeline around them.

``model`` (the :class:`Translator` interface every architecture implements),
``rnn`` (the RNN encoder-decoder with attention), ``architectures`` (the one
place that builds a translator from ``model.arch``), ``search`` (greedy and
beam search, batch decoding), and the pipeline modules: ``config``, ``corpus``,
``text`` (what counts as an empty line), ``tokenizer``, ``batching``, ``train``,
``checkpoint``, ``translate``, ``metrics``.
"""

from .decoding.search import Hypothesis, beam_search, decode_examples, greedy_decode
from .models.registry import ModelConfig, build_translator
from .models.rnn import RNNConfig, RNNTranslator
from .models.translator import Translator

__all__ = [
    "Hypothesis",
    "ModelConfig",
    "RNNConfig",
    "RNNTranslator",
    "Translator",
    "beam_search",
    "build_translator",
    "decode_examples",
    "greedy_decode",
]
