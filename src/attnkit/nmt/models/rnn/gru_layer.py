"""``nn.GRU`` over whole sequences with a hand-written backward, organised as cuDNN organises it.

PyTorch's CPU GRU is a loop of small per-step products whose autograd graph
also computes every weight gradient per step: ``T`` products of ``(3D, B) x
(B, D)`` and ``T`` accumulations of a ``3D x D`` gradient. Over a packed
sequence it is worse: each step's slice of the input projection gets a
gradient the size of the whole packed input, zero-filled and summed ``T``
times. :func:`gru_layer` runs the same equations (``nn.GRU``'s, gate order
r, z, n; Cho et al. 2014, eqs. 5-8)::

    r = sigma(W_ir x + b_ir + W_hr s + b_hr)
    z = sigma(W_iz x + b_iz + W_hz s + b_hz)
    n = tanh(W_in x + b_in + r * (W_hn s + b_hn))
    s' = (1 - z) * n + z * s

with the input projection one product for all steps, and a backward pass
that runs only the recursion through the states; each weight gradient is one
product over all ``B*T`` positions after it. Sentences shorter than the batch
keep their state past their length (``z`` is pinned to 1 there), as a packed
sequence would, and the backward direction starts at each sentence's own last
token. :func:`run_gru` stacks layers and directions as ``nn.GRU`` does; the
Bahdanau decoder's loop (:mod:`.fused_loop`) shares the step and its gradient.

The hand-written backward serves reverse-mode autograd (``loss.backward()``,
``torch.autograd.grad``). Under ``torch.func`` transforms (``grad``, ``vmap``,
``jvp``, ``jacrev``, ...) and forward-mode AD, which an autograd Function
without ``setup_context``, ``jvp`` and ``vmap`` rules cannot join,
:func:`gru_layer` runs the same recursion in differentiable PyTorch operations
instead (:func:`composite_autograd`): the same numbers, at autograd's speed.
A backward that is itself differentiated (``create_graph=True``,
``gradgradcheck``) or batched (``is_grads_batched=True``) is computed by
autograd through those operations too (:func:`autograd_through`).

Notation: ``B`` batch, ``T`` steps, ``E`` input size, ``D`` hidden units.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F

from ....attention.dropout import dropout
from ....attention.masks import forward_ad_active, functorch_active, values_unreadable

__all__ = [
    "autograd_through",
    "backward_needs_autograd",
    "composite_autograd",
    "gate_factors",
    "gru_cell",
    "gru_layer",
    "gru_step",
    "in_sentence_order",
    "n_first",
    "run_gru",
    "run_layers",
    "rz_first",
]


def composite_autograd() -> bool:
    """Whether the recursions must run in differentiable PyTorch operations rather than
    the autograd Functions with a hand-written backward: under a ``torch.func``
    transform or forward-mode AD, neither of which such a Function joins, and while
    ``torch.export`` traces (whose graph cannot hold their buffers written with ``out=``)."""
    return functorch_active() or forward_ad_active() or torch.compiler.is_exporting()


def gru_step(gi: Tensor, gh: Tensor, s: Tensor, rz: Tensor, n: Tensor, out: Tensor) -> Tensor:
    """One GRU step into preallocated (contiguous) buffers: the new state, written to ``out``.

    Args:
        gi: ``W_i x + b_i`` ``(B, 3D)``; gh: ``W_h s + b_h`` ``(B, 3D)``; s: ``(B, D)``.
        rz: ``(B, 2D)``, receives ``[r, z]``; n: ``(B, D)``, receives ``n``; out: ``(B, D)``.
    """
    d = s.shape[-1]
    torch.sigmoid(gi[:, : 2 * d] + gh[:, : 2 * d], out=rz)
    torch.tanh(torch.addcmul(gi[:, 2 * d :], rz[:, :d], gh[:, 2 * d :]), out=n)
    return torch.lerp(n, s, rz[:, d:], out=out)  # (1 - z) n + z s


def gate_factors(rz: Tensor, n: Tensor, gh_n: Tensor, prev: Tensor) -> Tensor:
    """``d s_t / d`` the gates' pre-activations, for all steps at once.

    Args:
        rz: ``[r, z]`` ``(T, B, 2D)``; n: ``(T, B, D)``; gh_n: ``W_hn s_{t-1} + b_hn``
            ``(T, B, D)``; prev: ``s_{t-1}`` ``(T, B, D)``.

    Returns:
        ``(T, B, 4, D)``, ordered ``[x_n, r, z, h_n]``: multiplied by ``dL/ds_t``, its
        first three give the gradient of ``W_i x + b_i`` in the order ``[n, r, z]``
        (:func:`n_first`) and its last three that of ``W_h s_{t-1} + b_h`` in
        ``nn.GRU``'s order, so each is one contiguous block of a step's row.
    """
    d = prev.shape[-1]
    r, z = rz.split(d, dim=-1)
    factors = prev.new_empty(*prev.shape[:2], 4, d)
    f_xn, f_r, f_z, f_hn = factors.unbind(2)
    torch.mul(1 - z, 1 - n * n, out=f_xn)
    torch.mul(f_xn, r, out=f_hn)
    torch.mul(f_hn * gh_n, 1 - r, out=f_r)
    torch.mul((prev - n) * z, 1 - z, out=f_z)
    return factors


def n_first(t: Tensor) -> Tensor:
    """Rows of a GRU input weight or bias ``(3D, ...)`` from ``[r, z, n]`` to ``[n, r, z]``."""
    d = t.shape[0] // 3
    return torch.cat([t[2 * d :], t[: 2 * d]])


def rz_first(t: Tensor) -> Tensor:
    """The inverse of :func:`n_first`: rows ``[n, r, z]`` back to ``[r, z, n]``."""
    d = t.shape[0] // 3
    return torch.cat([t[d:], t[:d]])


def gru_layer(
    inputs: Tensor,
    initial: Tensor,
    weights: tuple[Tensor, Tensor, Tensor, Tensor],
    lengths: Tensor | None = None,
    reverse: bool = False,
) -> tuple[Tensor, Tensor]:
    """One GRU direction over a padded batch.

    Args:
        inputs: ``(B, T, E)``, float (the weights' dtype).
        initial: ``s_0`` ``(B, D)``.
        weights: ``(W_ih (3D, E), b_ih (3D,), W_hh (3D, D), b_hh (3D,))``, ``nn.GRU``'s layout.
        lengths: ``(B,)`` integer real lengths in ``[1, T]``, or None (all ``T``).
        reverse: run from each sentence's last real token back to its first.

    Returns:
        ``(outputs, final)``: the states ``(B, T, D)``, zero past each length, and
        each sentence's last state ``(B, D)``.
    """

    def run(x: Tensor, keep: Tensor | None) -> tuple[Tensor, Tensor]:
        if composite_autograd():
            return _composite_layer(x, initial, weights, keep)
        return _GRULayer.apply(x, initial, *weights, keep)

    return in_sentence_order(inputs, lengths, reverse, run)


def in_sentence_order(
    inputs: Tensor,
    lengths: Tensor | None,
    reverse: bool,
    run: Callable[[Tensor, Tensor | None], tuple[Tensor, Any]],
) -> tuple[Tensor, Any]:
    """One RNN direction over each sentence's own positions, as a packed sequence runs it.

    ``run(inputs, keep)`` runs the recursion over ``inputs`` ``(B, T, E)``, keeping the
    state where ``keep`` ``(B, T)`` is False (past a length; None: nowhere), and returns
    ``(outputs (B, T, D), final)``. With ``reverse``, position ``t`` of each sentence
    reads its mirror within the sentence (padding stays put), so the recursion starts at
    its last real token. Returns ``run``'s outputs in the original order, zero past each
    length, and its ``final`` as it is.
    """
    steps = inputs.shape[1]
    keep = None
    # torch.export traces shapes, not the lengths' values, and vmap has no one value for
    # them: there the mask is always built
    if lengths is not None and (values_unreadable() or bool((lengths < steps).any())):
        positions = torch.arange(steps, device=inputs.device)
        keep = positions[None, :] < lengths.to(inputs.device)[:, None]  # (B, T)
    order = None
    if reverse:  # position t reads t's mirror within the sentence; padding stays put
        last = steps - 1 if keep is None else lengths.to(inputs.device)[:, None] - 1
        order = torch.arange(steps, device=inputs.device).expand(inputs.shape[0], steps)
        order = torch.where(order <= last, last - order, order)  # an involution
        inputs = inputs.gather(1, order[:, :, None].expand_as(inputs))
    outputs, final = run(inputs, keep)
    if keep is not None:
        outputs = outputs * keep[:, :, None].to(outputs.dtype)
    if order is not None:
        outputs = outputs.gather(1, order[:, :, None].expand_as(outputs))
    return outputs, final


def autograd_through(
    ctx: Any, composite: Callable[..., tuple[Tensor, ...]], primals: tuple, grads: tuple
) -> tuple[Tensor | None, ...]:
    """An autograd Function's input gradients by autograd through ``composite``, its
    forward in differentiable operations, for a backward its hand-written loops cannot
    serve: one that is differentiated again (``create_graph=True``: grad mode is on in
    it) or run under ``vmap`` (``is_grads_batched=True``, ``torch.func.jacrev``).

    Args:
        ctx: the Function's context (``needs_input_grad``).
        composite: ``composite(*primals)`` gives the Function's outputs.
        primals: the forward's inputs, in order (non-tensors and None allowed).
        grads: the gradients of the outputs (None for an output without one).
    """
    create_graph = torch.is_grad_enabled()
    wanted = [p for p, need in zip(primals, ctx.needs_input_grad, strict=True) if need]
    with torch.enable_grad():
        outputs = composite(*primals)
    pairs = [(o, g) for o, g in zip(outputs, grads, strict=True) if g is not None]
    found = iter(
        torch.autograd.grad(
            [o for o, _ in pairs],
            wanted,
            [g for _, g in pairs],
            create_graph=create_graph,
            allow_unused=True,
        )
    )
    return tuple(next(found) if need else None for need in ctx.needs_input_grad)


def backward_needs_autograd(*grads: Tensor | None) -> bool:
    """Whether a backward given ``grads`` runs differentiated (grad mode is on), under a
    ``torch.func`` transform, or vmapped by ``torch.autograd.grad(is_grads_batched=True)``
    (whose batched ``grads`` are PyTorch's legacy batched tensors)."""
    batched = torch._C._functorch.is_legacy_batchedtensor
    return (
        torch.is_grad_enabled()
        or functorch_active()
        or any(g is not None and batched(g) for g in grads)
    )


def gru_cell(gi: Tensor, s: Tensor, w_hh: Tensor, b_hh: Tensor) -> Tensor:
    """One GRU step in differentiable operations: ``gi = W_i x + b_i`` ``(B, 3D)``, ``s``
    ``(B, D)`` -> ``s'`` ``(B, D)`` (what :func:`gru_step` writes into its buffers)."""
    i_r, i_z, i_n = gi.chunk(3, dim=-1)
    h_r, h_z, h_n = F.linear(s, w_hh, b_hh).chunk(3, dim=-1)  # (B, D) each
    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    return (1 - z) * torch.tanh(i_n + r * h_n) + z * s


def _composite_layer(
    inputs: Tensor, initial: Tensor, weights: tuple[Tensor, ...], keep: Tensor | None
) -> tuple[Tensor, Tensor]:
    """:class:`_GRULayer`'s recursion in differentiable operations: ``(B, T, D)``, ``(B, D)``.

    ``keep`` ``(B, T)`` bool (or None): past a length the state is kept as it was.
    """
    w_ih, b_ih, w_hh, b_hh = weights
    gi = F.linear(inputs, w_ih, b_ih)  # (B, T, 3D), [r, z, n]
    s, states = initial, []
    for t in range(inputs.shape[1]):
        new = gru_cell(gi[:, t], s, w_hh, b_hh)  # (B, D)
        s = new if keep is None else torch.where(keep[:, t, None], new, s)
        states.append(s)
    return torch.stack(states, dim=1), s


def _composite_apply(inputs, initial, w_ih, b_ih, w_hh, b_hh, keep) -> tuple[Tensor, Tensor]:
    """:func:`_composite_layer` with :class:`_GRULayer`'s arguments."""
    return _composite_layer(inputs, initial, (w_ih, b_ih, w_hh, b_hh), keep)


class _GRULayer(torch.autograd.Function):
    """Buffers are time-major, ``(T, B, ...)``, so every step reads and writes whole blocks."""

    @staticmethod
    def forward(ctx: Any, inputs, initial, w_ih, b_ih, w_hh, b_hh, keep):
        batch, steps, size = inputs.shape
        d = initial.shape[-1]
        x = inputs.transpose(0, 1).contiguous()  # (T, B, E)
        gi = torch.addmm(b_ih, x.view(-1, size), w_ih.t()).view(steps, batch, 3 * d)
        if keep is not None:  # z = sigmoid(inf) = 1 past a length: the state is kept exactly
            gi[:, :, d : 2 * d].masked_fill_(~keep.t()[:, :, None], torch.inf)
        gh, rz, n, out = (inputs.new_empty(steps, batch, k * d) for k in (3, 2, 1, 1))
        s, w = initial, w_hh.t()
        for t in range(steps):
            s = gru_step(gi[t], torch.addmm(b_hh, s, w, out=gh[t]), s, rz[t], n[t], out[t])
        # the inputs, not their time-major copy x: autograd_through needs them, and x is
        # rebuilt from them in the backward (one copy of (T, B, E) saved, as before)
        ctx.save_for_backward(inputs, initial, w_ih, w_hh, gh, rz, n, out, b_ih, b_hh, keep)
        return out.transpose(0, 1), s.clone()

    @staticmethod
    def backward(ctx: Any, g_out, g_final):
        inputs, initial, w_ih, w_hh, gh, rz, n, out, b_ih, b_hh, keep = ctx.saved_tensors
        if backward_needs_autograd(g_out, g_final):
            primals = (inputs, initial, w_ih, b_ih, w_hh, b_hh, keep)
            return autograd_through(ctx, _composite_apply, primals, (g_out, g_final))
        steps, batch, d = out.shape
        prev = torch.cat([initial[None], out[:-1]])  # s_{t-1}, (T, B, D)
        factors = gate_factors(rz, n, gh[..., 2 * d :], prev)  # (T, B, 4, D)
        z = rz[..., d:]
        g = out.new_empty(steps, batch, 4 * d)  # per step [x_n, r, z, h_n]
        g_s = torch.zeros_like(initial) if g_final is None else g_final
        for t in reversed(range(steps)):
            if g_out is not None:
                g_s = g_s + g_out[:, t]
            torch.mul(factors[t], g_s[:, None], out=g[t].view(batch, 4, d))
            g_s = torch.addmm(g_s * z[t], g[t, :, d:], w_hh)

        def flat(t: Tensor) -> Tensor:
            return t.reshape(steps * batch, -1)

        g_x, g_h = flat(g[..., : 3 * d]), flat(g[..., d:])  # [n, r, z]; [r, z, n]
        g_inputs = (g_x @ n_first(w_ih)).view(steps, batch, -1).transpose(0, 1)  # (B, T, E)
        g_w_ih = rz_first(g_x.t() @ flat(inputs.transpose(0, 1)))  # x: (T, B, E)
        g_b_ih = rz_first(g_x.sum(0))
        return g_inputs, g_s, g_w_ih, g_b_ih, g_h.t() @ flat(prev), g_h.sum(0), None


def run_gru(
    params: Mapping[str, Tensor],
    inputs: Tensor,
    state: Tensor | None = None,
    lengths: Tensor | None = None,
    *,
    num_layers: int = 1,
    bidirectional: bool = False,
    dropout_p: float = 0.0,
    training: bool = False,
) -> tuple[Tensor, Tensor]:
    """``nn.GRU(batch_first=True)`` with :func:`gru_layer` for every layer and direction.

    Args:
        params: the GRU's parameters (with biases) by ``nn.GRU``'s names
            (``weight_ih_l0``, ``bias_hh_l0_reverse``, ...), in the dtype to compute in.
        inputs: ``(B, T, E)``.
        state: ``h_0`` ``(L*dirs, B, D)`` or None (zeros).
        lengths: ``(B,)`` real lengths, as a packed sequence would give them; None: all ``T``.
        num_layers, bidirectional: as the module's.
        dropout_p, training: dropout on every layer's output but the last, in training.

    Returns:
        ``(outputs (B, T, dirs*D), h_n (L*dirs, B, D))``, outputs zero past each length.

    Raises:
        ValueError: ``lengths`` not ``(B,)`` or a length outside ``[1, T]`` (the values
            unchecked while ``torch.export`` traces or a ``torch.func`` transform runs).
        KeyError: a parameter missing from ``params`` (a GRU without biases).
    """
    if lengths is not None:
        batch, steps = inputs.shape[:2]
        outside = not values_unreadable() and (lengths < 1).any() | (lengths > steps).any()
        if lengths.shape != (batch,) or bool(outside):
            shown = (
                f", range [{int(lengths.min())}, {int(lengths.max())}]" if lengths.numel() else ""
            )
            raise ValueError(
                f"lengths must be ({batch},) with each in [1, {steps}], got shape "
                f"{tuple(lengths.shape)}{shown}"
            )
    dirs = 2 if bidirectional else 1
    if state is None:
        d = params["weight_hh_l0"].shape[-1]
        state = inputs.new_zeros(num_layers * dirs, inputs.shape[0], d)

    def layer(x, initial, weights, lengths, reverse):
        out, final = gru_layer(x, initial[0], weights, lengths, reverse)
        return out, (final,)

    stack = dict(num_layers=num_layers, bidirectional=bidirectional)
    drop = dict(dropout_p=dropout_p, training=training)
    outputs, (h_n,) = run_layers(params, inputs, (state,), lengths, layer, **stack, **drop)
    return outputs, h_n


def run_layers(
    params: Mapping[str, Tensor],
    inputs: Tensor,
    states: tuple[Tensor, ...],
    lengths: Tensor | None,
    layer: Callable[..., tuple[Tensor, tuple[Tensor, ...]]],
    *,
    num_layers: int,
    bidirectional: bool,
    dropout_p: float,
    training: bool,
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """Layers and directions stacked as ``nn.GRU`` / ``nn.LSTM`` stack them.

    ``states``: the initial states ``(L*dirs, B, D)`` (``(h_0,)``, or ``(h_0, c_0)``);
    ``layer(x, initials, weights, lengths, reverse)`` runs one direction of one layer
    from ``initials`` (one ``(B, D)`` per state) with the weights ``(W_ih, b_ih, W_hh,
    b_hh)`` and returns ``(outputs (B, T, D), finals)``. Returns the top layer's outputs
    ``(B, T, dirs*D)`` and the final states, each ``(L*dirs, B, D)``.
    """
    dirs = 2 if bidirectional else 1
    finals, x = [], inputs
    for index in range(num_layers):
        if index and training and dropout_p > 0:
            x = dropout(x, dropout_p)
        outs = []
        for direction in range(dirs):
            suffix = f"_l{index}" + ("_reverse" if direction else "")
            weights = tuple(
                params[f"{k}{suffix}"] for k in ("weight_ih", "bias_ih", "weight_hh", "bias_hh")
            )
            initials = tuple(state[index * dirs + direction] for state in states)
            out, final = layer(x, initials, weights, lengths, bool(direction))
            outs.append(out)
            finals.append(final)
        x = outs[0] if dirs == 1 else torch.cat(outs, dim=-1)
    return x, tuple(torch.stack(kind) for kind in zip(*finals, strict=True))
