"""The RNN encoder-decoder with attention (Bahdanau et al. 2015; Luong et al. 2015).

``encoder`` (bidirectional GRU/LSTM over packed sequences), ``decoder`` (the
attention decoder, Bahdanau or Luong timing), ``fused_loop`` (its Bahdanau/GRU
teacher-forced loop with a hand-written backward) and ``model``
(``RNNTranslator`` and its config ``RNNConfig``).
"""

from .model import RNNConfig, RNNMemory, RNNState, RNNTranslator

__all__ = ["RNNConfig", "RNNMemory", "RNNState", "RNNTranslator"]
