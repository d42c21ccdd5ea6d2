"""What a "word" is for word alignments: whitespace words, or words split at punctuation.

Two rules, named as ``train.guided_alignment.words`` names them:

- ``whitespace``: the whitespace-separated tokens of the line (``"chat."`` is
  one word).
- ``punctuation``: each whitespace token is split further by one regular
  expression, :data:`PUNCTUATION_TOKEN`, tried left to right at every position:

  1. ``\\w+'``  a word ending in an apostrophe (French elision: ``l'``, ``qu'``),
  2. ``'\\w+``  an apostrophe opening a word (``'s``),
  3. ``\\w+(?:[-.]\\w+)*``  a word, hyphens and inner dots kept (``peut-être``,
     ``3.5``, ``e.g`` of ``e.g.``),
  4. ``[^\\w\\s]``  any other non-space character alone (``.``, ``,``, ``«``).

  So ``"L'homme, dit-il."`` -> ``L' homme , dit-il .``. Every non-space
  character is matched by exactly one of them, so the split words of a
  whitespace token cover it without gaps, in order. A combining mark (Unicode
  category M: the accent of decomposed NFD ``é``, a Devanagari vowel sign, an
  emoji's variation selector) is part of the character before it, never a word
  of its own: ``"हिंदी"`` is one word, as ``"été"`` is in NFC or NFD. This is the tokenization
  of the Hansards alignment gold sets (Och & Ney 2003), which split
  punctuation and elisions, so labels made on these words match what
  ``benchmarks/align_aer.py`` scores.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

__all__ = ["PUNCTUATION_TOKEN", "WORD_RULES", "WordRule", "split_words", "word_spans"]

WordRule = Literal["whitespace", "punctuation"]
WORD_RULES: tuple[str, ...] = ("whitespace", "punctuation")

PUNCTUATION_TOKEN = re.compile(r"\w+'|'\w+|\w+(?:[-.]\w+)*|[^\w\s]")


def word_spans(token: str) -> list[tuple[int, int]]:
    """The punctuation-split words of one whitespace token, as ``(start, end)`` character spans.

    Args:
        token: a whitespace-free string (one whitespace word).

    Returns:
        Spans in order, contiguous, covering ``token`` (``"chat."`` -> ``[(0, 4), (4, 5)]``);
        ``[]`` for an empty token.
    """
    spans: list[tuple[int, int]] = []
    for match in PUNCTUATION_TOKEN.finditer(_marks_as_letters(token)):
        start, end = match.span()
        if spans and all(_is_mark(char) for char in token[start:end]):
            spans[-1] = (spans[-1][0], end)  # marks after a symbol: that symbol's
        else:
            spans.append((start, end))
    return spans


def _is_mark(char: str) -> bool:
    return unicodedata.category(char)[0] == "M"


def _marks_as_letters(token: str) -> str:
    """``token`` with each combining mark that follows a word character (itself or a
    mark read as one) replaced by the letter ``a``, so that :data:`PUNCTUATION_TOKEN`'s
    ``\\w`` reads it as part of the word; the same length, so spans carry over."""
    if token.isascii():
        return token
    chars = list(token)
    for i in range(1, len(chars)):
        if _is_mark(chars[i]) and (chars[i - 1].isalnum() or chars[i - 1] == "_"):
            chars[i] = "a"
    return "".join(chars)


def split_words(text: str, rule: WordRule = "punctuation") -> list[str]:
    """The words of ``text`` under ``rule`` (see the module docstring); case is kept.

    Raises:
        ValueError: ``rule`` is not one of :data:`WORD_RULES`.
    """
    if rule == "whitespace":
        return text.split()
    if rule == "punctuation":
        return [w[a:b] for w in text.split() for a, b in word_spans(w)]
    raise ValueError(f"words={rule!r} is not a word rule; use one of {', '.join(WORD_RULES)}")
