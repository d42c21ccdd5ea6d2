"""Symmetrising two directions' word alignments: intersection, union, grow-diag(-final(-and)).

An aligner run source->target links each target word to source words, and
one run target->source the other way round; neither alone is symmetric. The
heuristics of Och & Ney 2003 (sec. 4.1) and Koehn et al. 2003 (sec. 3.2; Moses
implements them in ``symal`` and ``train-model.perl``) combine them:

* ``intersection``: links both directions have (high precision);
* ``union``: links either has (high recall);
* ``grow-diag``: start from the intersection and, while anything changes,
  add a union link that neighbours an accepted one (horizontally, vertically
  or diagonally) when its source or its target word is still unaligned;
* ``grow-diag-final``: then add any union link one of whose words is unaligned;
* ``grow-diag-final-and``: then add a link of either direction only when
  *both* its words are unaligned (the usual default for phrase tables and for
  aligner evaluations, e.g. eflomal's and awesome-align's).

Where the order of grow-diag decides (a word two candidates compete for), it
is Moses ``symal``'s, so the links are the same as its: accepted links are
visited target word first (then source word), a link grown during a pass is
visited in the same pass when it sorts after the link being visited, and the
neighbours of a link are tried as target-1, source-1, target+1, source+1,
then the diagonals. The final steps take the forward links before the
reverse ones, as symal does; within one direction their order cannot change
the result (two candidates that share a word come in the same order either
way).

Links are ``(i, j)`` = (source word, target word), 0-based; pass the
target->source run's links already turned round to (source, target).

Where both directions give soft weights (attention), :func:`agreement_links`
combines them before any link is drawn: a link where the product of the two
directions' weights reaches a threshold (posterior-product decoding, Liang,
Taskar & Klein 2006, "Alignment by Agreement", sec. 3.2). With ``mutual=True``
a pair must also have the largest product of its row and of its column: each
word's best partner seen from both sides (the "Argmax" rule of SimAlign,
Jalili Sabet et al. 2020, sec. 2.3, applied to the product).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .metrics import Link

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["SYMMETRIZATIONS", "agreement_links", "symmetrize", "symmetrize_all"]

SYMMETRIZATIONS = ("intersection", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and")
# (source, target) steps in symal's order: target-1, source-1, target+1, source+1, diagonals
_NEIGHBOURS = ((0, -1), (-1, 0), (0, 1), (1, 0), (-1, -1), (1, -1), (-1, 1), (1, 1))


def symmetrize(forward: set[Link], reverse: set[Link], method: str) -> set[Link]:
    """Combine one sentence's two directions by ``method`` (see the module docstring).

    Args:
        forward: the source->target run's links ``(i, j)``.
        reverse: the target->source run's links, turned round to ``(i, j)``.
        method: one of :data:`SYMMETRIZATIONS`.

    Returns:
        the symmetrised links (a new set).

    Raises:
        ValueError: an unknown ``method``.
    """
    if method not in SYMMETRIZATIONS:
        raise ValueError(f"method must be one of {', '.join(SYMMETRIZATIONS)}, got {method!r}")
    forward, reverse = set(forward), set(reverse)
    union = forward | reverse
    if method == "intersection":
        return forward & reverse
    if method == "union":
        return union
    links = forward & reverse
    src_done, tgt_done = {i for i, _ in links}, {j for _, j in links}

    def add(i: int, j: int) -> None:
        links.add((i, j))
        src_done.add(i)
        tgt_done.add(j)

    grown = True
    while grown:  # grow-diag (Koehn et al. 2003): neighbours of accepted links
        grown = _grow_pass(links, union, src_done, tgt_done, add)
    if method == "grow-diag":
        return links
    for direction in (forward, reverse):  # final(-and): what is still unaligned
        for i, j in sorted(direction):
            if method == "grow-diag-final-and":
                if i not in src_done and j not in tgt_done:
                    add(i, j)
            elif (i not in src_done or j not in tgt_done) and (i, j) not in links:
                add(i, j)
    return links


def _target_first(link: Link) -> tuple[int, int]:
    return link[1], link[0]


def _grow_pass(links, union, src_done, tgt_done, add) -> bool:
    """One grow-diag pass in symal's order; whether it added a link.

    The accepted links are visited target word first; a link added during the
    pass joins the visit where it sorts (so one after the current link is
    visited in this pass, as symal's ``std::set`` iteration does).
    """
    visit = sorted(_target_first(link) for link in links)  # (target, source)
    grown, k = False, 0
    while k < len(visit):
        j, i = visit[k]
        for di, dj in _NEIGHBOURS:
            p = (i + di, j + dj)
            if p in union and (p[0] not in src_done or p[1] not in tgt_done):
                add(*p)
                bisect.insort(visit, _target_first(p))
                grown = True
        k = bisect.bisect_right(visit, (j, i))
    return grown


def symmetrize_all(
    forward: Sequence[set[Link]], reverse: Sequence[set[Link]], method: str
) -> list[set[Link]]:
    """:func:`symmetrize` sentence by sentence.

    Raises:
        ValueError: the two lists differ in length, or an unknown ``method``.
    """
    if len(forward) != len(reverse):
        raise ValueError(
            f"forward has {len(forward)} sentences but reverse has {len(reverse)}; "
            "the two runs must align the same pairs"
        )
    return [symmetrize(f, r, method) for f, r in zip(forward, reverse, strict=True)]


def agreement_links(
    forward: Tensor, reverse: Tensor, threshold: float, *, mutual: bool = False
) -> set[Link]:
    """Links where both directions' weights agree: ``forward[j, i] * reverse[i, j] >= tau``.

    Args:
        forward: ``(Tw, Sw)`` float, the source->target run's weights (target word rows,
            each a distribution over source words).
        reverse: ``(Sw, Tw)`` float, the target->source run's weights (source word rows).
        threshold: tau in (0, 1].
        mutual: keep a pair only where its product is also the largest of its target
            word's row and of its source word's column (one link per word, ties apart).

    Returns:
        ``{(source word i, target word j)}``, 0-based.

    Raises:
        ValueError: the shapes do not match turned round, or tau is outside (0, 1].
    """
    if forward.ndim != 2 or reverse.shape != forward.shape[::-1]:
        raise ValueError(
            f"reverse must be forward turned round: forward {tuple(forward.shape)}, "
            f"reverse {tuple(reverse.shape)}"
        )
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    product = forward * reverse.T  # (Tw, Sw)
    keep = product >= threshold
    if mutual and product.numel():
        keep &= product == product.amax(dim=1, keepdim=True)
        keep &= product == product.amax(dim=0, keepdim=True)
    rows, cols = keep.nonzero(as_tuple=True)
    return {(int(i), int(j)) for j, i in zip(rows.tolist(), cols.tolist(), strict=True)}
