"""Longer labelled pairs made by joining short ones: alignment supervision at the test's lengths.

Tatoeba's pairs are short (about seven words a side) and the Hansards pairs a
guided model is scored on are two to eight times longer. Measured on the
every-head, layer-0 pair of runs (benchmarks/RESULTS.md, "Long labelled
pairs"), attention beats eflomal on the short test pairs (AER 0.077 against
0.082, up to 20 words both sides together) and falls behind on the long ones
(0.186 against 0.112 over 40 words). Joining ``k`` random labelled pairs into
one (source parts joined with a space, target parts likewise) gives the
guided loss long pairs whose links are exact: each part's links, shifted by
the words before it. Nothing new is invented, so the joined lines add no text
a statistical aligner would not see.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from attnkit.nmt.analysis.metrics import Link

__all__ = ["join_pairs"]


def join_pairs(
    pairs: Sequence[tuple[str, str]],
    lengths: Sequence[tuple[int, int]],
    links: Sequence[set[Link]],
    candidates: Sequence[int],
    count: int,
    *,
    sizes: Sequence[int] = (2, 3, 4, 5),
    seed: int = 0,
) -> list[tuple[tuple[str, str], set[Link]]]:
    """``count`` pairs, each ``k`` random candidates joined, with their links shifted.

    Args:
        pairs: ``(source line, target line)`` texts.
        lengths: each pair's ``(source words, target words)`` count, in the words the
            links index (split per whitespace token, so a joined line's words are its
            parts' words in order).
        links: each pair's ``(source word, target word)`` links, 0-based.
        candidates: indices of the pairs that may be joined (labelled, both sides
            non-empty).
        count: how many joined pairs to make.
        sizes: the ``k`` drawn (uniformly) for each joined pair.
        seed: the random draw's seed.

    Returns:
        ``[((source line, target line), links)]``, ``count`` of them.

    Raises:
        ValueError: ``count`` < 0, no candidates for ``count`` > 0, or a size below 2.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if count and not candidates:
        raise ValueError("no candidate pairs to join")
    if any(k < 2 for k in sizes):
        raise ValueError(f"sizes must all be >= 2 (one part is no join), got {sizes}")
    rng = random.Random(seed)
    joined = []
    for _ in range(count):
        parts = rng.choices(candidates, k=rng.choice(sizes))
        src_offset = tgt_offset = 0
        shifted: set[Link] = set()
        for k in parts:
            shifted |= {(i + src_offset, j + tgt_offset) for i, j in links[k]}
            src_offset += lengths[k][0]
            tgt_offset += lengths[k][1]
        text = (" ".join(pairs[k][0] for k in parts), " ".join(pairs[k][1] for k in parts))
        joined.append((text, shifted))
    return joined
