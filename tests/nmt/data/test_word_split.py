"""The word rules guided-alignment labels count by: whitespace tokens, or split at punctuation."""

import unicodedata

import pytest

from attnkit.nmt.data.word_split import split_words, word_spans


def test_punctuation_rule_splits_marks_and_elisions_and_keeps_hyphens_and_inner_dots():
    text = "L'homme, dit-il « 3.5 » aujourd'hui."
    assert split_words(text) == [
        "L'", "homme", ",", "dit-il", "«", "3.5", "»", "aujourd'", "hui", ".",
    ]  # fmt: skip
    assert split_words(text, "whitespace") == text.split()


def test_split_words_cover_their_whitespace_token_in_order_without_gaps():
    for token in ["chat.", "«Oui»,", "qu'est-ce", "...", "e.g.", "'s"]:
        spans = word_spans(token)
        assert spans[0][0] == 0 and spans[-1][1] == len(token)
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_an_unknown_rule_is_named():
    with pytest.raises(ValueError, match="words='commas' is not a word rule"):
        split_words("a b", "commas")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("e\u0301te\u0301, dit-il.", ["e\u0301te\u0301", ",", "dit-il", "."]),  # NFD été
        ("हिंदी भाषा।", ["हिंदी", "भाषा", "।"]),  # Devanagari vowel signs and anusvara
        ("ที่นี่", ["ที่นี่"]),  # Thai tone marks
        ("\u2764\ufe0f.", ["\u2764\ufe0f", "."]),  # an emoji's variation selector
    ],
    ids=["nfd-accents", "devanagari", "thai", "emoji-selector"],
)
def test_a_combining_mark_belongs_to_its_word_not_a_word_of_its_own(text, words):
    # before, every combining mark matched [^\w\s] alone: NFD "été" was 4 words and
    # "हिंदी" 5, so an aligner's word indices pointed at the wrong words, silently
    assert split_words(text) == words
    assert split_words(unicodedata.normalize("NFC", text)) == [
        unicodedata.normalize("NFC", w) for w in words
    ]
    for token in text.split():
        spans = word_spans(token)
        assert spans[0][0] == 0 and spans[-1][1] == len(token)
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
