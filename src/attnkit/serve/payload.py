"""JSON payloads of the explorer: one translated sentence with every attention view.

A sentence's payload is :func:`attnkit.nmt.decoding.records.explorer_record`:
the library's one record of a translation (``translation``, ``src_tokens``,
``tgt_tokens``, its alignment ``weights`` ``(T, S)`` unchanged, so a script
reading the API gets the same numbers as the library, and the search's best
``hypotheses``) plus every layer and head
(:func:`attnkit.nmt.decoding.views.attention_views`, one forced pass):
``cross (L, H, T, S)``, and for a Transformer ``encoder (Le, H, S, S)`` and
``decoder (L, H, T, T)`` (0 above the diagonal). ``S`` counts the source
tokens with ``</s>``; ``T`` the output steps with ``</s>`` when the translation
ended.
"""

from __future__ import annotations

from typing import Any

from ..nmt.decoding.records import explorer_record
from ..nmt.decoding.translate import Translation
from ..nmt.decoding.views import attention_views
from ..nmt.runs.loaded_run import LoadedRun

__all__ = ["run_info", "sentence_payload"]


def run_info(name: str, run: LoadedRun) -> dict[str, Any]:
    """What the page needs to know of a run before translating: its name and shape."""
    model = run.config.model
    return {
        "name": name,
        "arch": model.arch,
        "src_lang": run.config.data.src_lang,
        "tgt_lang": run.config.data.tgt_lang,
        "direction": run.config.data.direction,
        "beam_size": run.config.decode.beam_size,
    }


def sentence_payload(
    run: LoadedRun, translation: Translation, line: int, *, n_best: int
) -> dict[str, Any]:
    """Input line ``line``'s translation (from ``translate_lines(..., n_best=n_best)``),
    its ``n_best`` hypotheses and its attention views, ready for JSON."""
    views = None
    if translation.weights is not None:  # a blank line has none
        views = attention_views(run.model, translation.src_ids, translation.output_ids, run.device)
    return explorer_record(translation, line, views, n_best)
