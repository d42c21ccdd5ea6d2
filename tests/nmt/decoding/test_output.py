"""The output layer: every sink of one translate call from one search and one forced pass."""

from __future__ import annotations

import json
import re

import pytest

from attnkit.nmt.data.tokenizer import WordTokenizer
from attnkit.nmt.decoding import search
from attnkit.nmt.models.translator import Translator
from cli_helpers import run
from conftest_nmt import make_run

WORDS = ["ein Mann mit einem Hut", "zwei Hunde laufen schnell", "eine Frau liest ein Buch"]
LINES = ["ein Mann", "", "zwei Hunde laufen", "eine Frau"]


@pytest.fixture(scope="module")
def word_run(tmp_path_factory):
    tok = WordTokenizer.train(WORDS)
    return make_run(tmp_path_factory.mktemp("output"), tok, decode={"beam_size": 3})


@pytest.fixture
def counts(monkeypatch):
    """Calls of the beam search and of forced decoding (``Translator.attention_maps``)."""
    found = {"search": 0, "forced": 0}

    def counted(name, function):
        def wrapper(*args, **kwargs):
            found[name] += 1
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(search, "beam_search_n_best", counted("search", search.beam_search_n_best))
    monkeypatch.setattr(Translator, "attention_maps", counted("forced", Translator.attention_maps))
    return found


def test_every_sink_from_one_search_per_buffer_and_one_forced_pass_per_sentence(
    word_run, counts, capsys, tmp_path
):
    records, plots, page = tmp_path / "a.jsonl", tmp_path / "maps", tmp_path / "t.html"
    status, out, err = run(
        capsys, "translate", str(word_run), *LINES, "--show-attention", "--layer", "0",
        "--attention-json", str(records), "--n-best", "3", "--plot", str(plots),
        "--html", str(page), "--buffer-size", "2",
    )  # fmt: skip
    assert status == 0, err
    assert counts == {"search": 2, "forced": 3}  # 2 buffers; 3 non-blank lines
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert [r["translation"] for r in lines] == out.splitlines()
    assert all(r["hypotheses"][0]["tgt_tokens"] == r["tgt_tokens"] for r in lines if r["weights"])
    assert sorted(p.name for p in plots.iterdir()) == [f"sentence_00{i}.png" for i in (1, 3, 4)]
    blob = re.search(r'id="attnkit-data">(.*?)</script>', page.read_text(encoding="utf-8"), re.S)
    sentences = json.loads(blob.group(1))["sentences"]
    assert [s["translation"] for s in sentences] == out.splitlines()
    assert [s["views"] is None for s in sentences] == [False, True, False, False]
    assert err.count("heatmap: ") == 3 and "html: " in err


def test_no_forced_pass_when_no_sink_needs_one(word_run, counts, capsys, tmp_path):
    records = tmp_path / "a.jsonl"
    argv = ["--show-attention", "--attention-json", str(records), "--n-best", "2"]
    status, _, err = run(capsys, "translate", str(word_run), *LINES, *argv)
    assert status == 0, err
    assert counts == {"search": 1, "forced": 0}


def test_a_chosen_layer_that_does_not_exist_fails_before_any_search(word_run, counts, capsys):
    status, out, err = run(capsys, "translate", str(word_run), "ein", "--layer", "1")
    assert status == 2 and out == "" and "layer 1 does not exist: the model has 1 (0..0)" in err
    assert counts == {"search": 0, "forced": 0}
