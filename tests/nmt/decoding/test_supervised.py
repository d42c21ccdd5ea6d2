"""A guided-alignment run's translations carry the attention it was trained on: its
supervised heads' mean, at its shift, in its pass (full context or causal)."""

import json

import pytest
import torch

from attnkit.nmt.data.tokenizer import WordTokenizer
from attnkit.nmt.decoding.records import translation_record
from attnkit.nmt.decoding.supervised import SupervisedHeads, supervised_weights
from attnkit.nmt.decoding.translate import translate_lines
from attnkit.nmt.decoding.views import attention_views
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.nmt.vocab_ids import BOS, EOS
from conftest_nmt import make_run

LINES = ["a b c d", "d c b", "", "a a b c d d c"]
TRANSFORMER = {
    "arch": "transformer", "d_model": 16, "heads": 4, "encoder_layers": 2,
    "decoder_layers": 3, "ff_dim": 32, "dropout": 0.0, "attention_dropout": 0.0,
}  # fmt: skip


def _run(tmp_path, guided=None, model=TRANSFORMER):
    tok = WordTokenizer.train(LINES)
    tmp_path.mkdir(exist_ok=True)
    train = {} if guided is None else {"guided_alignment": {"file": "x.align", **guided}}
    return load_run(make_run(tmp_path, tok, model=model, train=train))


def _expected(run, heads: list[int], layer: int, shift: int, full_context: bool, t) -> torch.Tensor:
    """The supervised rows by hand: one forced pass over ``<s>`` and the output without
    ``</s>``, rows ``t + shift`` (the last row where that is past the end)."""
    words = t.output_ids[:-1] if t.output_ids[-1] == EOS else t.output_ids
    src = torch.tensor([[*t.src_ids, EOS]])
    tgt_in = torch.tensor([[BOS, *words]])
    with torch.no_grad():
        maps = run.model.eval().attention_maps(
            src, torch.tensor([src.shape[1]]), tgt_in, full_context=full_context
        )
    mean = maps.cross[0, layer, heads].mean(dim=0)  # (R, S)
    rows = [min(i + shift, tgt_in.shape[1] - 1) for i in range(len(t.output_ids))]
    return mean[rows]


