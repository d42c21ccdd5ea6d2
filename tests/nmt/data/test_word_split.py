"""The word rules guided-alignment labels count by: whitespace tokens, or split at punctuation."""

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
