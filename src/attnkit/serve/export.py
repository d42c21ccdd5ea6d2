"""One self-contained HTML file of translations: the explorer's page without a server.

:func:`write_html` inlines the page's script and style and the sentences'
records (:func:`attnkit.nmt.decoding.records.explorer_record`, every view), so the
file opens from disk with no server and no network; hovering, the heatmap,
the layer/head picker and the step explanation work as on ``attnkit serve``.
Meant for ``attnkit translate ... --html FILE``.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..atomic import atomic_write_bytes

if TYPE_CHECKING:
    from ..nmt.config import DataConfig

__all__ = ["html_page", "text_languages", "write_html"]

# Inside <script> a "</" could end the element early: JSON lets us escape <, > and &.
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def text_languages(data: DataConfig) -> dict[str, str] | None:
    """The languages of a run's source and target text, ``{"source": "de", "target":
    "en"}``, for the page's ``lang`` attributes (a screen reader reads each sentence with
    its language's voice); None for a toy task, whose symbols are no language."""
    return None if data.toy is not None else {"source": data.src_lang, "target": data.tgt_lang}


def html_page(
    records: Sequence[dict[str, Any]],
    *,
    beam_size: int,
    about: str | None = None,
    languages: dict[str, str] | None = None,
) -> str:
    """The page's text for the sentences' explorer records (translated with ``beam_size``).

    ``about`` (e.g. ``run quick (runs/quick), de → en``) heads the page with
    the beam size; it is escaped, so any text is safe. ``languages``
    (:func:`text_languages`) marks the sentences' languages.
    """
    data = {"beam": beam_size, "sentences": list(records), "warnings": [], "languages": languages}
    search = "greedy search" if beam_size == 1 else f"beam {beam_size}"
    heading = html.escape(", ".join(x for x in (about, search) if x))
    static = resources.files(__package__).joinpath("static")
    script = static.joinpath("app.js").read_text(encoding="utf-8")
    style = static.joinpath("app.css").read_text(encoding="utf-8")
    blob = json.dumps(data, ensure_ascii=False).translate(_SCRIPT_SAFE)
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        "<title>attnkit translations</title>\n<style>\n" + style + "</style>\n</head>\n"
        '<body>\n<header><h1>attnkit translations</h1><p id="page-about">'
        + heading
        + "</p></header>\n"
        '<main>\n<div id="results"></div>\n</main>\n'
        '<script type="application/json" id="attnkit-data">' + blob + "</script>\n"
        "<script>\n" + script + "</script>\n</body>\n</html>\n"
    )


def write_html(
    path: str | Path,
    records: Sequence[dict[str, Any]],
    *,
    beam_size: int,
    about: str | None = None,
    languages: dict[str, str] | None = None,
) -> Path:
    """Write :func:`html_page` to ``path`` atomically (a temporary file, then rename)."""
    path = Path(path)
    text = html_page(records, beam_size=beam_size, about=about, languages=languages)
    atomic_write_bytes(path, text.encode("utf-8"))
    return path
