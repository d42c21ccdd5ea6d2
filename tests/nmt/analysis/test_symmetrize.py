"""Symmetrisation of two directions' links on hand-made sets with known results."""

import pytest
import torch

from attnkit.nmt.analysis.symmetrize import (
    SYMMETRIZATIONS,
    agreement_links,
    symmetrize,
    symmetrize_all,
)

# 4 x 4 pairs. Forward (source->target run): 0-0, 1-1 and a stray 0-3; reverse: 0-0, 3-3.
FORWARD = {(0, 0), (1, 1), (0, 3)}
REVERSE = {(0, 0), (3, 3)}


def test_intersection_and_union():
    assert symmetrize(FORWARD, REVERSE, "intersection") == {(0, 0)}
    assert symmetrize(FORWARD, REVERSE, "union") == {(0, 0), (1, 1), (0, 3), (3, 3)}


def test_grow_diag_final_and_on_a_hand_made_pair():
    # grow-diag: 1-1 is a diagonal neighbour of 0-0 with both words unaligned -> added;
    # 0-3 and 3-3 neighbour no accepted link. final-and: 0-3 is refused (source word 0 is
    # aligned), 3-3 is taken (both words unaligned).
    assert symmetrize(FORWARD, REVERSE, "grow-diag") == {(0, 0), (1, 1)}
    assert symmetrize(FORWARD, REVERSE, "grow-diag-final-and") == {(0, 0), (1, 1), (3, 3)}
    # final (without -and) takes 0-3 too: its target word 3 was unaligned when it came
    assert symmetrize(FORWARD, REVERSE, "grow-diag-final") == {(0, 0), (1, 1), (0, 3), (3, 3)}


def test_grow_diag_grows_along_neighbours_of_the_intersection():
    # Koehn et al. 2003's picture: a one-to-many word whose extra links neighbour the
    # intersection. Intersection 0-0, 1-1, 2-2; union adds 2-3 (neighbour of 2-2, target 3
    # unaligned: grown), 3-1 (neighbour of 2-2 diagonally, source 3 unaligned: grown) and 0-2
    # (neighbour of 1-1 diagonally, but both 0 and 2 are aligned by then: not grown, and not
    # taken by final-and either).
    forward = {(0, 0), (1, 1), (2, 2), (2, 3), (0, 2)}
    reverse = {(0, 0), (1, 1), (2, 2), (3, 1)}
    assert symmetrize(forward, reverse, "grow-diag") == {(0, 0), (1, 1), (2, 2), (2, 3), (3, 1)}
    assert symmetrize(forward, reverse, "grow-diag-final-and") == {
        (0, 0), (1, 1), (2, 2), (2, 3), (3, 1)
    }  # fmt: skip


def test_disjoint_directions_keep_what_final_and_allows():
    forward, reverse = {(0, 0), (2, 3)}, {(0, 0), (3, 2)}
    assert symmetrize(forward, reverse, "grow-diag-final-and") == {(0, 0), (2, 3), (3, 2)}


def test_every_method_is_between_intersection_and_union_and_inputs_are_untouched():
    forward, reverse = set(FORWARD), set(REVERSE)
    for method in SYMMETRIZATIONS:
        got = symmetrize(forward, reverse, method)
        assert FORWARD & REVERSE <= got <= FORWARD | REVERSE, method
    assert (forward, reverse) == (FORWARD, REVERSE)


def test_errors():
    with pytest.raises(ValueError, match="method must be one of intersection, union"):
        symmetrize(FORWARD, REVERSE, "grow")
    with pytest.raises(ValueError, match="forward has 1 sentences but reverse has 2"):
        symmetrize_all([FORWARD], [REVERSE, REVERSE], "union")
    assert symmetrize_all([FORWARD], [REVERSE], "intersection") == [{(0, 0)}]


def test_agreement_links_keep_what_both_directions_weigh():
    # 2 source words x 3 target words. forward rows: target words over source words.
    forward = torch.tensor([[0.9, 0.1], [0.5, 0.5], [0.2, 0.8]])
    # reverse rows: source words over target words.
    reverse = torch.tensor([[0.8, 0.2, 0.0], [0.1, 0.3, 0.6]])
    # products (i, j): (0,0) .72, (0,1) .10, (0,2) 0, (1,0) .01, (1,1) .15, (1,2) .48
    assert agreement_links(forward, reverse, 0.4) == {(0, 0), (1, 2)}
    assert agreement_links(forward, reverse, 0.09) == {(0, 0), (0, 1), (1, 1), (1, 2)}
    assert agreement_links(forward, reverse, 1.0) == set()
    # mutual best: row maxima (target j -> i) 0->0, 1->1, 2->1; column maxima 0->0, 1->2
    assert agreement_links(forward, reverse, 0.09, mutual=True) == {(0, 0), (1, 2)}
    assert agreement_links(forward, reverse, 0.5, mutual=True) == {(0, 0)}
    tie = torch.full((2, 2), 0.5)  # every product 0.25: all are row and column maxima
    assert agreement_links(tie, tie, 0.2, mutual=True) == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert agreement_links(torch.ones(0, 2), torch.ones(2, 0), 0.1, mutual=True) == set()


