"""The Bahdanau-timing teacher-forced loop (additive attention + GRU) with a hand-written backward.

Per target step ``t`` (Bahdanau et al. 2015, eqs. 4-6 and A.1.2, A.2.2):

* alignment scores ``e_tj = v^T tanh(W_q s_{t-1} + U_j)`` with the prepared keys
  ``U_j = W_k h_j``; weights ``a_t = masked softmax(e_t)``; context
  ``c_t = sum_j a_tj h_j``;
* one GRU step (PyTorch's ``nn.GRU`` equations, gate order r, z, n) on the
  input ``x_t = [E y_{t-1}; c_t]``: ``r = sigma(W_ir x + b_ir + W_hr s + b_hr)``,
  ``z = sigma(W_iz x + b_iz + W_hz s + b_hz)``,
  ``n = tanh(W_in x + b_in + r * (W_hn s + b_hn))``, ``s_t = (1 - z) n + z s_{t-1}``.

It computes exactly what the module-by-module loop computes (a test compares
outputs and every gradient), organised the way cuDNN organises an RNN:

* the embedding half of the GRU input projection, ``W_i[:, :E] E y``, is one
  matrix product for all steps before the loop, and the two products of
  ``s_{t-1}`` (``W_q`` and ``W_h``) are one product per step;
* the backward pass runs only the recursion through the steps (gradients
  with respect to ``s_{t-1}`` and ``c_t``); every weight gradient is one large
  product over all ``B*T`` positions after it, instead of ``T`` small ones;
* nothing in the loop builds an autograd graph.

Under ``torch.func`` transforms and forward-mode AD, which the autograd
Function cannot join, the loop runs in differentiable PyTorch operations
(:func:`~.gru_layer.composite_autograd`), and a backward that is differentiated
again (``create_graph=True``) or batched runs through them by autograd
(:func:`~.gru_layer.autograd_through`).

Memory: it keeps ``tanh(W_q s + U)`` for every step, ``(B, T, S, A)``, the
same tensors autograd would save.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F

from ....attention import masked_softmax
from .gru_layer import (
    autograd_through,
    backward_needs_autograd,
    composite_autograd,
    gate_factors,
    gru_cell,
    gru_step,
    n_first,
    rz_first,
)


def bahdanau_gru_loop(
    embedded: Tensor,
    initial: Tensor,
    prepared_keys: Tensor,
    values: Tensor,
    mask: Tensor,
    query_weight: Tensor,
    v: Tensor,
    gru: torch.nn.GRU,
) -> tuple[Tensor, Tensor, Tensor]:
    """Decoder states, contexts and attention weights for a whole teacher-forced target.

    Args:
        embedded: ``E y_{t-1}`` for every step ``(B, T, E)`` (after dropout).
        initial: ``s_0`` ``(B, D)``.
        prepared_keys: ``U = W_k h`` ``(B, S, A)``.
        values: encoder states ``h`` ``(B, S, Dv)``.
        mask: bool ``(B, S)``, True = may attend; a fully masked row gives zero
            weights and a zero context, as :func:`~attnkit.attention.masked_softmax`.
        query_weight: ``W_q`` ``(A, D)``.
        v: ``(A,)``.
        gru: a one-layer, unidirectional ``nn.GRU`` with biases, input ``E + Dv``.

    Returns:
        ``(states, contexts, weights)``: ``s_1..s_T`` ``(B, T, D)``,
        ``c_1..c_T`` ``(B, T, Dv)`` and ``a_1..a_T`` ``(B, T, S)``, in the
        dtype of the GRU's weights.

    Mixed precision: under ``torch.autocast`` (bf16 training or decoding) the
    inputs may arrive in bfloat16 (``prepared_keys`` and ``values`` come from
    autocast linear layers) while the weights are float32. The loop then runs
    in the weights' dtype with autocast off: the inputs are cast up (autograd
    casts their gradients back), so the recursion, its softmax and its
    hand-written backward stay float32, the fallback stated in
    docs/precision.md.
    """
    dtype = gru.weight_ih_l0.dtype
    tensors = (embedded, initial, prepared_keys, values)
    loop = _composite_loop if composite_autograd() else _Loop.apply
    with torch.autocast(embedded.device.type, enabled=False):
        return loop(
            *(t.to(dtype) for t in tensors), mask, query_weight, v,
            gru.weight_ih_l0, gru.bias_ih_l0, gru.weight_hh_l0, gru.bias_hh_l0,
        )  # fmt: skip


def _composite_loop(
    embedded, initial, prepared, values, mask, w_q, v, w_ih, b_ih, w_hh, b_hh
) -> tuple[Tensor, Tensor, Tensor]:
    """:class:`_Loop`'s arithmetic in differentiable operations, with its arguments."""
    embed = embedded.shape[-1]
    x_gates = F.linear(embedded, w_ih[:, :embed], b_ih)  # (B, T, 3D), the embedding half
    s, states, contexts, weights = initial, [], [], []
    for t in range(embedded.shape[1]):
        tanh = torch.tanh(prepared + F.linear(s, w_q)[:, None, :])  # (B, S, A)
        a = masked_softmax(tanh @ v, mask)  # (B, S)
        c = (a[:, None, :] @ values)[:, 0]  # (B, Dv)
        s = gru_cell(x_gates[:, t] + F.linear(c, w_ih[:, embed:]), s, w_hh, b_hh)  # (B, D)
        states.append(s)
        contexts.append(c)
        weights.append(a)
    return torch.stack(states, 1), torch.stack(contexts, 1), torch.stack(weights, 1)


