"""The shared rule for empty text: what is blank, and that every tokenizer agrees with it."""

import pytest

from attnkit.nmt.data.text import is_blank
from attnkit.nmt.data.tokenizer import SentencePieceTokenizer, WordTokenizer

INVISIBLE = ["", " \t ", "\ufeff", "\u200b", "\u200e", "\u200f \u2060", "\x00\x1b", "\ufffd"]
VISIBLE = ["a", " a ", "\ufeffa", "\u200bx\u200b", "漢", "😀", "\u0301", "."]


@pytest.mark.parametrize("text", INVISIBLE)
def test_whitespace_and_invisible_characters_are_blank(text):
    assert is_blank(text)


@pytest.mark.parametrize("text", VISIBLE)
def test_one_visible_character_is_not_blank(text):
    assert not is_blank(text)


def test_word_tokenizer_encodes_to_nothing_exactly_when_blank():
    tok = WordTokenizer.train(["a b"])
    for text in INVISIBLE + VISIBLE:
        assert (tok.encode(text) == []) == is_blank(text), repr(text)


def test_every_character_sentencepiece_deletes_is_blank():
    """No text reaches a model as zero pieces unless it is blank (so it is never translated).

    The Basic Multilingual Plane plus the tags / variation selectors block; the
    whole Unicode range held too with sentencepiece 0.2 (3.6 s, too slow here).
    """
    tok = SentencePieceTokenizer.train(["ein Mann mit einem Hut", "zwei Hunde"] * 10, vocab_size=30)
    points = [*range(0xD800), *range(0xE000, 0x10000), *range(0xE0000, 0xE0200)]
    chars = [chr(c) for c in points]
    deleted = [c for c, ids in zip(chars, tok.sp.encode(chars), strict=True) if not ids]
    assert "\ufeff" in deleted and "\u200b" in deleted and "\u200e" in deleted
    assert [hex(ord(c)) for c in deleted if not is_blank(c)] == []
