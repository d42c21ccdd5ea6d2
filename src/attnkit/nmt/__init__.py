"""The RNN encoder-decoder translator with attention (Bahdanau et al. 2015; Luong et al. 2015).

Submodules: ``vocab_ids`` (special token ids), ``encoder``, ``decoder``, ``model``
(``Seq2Seq``, ``ModelConfig``), ``search`` (greedy and beam search), and the
pipeline modules (corpus, tokenizer, batching, training, checkpoints).
"""

from .model import EncoderOutput, ModelConfig, Seq2Seq
from .search import Hypothesis, beam_search, greedy_decode

__all__ = ["EncoderOutput", "Hypothesis", "ModelConfig", "Seq2Seq", "beam_search", "greedy_decode"]
