"""The output layer: every sink of one translate call from one search and one forced pass
(per sentence, and per n-best hypothesis where a layer or head is chosen)."""

from __future__ import annotations

import json
import re

import pytest
import torch

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
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    # 2 buffers; a pass per non-blank line, and per n-best hypothesis past the first (--layer)
    assert counts == {"search": 2, "forced": sum(len(r["hypotheses"]) for r in lines)}
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


@pytest.fixture(scope="module")
def transformer_run(tmp_path_factory):
    tok = WordTokenizer.train(WORDS)
    model = {"arch": "transformer", "d_model": 16, "heads": 2, "ff_dim": 32}
    model |= {"encoder_layers": 2, "decoder_layers": 2, "dropout": 0.0, "attention_dropout": 0.0}
    folder = tmp_path_factory.mktemp("output_transformer")
    return make_run(folder, tok, model=model, decode={"beam_size": 3})


@pytest.mark.parametrize(
    ("layer", "head", "caption"),
    [
        ("0", "1", "layer 0, head 1"),
        ("0", "mean", "layer 0, heads averaged"),
        ("0", "all", "layer 0, heads averaged"),  # one matrix a line: all heads' mean
    ],
)
def test_n_best_hypotheses_show_the_chosen_layer_and_head(
    transformer_run, capsys, tmp_path, layer, head, caption
):
    from attnkit.nmt.decoding.translate import EOS_LABEL
    from attnkit.nmt.decoding.views import attention_views
    from attnkit.nmt.runs.loaded_run import load_run
    from attnkit.nmt.vocab_ids import EOS

    records = tmp_path / "a.jsonl"
    argv = ["--attention-json", str(records), "--n-best", "3", "--layer", layer, "--head", head]
    status, _, err = run(capsys, "translate", str(transformer_run), "ein Mann mit", *argv)
    assert status == 0, err
    (record,) = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(record["hypotheses"]) == 3
    assert record["weights_from"] == caption
    assert record["hypotheses"][0]["weights"] == record["weights"]
    loaded = load_run(transformer_run)
    src_ids = loaded.src_tok.encode("ein Mann mit")
    for hypothesis in record["hypotheses"]:
        *words, last = hypothesis["tgt_tokens"]
        ended = [EOS] if last == EOS_LABEL else loaded.tgt_tok.encode(last)
        output_ids = loaded.tgt_tok.encode(" ".join(words)) + ended
        views = attention_views(loaded.model, src_ids, output_ids, "cpu")
        cross = views.cross[int(layer)]  # (H, T, S)
        want = cross[int(head)] if head.isdigit() else cross.mean(0)
        got = torch.tensor(hypothesis["weights"])
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)  # rounded to 6 decimals


def test_an_html_page_opens_on_the_chosen_layer_and_head(transformer_run, tmp_path):
    from attnkit.nmt.decoding.output import Sinks, TranslationOutput
    from attnkit.nmt.decoding.selection import HeadSelection
    from attnkit.nmt.decoding.streaming import translate_buffers
    from attnkit.nmt.decoding.views import attention_views
    from attnkit.nmt.runs.loaded_run import load_run

    loaded, pages = load_run(transformer_run), []
    sinks = Sinks(
        page=lambda records: pages.append(records) or tmp_path, selection=HeadSelection(0, 1)
    )
    with TranslationOutput(loaded, sinks, stdout=open(tmp_path / "out", "w")) as output:  # noqa: SIM115
        for first, translations in translate_buffers(loaded, [["ein Mann mit"]], n_best=5):
            output.write(first, translations)
        output.finish()
    (record,) = pages[0]
    (t,) = translations
    want = attention_views(loaded.model, t.src_ids, t.output_ids, "cpu").cross[0, 1]
    torch.testing.assert_close(torch.tensor(record["weights"]), want)
    assert record["weights_from"] == "layer 0, head 1"  # the page's view menu names it


class _GoneReader:
    """A stdout whose reader left (``| head -1``): every flush is a broken pipe."""

    def write(self, text):
        return len(text)

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_reader_that_leaves_stdout_still_gets_the_buffer_into_the_json_file(word_run, tmp_path):
    from attnkit.nmt.decoding.output import Sinks, TranslationOutput
    from attnkit.nmt.decoding.translate import translate_lines
    from attnkit.nmt.runs.loaded_run import load_run

    run = load_run(word_run)
    translations = translate_lines(run, LINES)
    records = tmp_path / "a.jsonl"
    output = TranslationOutput(run, Sinks(json=str(records)), stdout=_GoneReader())
    with pytest.raises(BrokenPipeError), output:  # the files close on the way out
        output.write(1, translations)
    written = [json.loads(line)["translation"] for line in records.read_text().splitlines()]
    assert written == [t.text for t in translations]
