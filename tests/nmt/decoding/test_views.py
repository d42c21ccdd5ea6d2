"""Attention views of one translation: forced decoding equals search, layouts, defaults."""

from __future__ import annotations

import pytest
import torch

from attnkit.nmt.decoding import views as views_module
from attnkit.nmt.decoding.greedy import greedy_decode
from attnkit.nmt.decoding.views import attention_views, write_heatmaps
from attnkit.nmt.vocab_ids import EOS
from conftest_nmt import pad, tiny_model, tiny_transformer


@pytest.mark.parametrize("make", [tiny_model, lambda: tiny_transformer(alignment_layer=0)])
def test_views_reproduce_the_search_weights_and_match_the_layout(make):
    model = make()
    src, src_lengths = pad([[5, 6, 7, EOS]])  # as batching makes it
    (hyp,) = greedy_decode(model, src, src_lengths)
    output = [*hyp.tokens, EOS] if hyp.ended else hyp.tokens
    views = attention_views(model, [5, 6, 7], output, "cpu")
    layout = model.attention_layout
    assert views.cross.shape[:2] == (layout.layers, layout.heads)
    assert (views.encoder is None) == (layout.encoder_layers == 0)
    assert views.alignment_layer == layout.alignment_layer
    default = views.cross[views.alignment_layer].mean(dim=0)  # (T, S)
    torch.testing.assert_close(default, hyp.weights, atol=1e-5, rtol=0)


def test_views_restore_the_mode_and_reject_an_empty_output():
    model = tiny_model().train()
    attention_views(model, [5, 6], [7, EOS], "cpu")
    assert model.training
    with pytest.raises(ValueError, match="output_ids is empty"):
        attention_views(model, [5], [], "cpu")
    with pytest.raises(ValueError, match="token ids"):
        attention_views(model, [500], [EOS], "cpu")
    assert model.training


def test_heatmaps_default_to_the_alignment_layer_for_cross_attention(tmp_path, monkeypatch):
    titles = []
    record = lambda *args, title=None, **kwargs: titles.append(title)  # noqa: E731
    monkeypatch.setattr(views_module, "heatmap", record)
    model = tiny_transformer(alignment_layer=0)  # 2 layers: the default is not the last
    views = attention_views(model, [5, 6], [7, EOS], "cpu")
    write_heatmaps(views, ["a", "b", "</s>"], ["c", "</s>"], tmp_path / "s", head=1)
    write_heatmaps(views, ["a", "b", "</s>"], ["c", "</s>"], tmp_path / "s", layer="mean")
    assert titles == [
        "cross-attention, layer 0, head 1",
        "encoder self-attention, layer 1, head 1",
        "decoder causal self-attention, layer 1, head 1",
        "cross-attention, layers averaged, heads averaged",
        "encoder self-attention, layers averaged, heads averaged",
        "decoder causal self-attention, layers averaged, heads averaged",
    ]