class _Loop(torch.autograd.Function):
    """Buffers are time-major, ``(T, B, ...)``, so every step reads and writes whole blocks."""

    @staticmethod
    def forward(
        ctx: Any, embedded, initial, prepared, values, mask, w_q, v, w_ih, b_ih, w_hh, b_hh
    ):
        batch, steps, embed = embedded.shape
        d, a_dim = initial.shape[-1], w_q.shape[0]
        w_state = torch.cat([w_q, w_hh]).t()  # (D, A + 3D): both products of s_{t-1} at once
        b_state = torch.cat([b_hh.new_zeros(a_dim), b_hh])
        inputs = embedded.transpose(0, 1).contiguous()  # (T, B, E)
        x_gates = torch.addmm(b_ih, inputs.view(-1, embed), w_ih[:, :embed].t())
        x_gates = x_gates.view(steps, batch, 3 * d)  # the embedding half, all steps at once
        w_ctx = w_ih[:, embed:].t()  # (Dv, 3D)
        blocked, floor = ~mask, torch.finfo(values.dtype).min
        keep = mask.to(values.dtype)  # (B, S)

        new = values.new_empty
        qh, rz, n, out = (new(steps, batch, k) for k in (a_dim + 3 * d, 2 * d, d, d))
        hidden = new(steps, *prepared.shape)  # (T, B, S, A)
        weights, contexts = new(steps, *mask.shape), new(steps, batch, 1, values.shape[-1])
        s = initial
        for t in range(steps):
            q = torch.addmm(b_state, s, w_state, out=qh[t])  # [W_q s; W_h s + b_h]
            tanh = torch.add(prepared, q[:, None, :a_dim], out=hidden[t]).tanh_()  # (B, S, A)
            # masked scores are replaced (not added to), as masked_softmax does
            scores = torch.matmul(tanh, v).masked_fill_(blocked, floor)  # (B, S)
            a = torch.mul(torch.softmax(scores, dim=-1), keep, out=weights[t])
            c = torch.bmm(a[:, None, :], values, out=contexts[t])[:, 0]  # (B, Dv)
            gi = torch.addmm(x_gates[t], c, w_ctx)  # W_i [E y; c] + b_i
            s = gru_step(gi, q[:, a_dim:], s, rz[t], n[t], out[t])
        contexts = contexts.squeeze(2)
        # embedded, not its time-major copy (inputs): autograd_through needs it
        ctx.save_for_backward(
            embedded, initial, values, w_q, v, w_ih, w_hh, qh, rz, n, out, hidden, weights,
            contexts, prepared, mask, b_ih, b_hh,  # the last four for autograd_through only
        )  # fmt: skip
        return out.transpose(0, 1), contexts.transpose(0, 1), weights.transpose(0, 1)

    @staticmethod
    def backward(ctx: Any, g_out, g_ctx, g_weights):
        (embedded, initial, values, w_q, v, w_ih, w_hh, qh, rz, n, out, hidden, weights,
         contexts, prepared, mask, b_ih, b_hh) = ctx.saved_tensors  # fmt: skip
        if backward_needs_autograd(g_out, g_ctx, g_weights):
            primals = (embedded, initial, prepared, values, mask, w_q, v, w_ih, b_ih, w_hh, b_hh)
            grads = (g_out, g_ctx, g_weights)
            return autograd_through(ctx, _composite_loop, primals, grads)
        batch, steps, embed = embedded.shape
        d, a_dim = out.shape[-1], w_q.shape[0]
        # a step's gradient row is [x_n, r, z, h_n, attention] (gate_factors' order), so
        # [n, r, z] (input side) and [r, z, h_n, attention] (state side) are blocks of it
        w_state = torch.cat([w_hh, w_q])  # (3D + A, D)
        w_ctx = n_first(w_ih[:, embed:])  # (3D, Dv)
        prev = torch.cat([initial[None], out[:-1]])  # s_{t-1}, (T, B, D)
        factors = gate_factors(rz, n, qh[..., a_dim + 2 * d :], prev)  # (T, B, 4, D)
        z = rz[..., d:]

        g = out.new_empty(steps, batch, 4 * d + a_dim)
        g_c = out.new_empty(contexts.shape)
        g_prepared, g_v = torch.zeros_like(hidden[0]), v.new_zeros(1, a_dim)
        g_s = torch.zeros_like(initial)
        for t in reversed(range(steps)):
            if g_out is not None:
                g_s = g_s + g_out[:, t]
            torch.mul(factors[t], g_s[:, None], out=g[t, :, : 4 * d].view(batch, 4, d))
            if g_ctx is None:
                c_grad = torch.mm(g[t, :, : 3 * d], w_ctx, out=g_c[t])
            else:
                c_grad = torch.addmm(g_ctx[:, t], g[t, :, : 3 * d], w_ctx, out=g_c[t])  # (B, Dv)
            g_a = torch.bmm(values, c_grad[:, :, None])[:, :, 0]  # (B, S)
            if g_weights is not None:
                g_a = g_a + g_weights[:, t]
            a = weights[t]
            g_e = a * (g_a - (a * g_a).sum(-1, keepdim=True))  # softmax backward, (B, S)
            # through e = v^T tanh(.), per step while (B, S, A) is still in cache
            g_pre = torch.ops.aten.tanh_backward(g_e[:, :, None] * v, hidden[t])  # (B, S, A)
            torch.sum(g_pre, dim=1, out=g[t, :, 4 * d :])
            g_prepared += g_pre
            g_v = torch.addmm(g_v, g_e.view(1, -1), hidden[t].view(-1, a_dim))
            g_s = torch.addmm(g_s * z[t], g[t, :, d:], w_state)

        # every weight gradient: one product over all T*B positions
        def flat(x: Tensor) -> Tensor:
            return x.reshape(steps * batch, -1)

        g_x, g_state = flat(g[..., : 3 * d]), flat(g[..., d:])  # [n, r, z]; [r, z, n, A]
        g_w_state = g_state.t() @ flat(prev)  # (3D + A, D)
        g_w_ih = rz_first(g_x.t() @ flat(torch.cat([embedded.transpose(0, 1), contexts], dim=-1)))
        g_embedded = (g_x @ n_first(w_ih[:, :embed])).view(steps, batch, -1).transpose(0, 1)
        g_values = torch.einsum("tbs,tbv->bsv", weights, g_c)  # (B, S, Dv)
        g_b_hh = g_state[:, : 3 * d].sum(0)
        return (
            g_embedded, g_s, g_prepared, g_values, None,
            g_w_state[3 * d :], g_v[0], g_w_ih, rz_first(g_x.sum(0)), g_w_state[: 3 * d], g_b_hh,
        )  # fmt: skip
