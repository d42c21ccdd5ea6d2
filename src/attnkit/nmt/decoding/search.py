"""Decoding a whole tokenized corpus with greedy or beam search, in length-sorted batches.

:func:`decode_examples` returns the best hypothesis per sentence,
:func:`decode_n_best` the best ``n`` of the same search (beam search keeps
every finished hypothesis; greedy search has one). The searches themselves
live in :mod:`~attnkit.nmt.decoding.greedy` and :mod:`~attnkit.nmt.decoding.beam`
and are re-exported here.
"""

from __future__ import annotations

from typing import Any

import torch

from ..data.batching import Examples, make_batch, sorted_batches
from .beam import beam_search, beam_search_n_best, coverage_penalty, length_penalty
from .greedy import greedy_decode
from .settings import GREEDY, SearchSettings
from .steps import Hypothesis, SearchModel

__all__ = [
    "Hypothesis",
    "beam_search",
    "beam_search_n_best",
    "coverage_penalty",
    "decode_examples",
    "decode_n_best",
    "greedy_decode",
    "length_penalty",
]


def decode_examples(
    model: SearchModel,
    examples: Examples,
    settings: SearchSettings = GREEDY,
    *,
    device: torch.device | str = "cpu",
    **overrides: Any,
) -> list[Hypothesis]:
    """The best hypothesis of each example's source (:func:`decode_n_best` with ``n = 1``).

    Returns:
        one :class:`Hypothesis` per example, in input order.
    """
    found = decode_n_best(model, examples, settings, n=1, device=device, **overrides)
    return [hypotheses[0] for hypotheses in found]


def decode_n_best(
    model: SearchModel,
    examples: Examples,
    settings: SearchSettings = GREEDY,
    *,
    n: int,
    device: torch.device | str = "cpu",
    **overrides: Any,
) -> list[list[Hypothesis]]:
    """Translate every example's source in length-sorted batches; the ``n`` best of each.

    Greedy search for ``beam_size == 1`` (one hypothesis per sentence), beam
    search otherwise (its finished hypotheses, best first, at most ``n``; the
    first is what :func:`beam_search` returns). Sentences are sorted by length
    so each batch carries little padding; the results come back in input order.

    Args:
        model: the translator or ensemble (run in eval mode without gradients; its mode is
            restored afterwards).
        examples: tokenized sources (``examples.tgt`` is ignored), ids without
            specials; the batches append ``</s>``.
        settings: the search settings (default: greedy, the default limits).
        n: hypotheses kept per sentence, >= 1.
        device: where the batches go (the model's device).
        **overrides: fields of ``settings`` to replace (e.g. ``beam_size=4``).

    Returns:
        per example, in input order, 1 to ``n`` hypotheses, best first.

    Raises:
        TypeError: an override that is no field of :class:`SearchSettings`; ``n`` not
            an int; ``examples`` not :class:`Examples` (a plain list of id lists).
        ValueError: ``n`` < 1, a bad override value, or a length limit < 1.
    """
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"n must be an int, got {type(n).__name__} {n!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not hasattr(examples, "src"):
        raise TypeError(
            f"examples must be Examples (attnkit.nmt.data.batching), got "
            f"{type(examples).__name__}: wrap source id lists as Examples(src)"
        )
    settings = settings.with_overrides(**overrides)
    sources = Examples(examples.src)
    results: list[list[Hypothesis]] = [[] for _ in range(len(sources))]
    for indices in sorted_batches(sources, settings.batch_size):
        batch = make_batch(sources, indices).to(device)
        if settings.beam_size == 1:
            found = [[h] for h in greedy_decode(model, batch.src, batch.src_lengths, settings)]
        else:
            found = beam_search_n_best(model, batch.src, batch.src_lengths, settings)
        for index, hypotheses in zip(indices, found, strict=True):
            results[index] = hypotheses[:n]
    return results
