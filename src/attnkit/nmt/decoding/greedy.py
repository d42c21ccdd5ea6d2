"""Greedy search: emit the most probable token at each step until ``<eos>`` or the limit.

Notation: ``B`` sentences, ``t`` steps so far, ``S`` source length.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..vocab_ids import BOS, EOS
from .inference import inference
from .settings import GREEDY, SearchSettings
from .steps import Hypothesis, SearchModel, block_repeats, max_lengths, next_log_probs

__all__ = ["greedy_decode"]


def greedy_decode(
    model: SearchModel,
    src: Tensor,
    src_lengths: Tensor,
    settings: SearchSettings = GREEDY,
    **overrides: float | int,
) -> list[Hypothesis]:
    """Greedy decoding: emit the most probable token at each step until ``<eos>``.

    Args:
        model: the translator or ensemble (run in eval mode without gradients here; its
            mode is restored afterwards).
        src: ``(B, S)`` long, padded with PAD.
        src_lengths: ``(B,)`` integer, any order.
        settings: the length limit (``max_len_a``, ``max_len_b``) and
            ``no_repeat_ngram``; the beam size and penalties are not used.
        **overrides: fields of ``settings`` to replace (e.g. ``no_repeat_ngram=3``).

    Returns:
        one :class:`Hypothesis` per sentence, in input order; ``score`` is the
        log-probability.

    Raises:
        TypeError: an override that is no field of :class:`SearchSettings`.
        ValueError: bad source tensors (see ``Translator.encode``), a length
            limit < 1, or a bad override value.
    """
    settings = settings.with_overrides(**overrides)
    with inference(model):
        memory = model.encode(src, src_lengths)
        limits = max_lengths(
            memory.lengths, settings.max_len_a, settings.max_len_b, model.max_target_len
        )
        tokens = torch.full_like(memory.lengths, BOS)  # (B,)
        state, done = model.initial_state(memory), torch.zeros_like(memory.mask[:, 0])
        steps, weights, log_probs = [], [], []
        for t in range(int(limits.max())):
            step_log_probs, step_weights, state = next_log_probs(model, tokens, state, memory)
            if steps:
                block_repeats(step_log_probs, torch.stack(steps, 1), settings.no_repeat_ngram)
            best, tokens = step_log_probs.max(dim=-1)  # (B,), (B,)
            steps.append(tokens)
            weights.append(step_weights)
            log_probs.append(best)
            done = done | (tokens == EOS) | (t + 1 >= limits)
            if bool(done.all()):
                break
        return _greedy_hypotheses(
            torch.stack(steps, 1),
            torch.stack(weights, 1),
            torch.stack(log_probs, 1),
            memory.lengths,
            limits,
        )


def _greedy_hypotheses(
    steps: Tensor, weights: Tensor, log_probs: Tensor, src_lengths: Tensor, limits: Tensor
) -> list[Hypothesis]:
    """Cut each row of steps ``(B, t)``, weights ``(B, t, S)`` at its first EOS or limit."""
    weights = weights.float().cpu()  # (B, t, S)
    log_probs = log_probs.cpu()  # (B, t)
    hypotheses = []
    for b, (row, limit, src_len) in enumerate(
        zip(steps.tolist(), limits.tolist(), src_lengths.tolist(), strict=True)
    ):
        n = min(limit, row.index(EOS) + 1 if EOS in row else len(row))
        log_prob = float(log_probs[b, :n].sum())
        tokens = row[: n - 1] if row[n - 1] == EOS else row[:n]
        hypotheses.append(Hypothesis(tokens, weights[b, :n, :src_len].clone(), log_prob, log_prob))
    return hypotheses