@pytest.mark.parametrize(
    ("guided", "layer", "heads", "shift", "full_context"),
    [
        ({}, 1, [0], 1, False),  # Garg et al.'s default: the penultimate layer, head 0
        ({"layer": 0, "heads": [1, 3], "shift": 0}, 0, [1, 3], 0, False),
        ({"heads": "all", "full_context": True}, 1, [0, 1, 2, 3], 1, True),
    ],
)
def test_translations_carry_the_supervised_heads(
    tmp_path, guided, layer, heads, shift, full_context
):
    run = _run(tmp_path, guided)
    results = translate_lines(run, LINES, beam_size=3, n_best=3)
    assert results[2].weights is None  # a blank line has no attention still
    assert translation_record(results[2], 3)["weights_from"] is None
    assert translation_record(results[0], 1)["weights_from"].startswith("supervised heads: ")
    assert max(len(t.output_ids) for r in results for t in r.hypotheses) >= 4
    for r in (results[0], results[1], results[3]):
        assert r.hypotheses[0].weights is r.weights
        for t in r.hypotheses:
            want = _expected(run, heads, layer, shift, full_context, t)
            assert t.weights.shape == (len(t.output_ids), len(t.src_pieces))
            torch.testing.assert_close(t.weights, want, atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(t.weights.sum(-1), torch.ones(len(t.output_ids)))


def test_an_unguided_run_keeps_the_search_view(tmp_path):
    run = _run(tmp_path)
    assert SupervisedHeads.of_run(run.config, run.model.attention_layout) is None
    t = translate_lines(run, LINES[:1], beam_size=1)[0]
    assert translation_record(t, 1)["weights_from"] == "search"
    views = attention_views(run.model, t.src_ids, t.output_ids, "cpu")
    search = views.cross[views.alignment_layer].mean(dim=0)  # the last layer, every head
    torch.testing.assert_close(t.weights, search, atol=1e-6, rtol=1e-5)
    guided = _run(tmp_path / "guided", {"layer": 0})
    assert not torch.allclose(translate_lines(guided, LINES[:1], beam_size=1)[0].weights, search)


def test_shift_0_on_the_alignment_layer_is_the_search_view(tmp_path):
    """Reading every head of the last layer at the predicting step is what search returns:
    the forced pass and the rows it takes line up with the search's own steps."""
    run = _run(tmp_path, {"layer": -1, "heads": "all", "shift": 0})
    heads = SupervisedHeads.of_run(run.config, run.model.attention_layout)
    assert heads == SupervisedHeads(layer=2, heads=(0, 1, 2, 3), shift=0, full_context=False)
    assert heads.caption() == "layer 2, heads' mean 0, 1, 2, 3, shift 0"
    t = translate_lines(run, LINES[3:], beam_size=1)[0]
    views = attention_views(run.model, t.src_ids, t.output_ids, "cpu")
    torch.testing.assert_close(t.weights, views.cross[2].mean(dim=0), atol=1e-6, rtol=1e-5)


def test_an_rnn_run_reads_its_one_attention(tmp_path):
    run = _run(tmp_path, {"shift": 1}, model={"embed_dim": 8, "hidden_size": 8})
    heads = SupervisedHeads.of_run(run.config, run.model.attention_layout)
    src, output = [5, 6, 7], [7, 6, 5, 5, EOS]
    (w,) = supervised_weights(run.model, heads, [src], [output])
    own = attention_views(run.model, src, output, "cpu").cross[0, 0]  # (T, S), search's rows
    # row t is the step that read y_t: the search's row t + 1; </s> keeps its own row
    torch.testing.assert_close(w[:-1], own[1:], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(w[-1], own[-1], atol=1e-6, rtol=1e-5)
    assert not torch.allclose(w, own)


def test_an_output_cut_at_the_position_table_reads_its_last_row(tmp_path):
    run = _run(tmp_path, {"layer": 0}, model={**TRANSFORMER, "max_positions": 6})
    heads = SupervisedHeads.of_run(run.config, run.model.attention_layout)
    output = [5, 6, 7, 5, 6, 7]  # six steps, no </s>: the inputs <s> y_0 .. y_4 fill the table
    (w,) = supervised_weights(run.model, heads, [[5, 6]], [output])
    assert w.shape == (6, 3)
    torch.testing.assert_close(w[-1], w[-2])  # y_5 was never read: its predicting row
    with pytest.raises(ValueError, match="output_ids holds an empty output"):
        supervised_weights(run.model, heads, [[5]], [[]])
    with pytest.raises(ValueError, match="src_ids has 2 sentences but output_ids has 1"):
        supervised_weights(run.model, heads, [[5], [6]], [[EOS]])


def test_translate_plots_and_writes_the_supervised_view(tmp_path, monkeypatch, capsys):
    from attnkit.cli import main

    run = _run(tmp_path / "run", {"layer": 0, "heads": [2]})
    pictures = _drawn_titles(monkeypatch)
    json_path = tmp_path / "a.jsonl"
    argv = [str(run.folder), LINES[3], "--beam", "1", "--plot", str(tmp_path / "maps"),
            "--attention-json", str(json_path)]  # fmt: skip
    assert main(["translate", *argv]) == 0
    (t,) = translate_lines(run, LINES[3:], beam_size=1)
    title, shown = pictures[0]
    assert title.split("\n")[1:] == [
        "cross-attention, the model's alignment view,",
        "supervised heads: layer 0, head 2, shift 1",
    ]
    torch.testing.assert_close(shown, t.weights)
    record = json.loads(json_path.read_text())
    torch.testing.assert_close(torch.tensor(record["weights"]), t.weights, atol=1e-6, rtol=0)
    assert record["weights_from"] == "supervised heads: layer 0, head 2, shift 1"
    assert main(["translate", *argv, "--layer", "1", "--head", "3"]) == 0
    assert json.loads(json_path.read_text())["weights_from"] == "layer 1, head 3"


def _drawn_titles(monkeypatch) -> list[tuple[str, torch.Tensor]]:
    """Every cross-attention heatmap drawn from now on: its title as the picture shows it
    (each line cut to ``TITLE_MAX`` characters) and its weights."""
    from attnkit.nmt.decoding import views as views_module

    pictures, draw = [], views_module.heatmap

    def record(weights, *args, **kwargs):
        figure = draw(weights, *args, **kwargs)
        pictures.append((figure.axes[0].get_title(), weights))
        return figure

    monkeypatch.setattr(views_module, "heatmap", record)
    return pictures


def test_a_heatmap_title_names_every_supervised_head(tmp_path, monkeypatch):
    """A title line is cut at 70 characters: a long caption is broken after commas instead."""
    from attnkit.nmt.decoding.views import AttentionViews, write_heatmaps

    caption = SupervisedHeads(0, (0, 1, 2, 3, 4, 5), 0, True).caption()
    pictures = _drawn_titles(monkeypatch)
    weights = torch.full((2, 3), 1 / 3)
    views = AttentionViews(weights.expand(1, 6, 2, 3), None, None)
    stem = tmp_path / "sentence_001"
    shown = f"supervised heads: {caption}"
    write_heatmaps(views, ["a", "b", "</s>"], ["x", "</s>"], stem, title="a b", cross=weights,
                   cross_from=shown)  # fmt: skip
    assert pictures[0][0].split("\n") == [
        "a b",
        "cross-attention, the model's alignment view,",
        "supervised heads: layer 0, heads' mean 0, 1, 2, 3, 4, 5, shift 0,",
        "full context",
    ]


def test_text_alone_skips_the_forced_pass(tmp_path, monkeypatch, capsys):
    from attnkit.cli import main
    from attnkit.nmt.decoding import translate as translate_module

    run = _run(tmp_path / "run", {"layer": 0})
    passes = []
    real = translate_module.supervised_weights
    counted = lambda *args, **kwargs: passes.append(1) or real(*args, **kwargs)  # noqa: E731
    monkeypatch.setattr(translate_module, "supervised_weights", counted)
    (tmp_path / "src").write_text(LINES[0] + "\n")
    (tmp_path / "ref").write_text("a b\n")
    assert main(["translate", str(run.folder), LINES[0]]) == 0
    assert main(["evaluate", str(run.folder), "--src", str(tmp_path / "src"),
                 "--ref", str(tmp_path / "ref")]) == 0  # fmt: skip
    assert passes == []  # the text alone: search's weights are never looked at
    assert main(["translate", str(run.folder), LINES[0], "--show-attention"]) == 0
    assert passes == [1]