def test_agreement_links_errors():
    with pytest.raises(ValueError, match="turned round"):
        agreement_links(torch.ones(3, 2), torch.ones(3, 2), 0.3)
    with pytest.raises(ValueError, match="threshold"):
        agreement_links(torch.ones(3, 2), torch.ones(2, 3), 0.0)


def test_grow_diag_visits_target_first_in_symal_neighbour_order():
    # Moses symal, worked by hand. Intersection 1-3 and 3-1; union adds 2-2 (forward),
    # 0-1 and 2-3 (reverse). symal visits 3-1 first (target word 1 before 3) and tries its
    # neighbours target-1, source-1, target+1, source+1, then the diagonals: 2-2 (a
    # diagonal, target 2 unaligned) is grown; then every word of 2-3 is aligned, so 2-3 is
    # not. Visiting 1-3 first, or sideways neighbours of 1-3 first, grew 2-3 as well.
    forward = {(1, 3), (2, 2), (3, 1)}
    reverse = {(0, 1), (1, 3), (2, 3), (3, 1)}
    assert symmetrize(forward, reverse, "grow-diag") == {(1, 3), (2, 2), (3, 1)}
    assert symmetrize(forward, reverse, "grow-diag-final-and") == {(1, 3), (2, 2), (3, 1)}
    # final: 0-1 has source word 0 unaligned
    assert symmetrize(forward, reverse, "grow-diag-final") == {(0, 1), (1, 3), (2, 2), (3, 1)}


def test_grow_diag_visits_a_link_grown_in_the_same_pass_as_symal_does():
    # Intersection 2-1. Visiting 2-1: 1-0 (diagonal target-1, source-1) is grown, then 1-2
    # (diagonal target+1, source-1). 1-2 sorts after 2-1 (target 2 > 1), so symal visits it
    # in the same pass: its neighbour 0-1 (source-1, target-1) aligns source word 0. The
    # next pass visits 1-0, whose neighbour 0-0 now joins two aligned words: refused.
    # Waiting for the next pass to visit 1-2 took 0-0 (from 1-0) instead of 0-1.
    forward = {(0, 0), (0, 1), (1, 0), (2, 1)}
    reverse = {(1, 2), (2, 1)}
    assert symmetrize(forward, reverse, "grow-diag") == {(0, 1), (1, 0), (1, 2), (2, 1)}


def test_grow_diag_tries_the_diagonals_in_symal_order():
    # symal's diagonals, as (source, target) steps: (-1, -1), (+1, -1), (-1, +1), (+1, +1).
    # Intersection 2-0. Visiting 2-0 grows its diagonal 1-1 (source 1 unaligned); 1-1 sorts
    # after 2-0, so it is visited in the same pass: its diagonal 0-2 (source-1, target+1)
    # comes before 2-2 (source+1, target+1) and is grown; then both words of 2-2 are aligned
    # and it is refused. Trying 2-2 first would have grown it while target 2 was unaligned.
    forward = {(0, 2), (1, 1), (2, 0), (2, 2)}
    reverse = {(2, 0)}
    for method in ("grow-diag", "grow-diag-final", "grow-diag-final-and"):
        assert symmetrize(forward, reverse, method) == {(0, 2), (1, 1), (2, 0)}, method


def test_agreement_links_keep_a_product_equal_to_the_threshold():
    # "reaches a threshold": product >= tau. One-hot directions give products of exactly 1.0,
    # the largest tau allowed; 0.5 * 1.0 = 0.5 is exact in floating point too.
    one_hot = torch.eye(2)
    assert agreement_links(one_hot, one_hot, 1.0) == {(0, 0), (1, 1)}
    half = torch.tensor([[0.5, 0.5], [0.0, 1.0]])  # target word 0 split between sources
    assert agreement_links(half, torch.eye(2), 0.5) == {(0, 0), (1, 1)}
