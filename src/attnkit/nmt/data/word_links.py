"""Word alignments as training labels: Pharaoh lines, words mapped onto subword pieces.

Guided alignment (Garg et al. 2019, sec. 4) supervises attention with word
alignments from an external aligner. They come as a Pharaoh file: one line
per training pair, line-aligned with the training corpus file(s), each link
``i-j`` = (source word ``i``, target word ``j``), 0-based, words being the
whitespace-separated tokens of the line; an empty line means "no alignment
for this pair" (the pair is trained on, its alignment loss is skipped).

Words become subword pieces here: every word is encoded on its own (as
:func:`attnkit.nmt.analysis.align.align_words` does when it extracts
alignments; for sentencepiece this is the sentence's own segmentation, since
pieces never cross a space), and a piece pair is linked when its words are
linked. ``</s>`` is never linked (it is not a word).

Notation: ``Sw``/``Tw`` words, ``Sp``/``Tp`` pieces of one sentence.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..vocab_ids import UNK

__all__ = [
    "AlignedEncoder",
    "attach_lines",
    "encode_words",
    "parse_pharaoh",
    "piece_links",
    "word_pieces",
]

Link = tuple[int, int]


def parse_pharaoh(
    line: str, where: str | Path, number: int, src_words: int, tgt_words: int
) -> list[Link]:
    """The links of one Pharaoh line ``"0-0 1-2 ..."``, checked against the pair's word counts.

    Args:
        line: the line (without its ending); blank means no links.
        where: the file, for messages.
        number: the 1-based line number, for messages.
        src_words: ``Sw``, whitespace words of the source sentence.
        tgt_words: ``Tw``, whitespace words of the target sentence.

    Returns:
        ``[(i, j), ...]`` sorted, duplicates removed, ``0 <= i < Sw``, ``0 <= j < Tw``.

    Raises:
        ValueError: a token that is not ``i-j`` with non-negative integers, or an
            index outside the sentence (the message names file, line and link).
    """
    links = set()
    for item in line.split():
        i, sep, j = item.partition("-")
        if not (sep and i.isdigit() and j.isdigit()):
            raise ValueError(
                f"{where}, line {number}: {item!r} is not a link 'i-j' of 0-based word indices"
            )
        a, b = int(i), int(j)
        if a >= src_words or b >= tgt_words:
            raise ValueError(
                f"{where}, line {number}: link {item!r} is outside the sentence pair "
                f"({src_words} source words, {tgt_words} target words; indices are 0-based)"
            )
        links.add((a, b))
    return sorted(links)


def encode_words(
    encode_batch: Callable[[list[str]], list[list[int]]], words: Sequence[str]
) -> tuple[list[int], list[int]]:
    """Piece ids of ``words`` (each encoded on its own) and the word index of every piece.

    A word the tokenizer maps to no piece at all becomes one ``<unk>``, so every
    word keeps at least one piece.

    Args:
        encode_batch: texts -> ids (a tokenizer's ``encode_batch``).
        words: the sentence's words.

    Returns:
        ``(ids (Sp,), word_of (Sp,))``, ``word_of`` non-decreasing.
    """
    ids, word_of = [], []
    for w, pieces in enumerate(encode_batch(list(words)) if words else []):
        pieces = pieces or [UNK]
        ids += pieces
        word_of += [w] * len(pieces)
    return ids, word_of


def word_pieces(word_of: Sequence[int], words: int) -> list[range]:
    """For each word, the range of its pieces, from a non-decreasing ``word_of`` map."""
    starts = [0] * (words + 1)
    for w in word_of:
        starts[w + 1] += 1
    for w in range(words):
        starts[w + 1] += starts[w]
    return [range(starts[w], starts[w + 1]) for w in range(words)]


def piece_links(
    links: Sequence[Link], src_word_of: Sequence[int], tgt_word_of: Sequence[int]
) -> list[Link]:
    """Word links -> piece links: pieces ``(s, t)`` are linked when their words are.

    Args:
        links: ``(source word, target word)`` pairs.
        src_word_of: word index of each source piece (``Sp``), non-decreasing.
        tgt_word_of: word index of each target piece (``Tp``), non-decreasing.

    Returns:
        ``(source piece, target piece)`` pairs, sorted.
    """
    src = word_pieces(src_word_of, (src_word_of[-1] + 1) if src_word_of else 0)
    tgt = word_pieces(tgt_word_of, (tgt_word_of[-1] + 1) if tgt_word_of else 0)
    return sorted({(s, t) for i, j in links for s in src[i] for t in tgt[j]})


def attach_lines(
    raw: Callable[[], Iterator[tuple]], path: str | Path, where: str
) -> Callable[[], Iterator[tuple]]:
    """``raw``'s pairs, each with ``(line, number)`` of the line-aligned file ``path`` appended.

    Raises (while iterating):
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``path`` has fewer or more lines than the corpus (naming both).
    """
    from .corpus import iter_lines

    def pairs() -> Iterator[tuple]:
        if not Path(path).is_file():
            raise FileNotFoundError(f"alignment file not found: {path}")
        lines = iter_lines(path)
        number = 0
        for number, pair in enumerate(raw(), start=1):  # noqa: B007 (read after the loop)
            line = next(lines, None)
            if line is None:
                raise ValueError(
                    f"{path} has {number - 1} lines but the corpus {where} has more "
                    f"(line {number} has no alignment); the alignment file must be "
                    "line-aligned with the training corpus file"
                )
            yield (*pair, (line, number))
        if next(lines, None) is not None:
            extra = 1 + sum(1 for _ in lines)
            raise ValueError(
                f"{path} has {number + extra} lines but the corpus {where} has {number}; "
                "the alignment file must be line-aligned with the training corpus file"
            )

    return pairs


@dataclass(frozen=True)
class AlignedEncoder:
    """A chunk encoder for the token store: pairs with their alignment line -> ids and links.

    Each item of a chunk is ``(source, target, (line, number))`` (from
    :func:`attach_lines`). Words are encoded one by one (:func:`encode_words`),
    the line is parsed against the pair's word counts (:func:`parse_pharaoh`)
    and mapped onto pieces (:func:`piece_links`). Picklable when the two batch
    encoders are, so it runs in the store's worker processes.

    Attributes:
        encode_src, encode_tgt: batch encoders, words -> ids.
        path: the alignment file (named in errors).

    Returns (when called):
        ``(source ids, target ids, links)``, links flat ``[s0, t0, s1, t1, ...]``
        piece indices per pair (empty: no alignment).

    Raises (when called):
        ValueError: a malformed line or a link outside its pair (file and line named).
    """

    encode_src: Callable[[list[str]], list[list[int]]]
    encode_tgt: Callable[[list[str]], list[list[int]]]
    path: str | Path

    def __call__(
        self, chunk: list[tuple]
    ) -> tuple[list[list[int]], list[list[int]], list[list[int]]]:
        src_words = [pair[0].split() for pair in chunk]
        tgt_words = [pair[1].split() for pair in chunk]
        src_pieces = _encode_sentences(self.encode_src, src_words)
        tgt_pieces = _encode_sentences(self.encode_tgt, tgt_words)
        src_ids, tgt_ids, links = [], [], []
        for k, (_, _, (line, number)) in enumerate(chunk):
            (s_ids, s_of), (t_ids, t_of) = src_pieces[k], tgt_pieces[k]
            words = parse_pharaoh(line, self.path, number, len(src_words[k]), len(tgt_words[k]))
            flat = [x for link in piece_links(words, s_of, t_of) for x in link]
            src_ids.append(s_ids)
            tgt_ids.append(t_ids)
            links.append(flat)
        return src_ids, tgt_ids, links


def _encode_sentences(
    encode_batch: Callable[[list[str]], list[list[int]]], sentences: list[list[str]]
) -> list[tuple[list[int], list[int]]]:
    """:func:`encode_words` for many sentences with one call to the batch encoder."""
    flat = encode_batch([w for words in sentences for w in words])
    out, start = [], 0
    for words in sentences:
        pieces = flat[start : start + len(words)]
        start += len(words)
        out.append(encode_words(lambda _words, p=pieces: p, words))
    return out
