"""Where finished translations go: one output layer for every sink of ``attnkit translate``.

:class:`TranslationOutput` takes each buffer of translations (from
:func:`attnkit.nmt.decoding.streaming.translate_buffers`) and writes it to
stdout and to the sinks asked for in :class:`Sinks`: the strongest source
token per output token (``--show-attention``), JSON Lines
(``--attention-json``, :func:`~attnkit.nmt.decoding.records.translation_record`),
heatmaps (``--plot``, :func:`~attnkit.nmt.decoding.views.write_heatmaps`) and
the explorer's records for a page written at the end (``--html``).

Each sentence's attention views (:func:`~attnkit.nmt.decoding.views.attention_views`,
one forced-decoding pass) are computed at most once, and only when a sink
needs another layer or head than search returned, or every one of them. The
n-best hypotheses come from the search itself (``Translation.hypotheses``):
translate with ``n_best=sinks.search_n_best``; where a layer or head is chosen,
each hypothesis past the first gets its own forced pass for its weights.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from torch import Tensor

from ...atomic import STDOUT, make_folder, writing
from ..runs.loaded_run import LoadedRun
from .records import explorer_record, translation_record
from .selection import ALL, MEAN, HeadSelection
from .translate import Translation, alignment_text
from .views import AttentionViews, attention_views, write_heatmaps

__all__ = ["HTML_N_BEST", "Sinks", "TranslationOutput", "clear_old_heatmaps"]

HTML_N_BEST = 5  # hypotheses listed per sentence on an --html page
# What --plot writes: sentence_NNN.png, sentence_NNN.encoder.png, sentence_NNN.decoder.png
_HEATMAP_NAME = re.compile(r"sentence_\d{3,}(\.encoder|\.decoder)?\.png")


@dataclass(frozen=True)
class Sinks:
    """What to write besides one stdout line per translation.

    Attributes:
        show_attention: write each output token's most attended source token.
        attention_out: the file for those lines (None: stderr).
        json: ``--attention-json`` file, or None.
        n_best: hypotheses per JSON record (0: no ``hypotheses`` key).
        plot: heatmap folder, or None.
        page: called at the end with every sentence's explorer record and
            returning the file it wrote (``--html``), or None.
        selection: the layer/head shown; unset shows search's own view.
    """

    show_attention: bool = False
    attention_out: str | None = None
    json: str | None = None
    n_best: int = 0
    plot: Path | None = None
    page: Callable[[list[dict[str, Any]]], Path] | None = None
    selection: HeadSelection = HeadSelection()

    @property
    def shows_attention(self) -> bool:
        """Whether any sink writes attention weights (else only the text is used)."""
        files = (self.json, self.plot, self.page)
        return self.show_attention or any(f is not None for f in files)

    @property
    def search_n_best(self) -> int:
        """How many hypotheses per sentence the search must keep for these sinks."""
        return max(self.n_best, HTML_N_BEST if self.page is not None else 0)


class TranslationOutput(contextlib.AbstractContextManager):
    """Writes buffers of translations to stdout and the :class:`Sinks` (a context manager
    that closes the files it opened; :meth:`finish` writes the page).

    Raises:
        ValueError: the selection's layer or head does not exist in the model,
            or a file or the heatmap folder cannot be opened (``cannot write ...``).
        WriteError: writing to a file failed later (e.g. the disk is full); it
            names the file.
    """

    def __init__(
        self,
        run: LoadedRun,
        sinks: Sinks,
        *,
        stdout: TextIO | None = None,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        sinks.selection.check(run.model.attention_layout)
        self.run, self.sinks = run, sinks
        self.stdout = stdout or sys.stdout
        self.echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))
        self._files = contextlib.ExitStack()
        self.alignments = None
        if sinks.show_attention:
            self.alignments = _open(sinks.attention_out, self._files) or sys.stderr
        self.json = _open(sinks.json, self._files)
        if sinks.plot is not None:
            clear_old_heatmaps(sinks.plot)
        self.records: list[dict[str, Any]] = []  # explorer records for the page

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self._files.close()
            return
        with contextlib.suppress(OSError):  # the error being raised says it already
            self._files.close()

    def write(self, first: int, translations: Sequence[Translation]) -> None:
        """Write one buffer's translations (input lines ``first``, ``first + 1``, ...).

        A reader of stdout that went away (``| head -1``) ends the command, but only after
        this buffer's lines are in the alignment and JSON files: translated, they were
        lost before.
        """
        reader_gone = None
        try:
            with writing(STDOUT):
                for t in translations:
                    print(t.text, file=self.stdout)
                self.stdout.flush()
        except BrokenPipeError as err:
            reader_gone = err
        numbered = list(enumerate(translations, start=first))
        views = [self._views(t) for t in translations]
        chosen = [self._chosen(v) for v in views]
        if self.alignments is not None:
            with writing(self.sinks.attention_out or "<stderr>"):
                self._write_alignments(numbered, chosen)
        if self.json is not None:
            with writing(self.sinks.json):
                self._write_json(numbered, chosen)
        if reader_gone is not None:
            raise reader_gone
        for (number, t), v, c in zip(numbered, views, chosen, strict=True):
            if self.sinks.plot is not None and v is not None:
                self._plot(t, v, number)
            if self.sinks.page is not None:
                named = None if c is None else self._chosen_caption()
                record = explorer_record(t, number, v, HTML_N_BEST, weights=c, weights_from=named)
                self.records.append(record)

    def _write_alignments(self, numbered: list, chosen: list) -> None:
        for (number, t), weights in zip(numbered, chosen, strict=True):
            if t.weights is not None:
                print(f"line {number}: {t.text}", file=self.alignments)
                print(alignment_text(t, weights), file=self.alignments)
        self.alignments.flush()

    def _write_json(self, numbered: list, chosen: list) -> None:
        hypotheses = self.sinks.n_best or None
        for (number, t), weights in zip(numbered, chosen, strict=True):
            record = translation_record(
                t,
                number,
                weights=weights,
                weights_from=None if weights is None else self._chosen_caption(),
                hypotheses=hypotheses,
                hypothesis_weights=self._hypothesis_weights(t, weights),
            )
            self.json.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.json.flush()

    def _hypothesis_weights(self, t: Translation, chosen: Tensor | None) -> list[Tensor] | None:
        """The chosen layer/head of each n-best hypothesis written (the first is ``t``
        itself; one forced pass for each other); None: search's own weights."""
        if chosen is None or not self.sinks.n_best:
            return None
        others = t.hypotheses[1 : self.sinks.n_best]
        device = self.run.device
        views = (attention_views(self.run.model, h.src_ids, h.output_ids, device) for h in others)
        return [chosen, *(self._chosen(v) for v in views)]

    def finish(self) -> None:
        """Write what needs every translation: the ``--html`` page."""
        if self.sinks.page is not None:
            self.echo(f"html: {self.sinks.page(self.records)}")

    def _views(self, t: Translation) -> AttentionViews | None:
        """Every layer and head of ``t`` when a sink needs them (one forced pass), else None."""
        needed = self.sinks.plot is not None or self.sinks.page is not None
        text_sinks = self.alignments is not None or self.json is not None
        needed = needed or (text_sinks and not self.sinks.selection.is_default)
        if t.weights is None or not needed:
            return None
        return attention_views(self.run.model, t.src_ids, t.output_ids, self.run.device)

    def _chosen(self, views: AttentionViews | None) -> Tensor | None:
        """The chosen layer/head's cross-attention ``(T, S)``; None: the translation's own."""
        if views is None or self.sinks.selection.is_default:
            return None
        return self.sinks.selection.pick(views.cross, views.alignment_layer)

    def _chosen_caption(self) -> str:
        """``layer 1, head 2``: the chosen layer/head's cross-attention, as titles name it;
        ``--head all`` writes one matrix a line, the heads' mean, and is named so."""
        layout = self.run.model.attention_layout
        selection = self.sinks.selection
        if selection.head == ALL:
            selection = HeadSelection(selection.layer, MEAN)
        return selection.caption(layout.layers, layout.alignment_layer)

    def _plot(self, t: Translation, views: AttentionViews, number: int) -> None:
        selection = self.sinks.selection
        own = t.weights if selection.is_default else None
        stem = self.sinks.plot / f"sentence_{number:03d}"
        # plot.heatmap escapes the labels and shortens the title itself
        with writing(stem.with_suffix(".png")):
            paths = write_heatmaps(
                views,
                t.src_pieces,
                t.tgt_pieces,
                stem,
                layer=selection.layer,
                head=selection.head,
                title=t.source,
                cross=own,
                cross_from=t.weights_from,
            )
        for path in paths:
            self.echo(f"heatmap: {path}")


def _open(path: str | None, files: contextlib.ExitStack) -> TextIO | None:
    """``path`` opened for writing (closed with ``files``), or None for no path."""
    if path is None:
        return None
    try:
        handle = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed with files)
    except OSError as err:
        raise ValueError(f"cannot write {path}: {err.strerror}") from None
    files.callback(_close, handle, path)
    return handle


def _close(handle: TextIO, path: str) -> None:
    with writing(path):
        handle.close()


def clear_old_heatmaps(folder: Path) -> None:
    """Delete the heatmaps an earlier ``translate --plot`` left in ``folder`` (only those).

    Raises:
        ValueError: the folder cannot be made or read (``cannot write heatmaps to ...``).
    """
    try:
        make_folder(folder)
        for path in folder.iterdir():
            if _HEATMAP_NAME.fullmatch(path.name) and path.is_file():
                path.unlink()
    except OSError as err:
        raise ValueError(f"cannot write heatmaps to {folder}: {err.strerror}") from None
