"""Word alignments as training labels: Pharaoh lines, words mapped onto subword pieces.

Guided alignment (Garg et al. 2019, sec. 4) supervises attention with word
alignments from an external aligner. They come as a Pharaoh file: one line
per training pair, line-aligned with the training corpus file(s), each link
``i-j`` = (source word ``i``, target word ``j``), 0-based, words being the
line's words under ``train.guided_alignment.words`` (:mod:`.word_split`:
whitespace tokens, or those split at punctuation); an empty line means "no
alignment for this pair" (the pair is trained on, its alignment loss is skipped).

Words become subword pieces here: every whitespace token is encoded on its
own (as :func:`attnkit.nmt.analysis.align.align_words` does when it extracts
alignments; for sentencepiece this is the sentence's own segmentation, since
pieces never cross a space), and a piece pair is linked when its words are
linked. ``</s>`` is never linked (it is not a word).

Punctuation-split words keep the line's own pieces (:func:`split_word_pieces`):
within one whitespace token each piece belongs to the split word that covers
most of its characters (ties: the earlier word; a piece with no characters,
sentencepiece's lone ``▁``, to the word at its position), so the piece->word
map is non-decreasing. A split word that wins no piece (``"t."`` one piece of
``"chat."``: ``"."`` gets none; a word tokenizer's ``"chat."``) shares the
piece(s) covering its characters with the word that owns them: its links go
to those pieces. A token is compared with its pieces in Unicode NFC when they
spell that form (sentencepiece composes a decomposed NFD ``été``). When a
token's pieces do not spell it (``<unk>``, text changed further by
sentencepiece's normalization: ``ﬁn`` -> ``fin``), every split word of the
token shares all of the token's pieces, as under the whitespace rule.

Notation: ``Sw``/``Tw`` words, ``Sp``/``Tp`` pieces of one sentence.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..vocab_ids import UNK
from .line_chunks import check_readable
from .word_split import WordRule, word_spans

__all__ = [
    "AlignedEncoder",
    "attach_lines",
    "encode_words",
    "parse_pharaoh",
    "range_links",
    "split_word_pieces",
]

PIECE_SPACE = "\u2581"  # sentencepiece's word-start marker, not a character of the text

Link = tuple[int, int]


def parse_pharaoh(
    line: str,
    where: str | Path,
    number: int,
    src_words: int,
    tgt_words: int,
    words_hint: str = "",
) -> list[Link]:
    """The links of one Pharaoh line ``"0-0 1-2 ..."``, checked against the pair's word counts.

    Args:
        line: the line (without its ending); blank means no links.
        where: the file, for messages.
        number: the 1-based line number, for messages.
        src_words: ``Sw``, words of the source sentence.
        tgt_words: ``Tw``, words of the target sentence.
        words_hint: appended to an out-of-range message (which word rule counted).

    Returns:
        ``[(i, j), ...]`` sorted, duplicates removed, ``0 <= i < Sw``, ``0 <= j < Tw``.

    Raises:
        ValueError: a token that is not ``i-j`` with non-negative integers, or an
            index outside the sentence (the message names file, line and link).
    """
    hint = f"; {words_hint}" if words_hint else ""
    links = set()
    for item in line.split():
        i, sep, j = item.partition("-")
        if not (sep and i.isdecimal() and j.isdecimal()):
            raise ValueError(
                f"{where}, line {number}: {item!r} is not a link 'i-j' of 0-based word indices"
            )
        a, b = int(i), int(j)
        if a >= src_words or b >= tgt_words:
            raise ValueError(
                f"{where}, line {number}: link {item!r} is outside the sentence pair "
                f"({src_words} source words, {tgt_words} target words; indices are 0-based)"
                f"{hint}"
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


def range_links(
    links: Sequence[Link], src_pieces: Sequence[range], tgt_pieces: Sequence[range]
) -> list[Link]:
    """Word links -> piece links, each word given by the range of its pieces.

    Args:
        links: ``(source word, target word)`` pairs.
        src_pieces: for each source word (``Sw``), its source pieces.
        tgt_pieces: for each target word (``Tw``), its target pieces.

    Returns:
        ``(source piece, target piece)`` pairs, sorted, duplicates removed (two
        words sharing a piece link it once).
    """
    return sorted({(s, t) for i, j in links for s in src_pieces[i] for t in tgt_pieces[j]})


def split_word_pieces(token: str, pieces: Sequence[str]) -> list[range]:
    """For each punctuation-split word of one whitespace token, the range of its pieces.

    Each piece belongs to the split word covering most of its characters (ties:
    the earlier word; a piece of no characters: the word at its position); a
    word that wins no piece gets the pieces that cover its characters (shared).
    Pieces that spell ``token`` in NFC (a decomposed ``été``) are read against that
    form. When the pieces do not spell ``token`` (``<unk>``, text changed by NFKC),
    every word gets all the pieces.

    Args:
        token: one whitespace word of the line, e.g. ``"chat."``.
        pieces: its pieces' text in order, sentencepiece's ``▁`` included, e.g.
            ``["▁chat", "."]`` (a word tokenizer's single piece is the token).

    Returns:
        One non-empty range per split word (:func:`.word_split.word_spans`), indices
        into ``pieces``: ``[range(0, 1), range(1, 2)]`` for the example. Empty when
        ``pieces`` is.
    """
    spans = word_spans(token)
    n = len(pieces)
    if n == 0:
        return []
    texts = [p.replace(PIECE_SPACE, "") for p in pieces]
    spelled = "".join(texts)
    if spelled != token:
        composed = unicodedata.normalize("NFC", token)  # what sentencepiece's pieces hold
        if spelled != composed or len(word_spans(composed)) != len(spans):
            return [range(0, n)] * len(spans)
        spans = word_spans(composed)
    starts = [0]
    for text in texts:
        starts.append(starts[-1] + len(text))
    owner = [_owner(spans, starts[p], starts[p + 1]) for p in range(n)]  # non-decreasing
    ranges = []
    for w, (a, b) in enumerate(spans):
        own = [p for p in range(n) if owner[p] == w]
        if not own:  # pieces overlapping [a, b): contiguous, at least one
            own = [p for p in range(n) if starts[p] < b and starts[p + 1] > a]
        ranges.append(range(own[0], own[-1] + 1))
    return ranges


def _owner(spans: Sequence[tuple[int, int]], begin: int, end: int) -> int:
    """The split word covering most of the characters ``[begin, end)`` (ties: the earlier);
    for an empty piece, the word holding character ``begin`` (the last word at the end)."""
    if begin == end:
        return next((w for w, (_, b) in enumerate(spans) if begin < b), len(spans) - 1)
    overlap = [min(b, end) - max(a, begin) for a, b in spans]
    return max(range(len(spans)), key=lambda w: (overlap[w], -w))


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
        check_readable(path, "alignment file")
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
    :func:`attach_lines`). Whitespace tokens are encoded one by one, as
    :func:`encode_words` does; under ``words="punctuation"`` they are then split
    (:func:`split_word_pieces`, which reads the pieces' text). The line is
    parsed against the pair's word counts (:func:`parse_pharaoh`) and mapped
    onto pieces (:func:`range_links`). Picklable when the batch encoders and
    piece readers are, so it runs in the store's worker processes.

    Attributes:
        encode_src, encode_tgt: batch encoders, texts -> ids.
        path: the alignment file (named in errors).
        words: the rule the file's indices count words by (:mod:`.word_split`).
        pieces_src, pieces_tgt: ids -> piece texts (a tokenizer's ``pieces``);
            needed for ``words="punctuation"``.

    Returns (when called):
        ``(source ids, target ids, links)``, links flat ``[s0, t0, s1, t1, ...]``
        piece indices per pair (empty: no alignment).

    Raises:
        ValueError: (built) ``words="punctuation"`` without piece readers; (called) a
            malformed line or a link outside its pair (file and line named).
    """

    encode_src: Callable[[list[str]], list[list[int]]]
    encode_tgt: Callable[[list[str]], list[list[int]]]
    path: str | Path
    words: WordRule = "whitespace"
    pieces_src: Callable[[list[int]], list[str]] | None = None
    pieces_tgt: Callable[[list[int]], list[str]] | None = None

    def __post_init__(self) -> None:
        if self.words not in ("whitespace", "punctuation"):
            raise ValueError(f"words={self.words!r}: use 'whitespace' or 'punctuation'")
        if self.words == "punctuation" and (self.pieces_src is None or self.pieces_tgt is None):
            raise ValueError("words='punctuation' needs pieces_src and pieces_tgt (piece texts)")

    def __call__(
        self, chunk: list[tuple]
    ) -> tuple[list[list[int]], list[list[int]], list[list[int]]]:
        src = _encode_sentences(self.encode_src, self.pieces_src, [p[0] for p in chunk], self.words)
        tgt = _encode_sentences(self.encode_tgt, self.pieces_tgt, [p[1] for p in chunk], self.words)
        hint = f"words: {self.words}"
        src_ids, tgt_ids, links = [], [], []
        for k, (_, _, (line, number)) in enumerate(chunk):
            (s_ids, s_words), (t_ids, t_words) = src[k], tgt[k]
            words = parse_pharaoh(line, self.path, number, len(s_words), len(t_words), hint)
            flat = [x for link in range_links(words, s_words, t_words) for x in link]
            src_ids.append(s_ids)
            tgt_ids.append(t_ids)
            links.append(flat)
        return src_ids, tgt_ids, links


def _encode_sentences(
    encode_batch: Callable[[list[str]], list[list[int]]],
    pieces: Callable[[list[int]], list[str]] | None,
    sentences: list[str],
    words: WordRule,
) -> list[tuple[list[int], list[range]]]:
    """Each sentence's ids and, per word under ``words``, its piece range; one call to the
    batch encoder (and one to ``pieces``) for all of them."""
    tokens = [sentence.split() for sentence in sentences]
    flat = [p or [UNK] for p in encode_batch([t for ts in tokens for t in ts])]
    texts = pieces([i for p in flat for i in p]) if words == "punctuation" else None
    out, start, at = [], 0, 0
    for ts in tokens:
        ids, ranges = [], []
        for token, token_ids in zip(ts, flat[start : start + len(ts)], strict=True):
            base = len(ids)
            if texts is None:
                ranges.append(range(base, base + len(token_ids)))
            else:
                own = split_word_pieces(token, texts[at : at + len(token_ids)])
                ranges += [range(r.start + base, r.stop + base) for r in own]
            ids += token_ids
            at += len(token_ids)
        start += len(ts)
        out.append((ids, ranges))
    return out
