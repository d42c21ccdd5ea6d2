"""JSON payloads of the explorer: one translated sentence with every attention view.

A sentence's payload holds the translation of
:func:`attnkit.nmt.decoding.translate.translate_lines` (its alignment ``weights``
``(T, S)`` unchanged, so a script reading the API gets the same numbers as the
library), the beam's other hypotheses (:func:`attnkit.nmt.decoding.streaming.n_best`,
with the run's decode settings) and every layer and head
(:func:`attnkit.nmt.decoding.views.attention_views`): ``cross (L, H, T, S)``, and for a
Transformer ``encoder (Le, H, S, S)`` and ``decoder (L, H, T, T)`` (0 above the
diagonal). ``S`` counts the source tokens with ``</s>``; ``T`` the output steps
with ``</s>`` when the translation ended.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..nmt.decoding.streaming import n_best as n_best_hypotheses
from ..nmt.decoding.translate import Translation
from ..nmt.decoding.views import attention_views
from ..nmt.runs.loaded_run import LoadedRun
from ..nmt.vocab_ids import BOS, EOS, SPECIAL_TOKENS

__all__ = ["run_info", "sentence_payload"]


def run_info(name: str, run: LoadedRun) -> dict[str, Any]:
    """What the page needs to know of a run before translating: its name and shape."""
    model = run.config.model
    return {
        "name": name,
        "arch": model.arch,
        "src_lang": run.config.data.src_lang,
        "tgt_lang": run.config.data.tgt_lang,
        "beam_size": run.config.decode.beam_size,
    }


def sentence_payload(
    run: LoadedRun, translation: Translation, *, beam_size: int, n_best: int
) -> dict[str, Any]:
    """One line's translation, its n-best list and its attention views, ready for JSON."""
    payload: dict[str, Any] = {
        "source": translation.source,
        "text": translation.text,
        "score": translation.score,
        "src_pieces": translation.src_pieces,
        "tgt_pieces": translation.tgt_pieces,
        "truncated_from": translation.truncated_from,
        "weights": None,
        "weight_sums": [],
        "hypotheses": [],
        "views": None,
    }
    if translation.weights is None:  # a blank line
        return payload
    payload["weights"] = translation.weights.tolist()  # (T, S)
    payload["weight_sums"] = [math.fsum(row) for row in payload["weights"]]
    payload["hypotheses"] = _hypotheses(run, translation, beam_size, n_best)
    views = attention_views(run.model, translation.src_ids, translation.output_ids, run.device)
    payload["views"] = {
        "cross": views.cross.tolist(),
        "encoder": None if views.encoder is None else views.encoder.tolist(),
        "decoder": None if views.decoder is None else views.decoder.tolist(),
        "decoder_inputs": [SPECIAL_TOKENS[BOS], *translation.tgt_pieces[:-1]],
    }
    return payload


def _hypotheses(
    run: LoadedRun, translation: Translation, beam_size: int, n_best_count: int
) -> list[dict[str, Any]]:
    """The beam's finished hypotheses, best first (greedy: the translation alone)."""
    best = {"text": translation.text, "score": translation.score, "pieces": translation.tgt_pieces}
    if beam_size == 1:
        return [best]
    with torch.no_grad():
        (found,) = n_best_hypotheses(run, [translation], n_best_count, beam_size)
    eos = [SPECIAL_TOKENS[EOS]]
    return [
        {
            "text": run.tgt_tok.decode(h.tokens),
            "score": float(h.score),
            "pieces": run.tgt_tok.pieces(h.tokens) + (eos if h.ended else []),
        }
        for h in found
    ]
