"""What counts as an empty line: the one rule that corpus reading, translate and evaluate share.

A line is *blank* when nothing in it survives a tokenizer's normalisation:
it holds only whitespace, control characters (Unicode category Cc), invisible
format characters (category Cf: the byte order mark U+FEFF, the zero-width
space U+200B, the left-to-right mark U+200E, ...), and the two characters that
sentencepiece's default ``nmt_nfkc`` normalisation deletes or reads as a
space: U+FFFD (the replacement character) and U+2581 (its word-boundary mark
``▁``). The word tokenizer skips words made only of such characters, so for it
``encode(line) == []`` exactly when the line is blank; every line sentencepiece
encodes to no pieces is blank too (tests/test_text.py checks every code point).

A blank line is empty everywhere: the corpus reader skips (and counts) a
training pair with a blank side, translate prints an empty line for it, and
evaluate gives it an empty hypothesis.
"""

from __future__ import annotations

import unicodedata

__all__ = ["is_blank"]

_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf"})
_DELETED_BY_SENTENCEPIECE = frozenset("\ufffd\u2581")


def _invisible(char: str) -> bool:
    return (
        char.isspace()
        or char in _DELETED_BY_SENTENCEPIECE
        or unicodedata.category(char) in _INVISIBLE_CATEGORIES
    )


def is_blank(text: str) -> bool:
    """Whether ``text`` is empty after a tokenizer's normalisation (see the module docstring).

    Args:
        text: one line or one word, without its line ending.

    Returns:
        True for ``""``, ``"  "``, ``"\\ufeff"``, ``"\\u200b \\u200e"``; False as
        soon as one visible character (a letter, digit, symbol, mark) is present.
    """
    if text[:1].isalnum():  # the common case, decided without a per-character scan
        return False
    return all(_invisible(char) for char in text)
