"""Attention word weights smoothed with an HMM jump prior before links are drawn.

Attention weighs each target word's source words one target word at a time;
nothing tells it that a translation mostly moves forward a word at a time, and
so it may pick the wrong one of two ``the``/``le`` or ``of``/``de`` that lie
far apart. The HMM aligner (Vogel, Ney & Tillmann 1996, "HMM-Based Word
Alignment in Statistical Translation", eq. 3-4) puts that knowledge in a
transition probability that depends only on the jump between the source
positions of consecutive target words. Here the attention weights play the
emission, the jump prior the transition, and the forward-backward algorithm
gives each target word's posterior over source words:

    p(i' | i) = exp(-lambda |i' - i - 1|) / Z_i          (a jump of +1 is the most likely)
    alpha_j(i') = (sum_i alpha_{j-1}(i) p(i' | i)) w_j(i')
    beta_j(i)   = sum_i' p(i' | i) w_{j+1}(i') beta_{j+1}(i')
    gamma_j(i)  = alpha_j(i) beta_j(i) / sum_k alpha_j(k) beta_j(k)

with a uniform start. The posterior alone over-smooths (it pulls every word
onto the diagonal, reordered phrases included), so the weights returned are
``mix * gamma + (1 - mix) * w``. Measured on the Hansards gold
(benchmarks/RESULTS.md, "A jump prior on the attention weights"), lambda and
the link rule chosen on 100 development pairs.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["MIX", "jump_smoothed"]

MIX = 0.5
_FLOOR = 1e-6  # a weight of exactly 0 would make a path impossible, not unlikely


def jump_smoothed(weights: Tensor, strength: float, mix: float = MIX) -> Tensor:
    """One sentence's word weights mixed with their posterior under a jump prior.

    Args:
        weights: ``(Tw, Sw)`` float, target words x source words; each row the
            attention of one target word (rows may sum to less than 1 where
            ``</s>`` took some weight).
        strength: lambda >= 0 of ``p(i' | i) ~ exp(-lambda |i' - i - 1|)``; 0 is off:
            the weights come back unchanged (a flat prior would only renormalise
            each row).
        mix: the posterior's share of the result, in [0, 1].

    Returns:
        ``(Tw, Sw)`` weights in the input's dtype (rows sum to 1 where the input's do).

    Raises:
        ValueError: ``weights`` is not 2-D, ``strength`` is negative or not finite, or
            ``mix`` is outside [0, 1].
    """
    if weights.ndim != 2:
        raise ValueError(
            f"weights must be (target words, source words), got {tuple(weights.shape)}"
        )
    if not (math.isfinite(strength) and strength >= 0):
        raise ValueError(f"strength must be >= 0 and finite, got {strength}")
    if not 0.0 <= mix <= 1.0:
        raise ValueError(f"mix must be in [0, 1], got {mix}")
    if weights.numel() == 0 or strength == 0:
        return weights.clone()
    w = weights.double()
    posterior = _posterior(w.clamp_min(_FLOOR), _transitions(w.shape[1], strength))
    return (mix * posterior + (1.0 - mix) * w).to(weights.dtype)


def _transitions(source_words: int, strength: float) -> Tensor:
    """``(Sw, Sw)`` row-stochastic: entry ``[i, i']`` is ``p(i' | i)``."""
    position = torch.arange(source_words, dtype=torch.float64)
    jump = position[None, :] - position[:, None] - 1.0
    return torch.softmax(-strength * jump.abs(), dim=1)


def _posterior(emission: Tensor, transition: Tensor) -> Tensor:
    """Forward-backward, each step rescaled to sum 1 (the scale cancels in gamma)."""
    steps = emission.shape[0]
    alpha, beta = torch.empty_like(emission), torch.ones_like(emission)
    alpha[0] = emission[0] / emission[0].sum()
    for j in range(1, steps):
        a = (alpha[j - 1] @ transition) * emission[j]
        alpha[j] = a / a.sum()
    for j in range(steps - 2, -1, -1):
        b = transition @ (emission[j + 1] * beta[j + 1])
        beta[j] = b / b.sum()
    gamma = alpha * beta
    return gamma / gamma.sum(dim=1, keepdim=True)
