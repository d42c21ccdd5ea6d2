"""Run an ``nn.GRU`` / ``nn.LSTM`` over a padded batch, in the autocast dtype under autocast.

Two things PyTorch's modules do not do on a CPU:

* Inside ``torch.autocast("cpu", dtype=torch.bfloat16)`` PyTorch casts linear
  layers to bf16 but leaves ``nn.GRU`` (and any packed sequence) in float32,
  so the recurrences -- most of an RNN translator's arithmetic -- would run at
  float32 speed. :func:`run_rnn` runs them in the autocast dtype with copies of
  the weights, as autocast does for a linear layer, so the float32 master
  weights still receive float32 gradients.
* A GRU runs through :func:`~.gru_layer.run_gru` (one product per weight
  gradient instead of one per step; sentences of several lengths without
  packing). An LSTM runs through the module, over a packed sequence when the
  sentences' lengths differ, and so does a GRU or LSTM that
  ``torch.ao.quantization.quantize_dynamic`` replaced (its weights are packed
  int8 or float16, no tensors to run :func:`~.gru_layer.run_gru` with).
  Under ``torch.func`` transforms and forward-mode AD, which
  ``pack_padded_sequence`` and PyTorch's CPU LSTM kernel do not support, an
  LSTM runs its equations in differentiable operations instead
  (:func:`_composite_lstm`), as :func:`~.gru_layer.run_gru` does for a GRU.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .gru_layer import composite_autograd, in_sentence_order, run_gru, run_layers

__all__ = ["run_rnn"]


def run_rnn(rnn: nn.RNNBase, inputs: Tensor, state=None, lengths: Tensor | None = None):
    """``rnn(inputs, state)`` over a padded batch; inside an autocast region, in its dtype.

    Args:
        rnn: a batch-first ``nn.GRU`` or ``nn.LSTM``.
        inputs: ``(B, T, E)``.
        state: ``h_0`` ``(L*dirs, B, D)`` (a pair ``(h_0, c_0)`` for an LSTM), or None.
        lengths: ``(B,)`` real lengths in ``[1, T]``; each sentence is run as if
            alone (as a packed sequence would run it). None: all ``T``.

    Returns:
        ``(outputs (B, T, dirs*D), final state)`` as ``rnn`` returns them (outputs
        zero past each length), in the autocast dtype (bf16) inside autocast and
        in the weights' dtype outside it.
    """
    if not isinstance(getattr(rnn, "weight_hh_l0", None), Tensor):  # dynamically quantized
        return _run_module(rnn, inputs, state, lengths)
    device = rnn.weight_hh_l0.device.type
    params = dict(rnn.named_parameters())
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        params = {name: p.to(dtype) for name, p in params.items()}
        inputs = inputs.to(dtype)
        if isinstance(state, tuple):
            state = tuple(s.to(dtype) for s in state)
        elif state is not None:
            state = state.to(dtype)
    with torch.autocast(device, enabled=False):
        if isinstance(rnn, nn.GRU):
            return run_gru(
                params, inputs, state, lengths,
                num_layers=rnn.num_layers, bidirectional=rnn.bidirectional,
                dropout_p=rnn.dropout, training=rnn.training,
            )  # fmt: skip
        return _run_module(rnn, inputs, state, lengths, params)


def _run_module(
    rnn: nn.Module, inputs: Tensor, state, lengths, params: dict[str, Tensor] | None = None
):
    """The module itself (with ``params``, if given), over a packed sequence if the
    lengths differ."""

    def call(x):
        return rnn(x, state) if params is None else functional_call(rnn, params, (x, state))

    if params is not None and isinstance(rnn, nn.LSTM) and composite_autograd():
        return _composite_lstm(rnn, params, inputs, state, lengths)
    steps = inputs.shape[1]
    if lengths is None or bool((lengths == steps).all()):
        return call(inputs)
    packed = pack_padded_sequence(inputs, lengths.cpu(), batch_first=True, enforce_sorted=False)
    outputs, final = call(packed)
    outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=steps)
    return outputs, final


def _composite_lstm(rnn: nn.LSTM, params: dict[str, Tensor], inputs: Tensor, state, lengths):
    """``nn.LSTM``'s equations (gate order i, f, g, o) in differentiable operations, each
    sentence for its own length: ``(outputs (B, T, dirs*D), (h_n, c_n))``."""
    if state is None:
        dirs = 2 if rnn.bidirectional else 1
        zeros = inputs.new_zeros(rnn.num_layers * dirs, inputs.shape[0], rnn.hidden_size)
        state = (zeros, zeros)
    stack = dict(num_layers=rnn.num_layers, bidirectional=rnn.bidirectional)
    drop = dict(dropout_p=rnn.dropout, training=rnn.training)
    return run_layers(params, inputs, tuple(state), lengths, _lstm_layer, **stack, **drop)


def _lstm_layer(x: Tensor, initials: tuple[Tensor, Tensor], weights, lengths, reverse: bool):
    """One LSTM direction from ``(h_0, c_0)`` ``(B, D)`` each (see :func:`run_layers`)."""
    w_ih, b_ih, w_hh, b_hh = weights

    def run(inputs: Tensor, keep: Tensor | None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        gates_x = F.linear(inputs, w_ih, b_ih)  # (B, T, 4D)
        (h, c), outputs = initials, []
        for t in range(inputs.shape[1]):
            i, f, g, o = (gates_x[:, t] + F.linear(h, w_hh, b_hh)).chunk(4, dim=-1)
            new_c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)  # (B, D)
            new_h = torch.sigmoid(o) * torch.tanh(new_c)  # (B, D)
            if keep is not None:  # past a length the state is kept
                new_h, new_c = (
                    torch.where(keep[:, t, None], n, p) for n, p in ((new_h, h), (new_c, c))
                )
            h, c = new_h, new_c
            outputs.append(h)
        return torch.stack(outputs, dim=1), (h, c)

    return in_sentence_order(x, lengths, reverse, run)
