"""The self-contained HTML file of translations (``attnkit.serve.export``)."""

from __future__ import annotations

import json
import re

import pytest

from attnkit.nmt.decoding.translate import translate_lines
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.serve import write_html
from attnkit.serve.payload import sentence_payload
from serve_helpers import make_runs

LINES = ['ein Hund </script><script>window.__pwned = 1</script> "x"', "", "ein Mann geht"]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    base = tmp_path_factory.mktemp("export")
    run = load_run(make_runs(base)["transformer"])
    translations = translate_lines(run, LINES, beam_size=2, n_best=5)
    records = [sentence_payload(run, t, i, n_best=5) for i, t in enumerate(translations, 1)]
    about = "run <toy> (runs/x), de → en"
    return write_html(base / "translations.html", records, beam_size=2, about=about), translations


def test_the_file_embeds_every_sentence_with_the_library_weights(page):
    path, translations = page
    text = path.read_text(encoding="utf-8")
    blob = re.search(r'id="attnkit-data">(.*?)</script>', text, re.S).group(1)
    data = json.loads(blob)
    assert [s["source"] for s in data["sentences"]] == LINES
    assert data["sentences"][2]["weights"] == translations[2].weights.tolist()
    assert data["sentences"][1]["weights"] is None


def test_the_file_needs_no_network_and_data_cannot_close_its_script(page):
    text = page[0].read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text and "src=" not in text
    assert text.count("</script>") == 2  # the data's own "</script>" is escaped
    assert "window.__pwned" in text and "<script>window" not in text


def test_the_page_names_the_run_the_direction_and_the_search(page):
    text = page[0].read_text(encoding="utf-8")
    about = re.search(r'<p id="page-about">(.*?)</p>', text).group(1)
    assert about == "run &lt;toy&gt; (runs/x), de → en, beam 2"
