"""benchmarks/joined_pairs.py: a joined pair has its parts' links, shifted by the words before."""

import pytest

from attnkit.nmt.data.word_split import split_words
from benchmarks.joined_pairs import join_pairs

PAIRS = [("I saw a bird.", "J'ai vu un oiseau."), ("Go!", "Va !"), ("Tom left.", "Tom est parti.")]
LINKS = [{(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)}, {(0, 0), (1, 1)}, {(0, 0), (1, 2), (2, 3)}]


def lengths(pairs):
    return [(len(split_words(s)), len(split_words(t))) for s, t in pairs]


def test_a_joined_pair_carries_each_parts_links_at_its_offset():
    joined = join_pairs(PAIRS, lengths(PAIRS), LINKS, [0, 1, 2], 20, sizes=(2, 3), seed=3)
    assert len(joined) == 20
    for (src, tgt), links in joined:
        parts = [next(p for p in PAIRS if p[0] == part) for part in _split(src)]
        assert " ".join(t for _, t in parts) == tgt
        expected, s0, t0 = set(), 0, 0
        for part in parts:
            k = PAIRS.index(part)
            expected |= {(i + s0, j + t0) for i, j in LINKS[k]}
            s0, t0 = s0 + lengths([part])[0][0], t0 + lengths([part])[0][1]
        assert links == expected
        assert (s0, t0) == (len(split_words(src)), len(split_words(tgt)))
        assert max(i for i, _ in links) < s0 and max(j for _, j in links) < t0


def _split(src):
    """The source parts of a joined line (each of PAIRS' sources ends with '.' or '!')."""
    out, rest = [], src
    while rest:
        part = next(p for p, _ in PAIRS if rest.startswith(p))
        out.append(part)
        rest = rest[len(part) :].lstrip()
    return out


def test_only_candidates_are_joined_and_the_draw_is_seeded():
    a = join_pairs(PAIRS, lengths(PAIRS), LINKS, [1], 3, sizes=(2,), seed=0)
    assert [text for text, _ in a] == [("Go! Go!", "Va ! Va !")] * 3
    assert a[0][1] == {(0, 0), (1, 1), (2, 2), (3, 3)}
    b1 = join_pairs(PAIRS, lengths(PAIRS), LINKS, [0, 1, 2], 5, seed=7)
    b2 = join_pairs(PAIRS, lengths(PAIRS), LINKS, [0, 1, 2], 5, seed=7)
    assert b1 == b2


@pytest.mark.parametrize(
    ("candidates", "count", "sizes", "message"),
    [([0], -1, (2,), "count must be >= 0"), ([], 1, (2,), "no candidate"),
     ([0], 1, (1, 2), "sizes must all be >= 2")],
)  # fmt: skip
def test_bad_arguments_are_named(candidates, count, sizes, message):
    with pytest.raises(ValueError, match=message):
        join_pairs(PAIRS, lengths(PAIRS), LINKS, candidates, count, sizes=sizes)
