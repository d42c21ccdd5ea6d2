"""The one JSON shape of a translation: ``--attention-json`` lines, the explorer's API and
the ``--html`` page all use :func:`translation_record`.

Keys: ``line`` (1-based input line), ``source``, ``translation``, ``score``,
``src_tokens`` (``S`` source tokens with ``</s>``), ``tgt_tokens`` (``T``
output tokens, ``</s>`` when produced), ``weights`` (``T`` rows of ``S``
floats, or null for a blank line), ``weights_from`` (which attention they
are: ``Translation.weights_from``, or the layer and head chosen, ``"layer 1,
head 2"``), ``row_labels``/``col_labels`` (the target
and source tokens again, so that :func:`attnkit.plot.read_weights` reads a
record as it is) and, when asked, ``hypotheses``: the search's best
hypotheses, best first, each ``{"translation", "tgt_tokens", "weights",
"score"}``. The explorer's record (:func:`explorer_record`) adds
``truncated_from``, ``weight_sums`` and ``views`` (every layer and head).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from torch import Tensor

from ..vocab_ids import BOS, SPECIAL_TOKENS
from .translate import Translation
from .views import AttentionViews

__all__ = ["explorer_record", "translation_record"]


def translation_record(
    translation: Translation,
    line: int,
    *,
    weights: Tensor | None = None,
    weights_from: str | None = None,
    hypotheses: int | None = None,
    hypothesis_weights: Sequence[Tensor] | None = None,
    decimals: int | None = 6,
) -> dict[str, Any]:
    """One translation as a JSON-ready dict (keys in the module docstring).

    Args:
        translation: from :func:`~attnkit.nmt.decoding.translate.translate_lines`.
        line: its 1-based input line.
        weights: ``(T, S)`` to write instead of the translation's own (a chosen
            layer/head).
        weights_from: what ``weights`` are (e.g. ``"layer 1, head 2"``); None: the
            translation's own ``weights_from``.
        hypotheses: add the first this many of ``translation.hypotheses``
            (None: no ``hypotheses`` key).
        hypothesis_weights: ``(T_i, S)`` per hypothesis added, to write instead of
            each one's own (the layer/head chosen for ``weights``).
        decimals: round weights to this many decimals (smaller files, same
            pictures); None keeps every digit.
    """
    weights = translation.weights if weights is None else weights
    record: dict[str, Any] = {
        "line": line,
        "source": translation.source,
        "translation": translation.text,
        "score": translation.score,
        "src_tokens": translation.src_pieces,
        "tgt_tokens": translation.tgt_pieces,
        "weights": None if weights is None else _rows(weights, decimals),
        "weights_from": None if weights is None else weights_from or translation.weights_from,
        "row_labels": translation.tgt_pieces,
        "col_labels": translation.src_pieces,
    }
    if hypotheses is not None:
        chosen = translation.hypotheses[:hypotheses]
        shown = hypothesis_weights or [h.weights for h in chosen]
        record["hypotheses"] = [
            {
                "translation": h.text,
                "tgt_tokens": h.tgt_pieces,
                "weights": _rows(w, decimals),
                "score": h.score,
            }
            for h, w in zip(chosen, shown, strict=True)
        ]
    return record


def explorer_record(
    translation: Translation,
    line: int,
    views: AttentionViews | None,
    n_best: int,
    *,
    weights: Tensor | None = None,
    weights_from: str | None = None,
) -> dict[str, Any]:
    """:func:`translation_record` with every digit, plus what the explorer's page draws.

    ``weights`` and ``weights_from``, as for :func:`translation_record`, replace the
    translation's own as the page's first view (``translate --html --layer/--head``).

    ``views`` (None for a blank line) become ``views``: ``cross (L, H, T, S)``
    and, for a Transformer, ``encoder (Le, H, S, S)`` and ``decoder (L, H, T, T)``
    as nested lists, with ``decoder_inputs`` (the labels of the decoder's
    self-attention). ``weight_sums`` holds each weight row's sum (1 up to rounding).
    """
    record = translation_record(
        translation, line, weights=weights, weights_from=weights_from, hypotheses=n_best,
        decimals=None,
    )  # fmt: skip
    record["truncated_from"] = translation.truncated_from
    record["weight_sums"] = [math.fsum(row) for row in record["weights"] or []]
    record["views"] = None
    if views is not None:
        record["views"] = {
            "cross": views.cross.tolist(),
            "encoder": None if views.encoder is None else views.encoder.tolist(),
            "decoder": None if views.decoder is None else views.decoder.tolist(),
            "decoder_inputs": [SPECIAL_TOKENS[BOS], *translation.tgt_pieces[:-1]],
        }
    return record


def _rows(weights: Tensor, decimals: int | None) -> list[list[float]]:
    """``(T, S)`` weights as nested lists, rounded to ``decimals`` unless None."""
    rows = weights.detach().cpu().float().tolist()
    if decimals is None:
        return rows
    return [[round(w, decimals) for w in row] for row in rows]
