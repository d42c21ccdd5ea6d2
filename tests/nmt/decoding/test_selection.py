"""The one layer/head selector: indices, means, 'all', defaults, range errors."""

import pytest
import torch

from attnkit.nmt.decoding.selection import HeadSelection
from attnkit.nmt.models.translator import AttentionLayout


def test_pick_selects_or_averages_layers_and_heads_on_views_and_batches():
    cross = torch.rand(2, 3, 4, 5, 6)  # (B, L, H, T, S)
    torch.testing.assert_close(HeadSelection(-1, 2).pick(cross), cross[:, 2, 2])
    torch.testing.assert_close(HeadSelection("mean", "mean").pick(cross), cross.mean(dim=(1, 2)))
    torch.testing.assert_close(HeadSelection(0, "all").pick(cross), cross[:, 0].mean(dim=1))
    torch.testing.assert_close(HeadSelection().pick(cross[0], 1), cross[0, 1].mean(dim=0))
    torch.testing.assert_close(HeadSelection(head=3).pick(cross[0]), cross[0, 2, 3])


def test_out_of_range_names_the_range():
    cross = torch.rand(3, 4, 5, 6)  # (L, H, T, S)
    with pytest.raises(ValueError, match=r"layer 3 does not exist: the model has 3 \(0..2\)"):
        HeadSelection(3).pick(cross)
    with pytest.raises(ValueError, match=r"head -5 does not exist: the layer has 4 \(0..3\)"):
        HeadSelection(0, -5).pick(cross)


def test_check_reads_the_layout_and_the_encoder_only_when_asked():
    layout = AttentionLayout(layers=4, heads=2, encoder_layers=2, decoder_self_attention=True)
    HeadSelection(1, 1).check(layout)
    HeadSelection(3).check(layout, encoder=False)
    with pytest.raises(ValueError, match="layer 3 does not exist: the model has 2"):
        HeadSelection(3).check(layout)
    with pytest.raises(ValueError, match="head 2 does not exist"):
        HeadSelection(head=2).check(layout)


def test_captions_and_default():
    assert HeadSelection().is_default and not HeadSelection(head="mean").is_default
    assert HeadSelection().caption(2, 0) == "layer 0, heads averaged"
    assert HeadSelection(-1, 1).caption(2) == "layer 1, head 1"
    assert HeadSelection("mean", "all").caption(2) == "layers averaged, all heads"


def test_a_tuple_of_heads_is_their_mean():
    cross = torch.rand(2, 3, 4, 5, 6)  # (B, L, H, T, S)
    both = HeadSelection(1, (0, 3))
    torch.testing.assert_close(both.pick(cross), (cross[:, 1, 0] + cross[:, 1, 3]) / 2)
    assert both.caption(3) == "layer 1, heads 0, 3 averaged"
    with pytest.raises(ValueError, match=r"head 4 does not exist: the layer has 4 \(0..3\)"):
        HeadSelection(0, (1, 4)).pick(cross)
