"""explain with large scores and wide vectors: readable numbers, nothing skipped silently."""

from __future__ import annotations

from attnkit.lessons import explain


def _ones(n: int, value: float = 1.0) -> list[float]:
    return [value] * n


def test_huge_exponentials_are_scientific_and_the_shift_is_named():
    text = explain([1000.0, 0.0], [[1.0, 0.0], [0.0, 1.0]]).to_text()
    assert "exp(707.107) = 1.238e+307" in text
    assert max(len(word) for word in text.split()) < 40  # no 300-digit number
    assert "it subtracts the row maximum m first" in text
    assert "stable softmax: subtract the row maximum m = 707.107" in text


def test_scores_near_40_are_not_written_with_18_digits():
    text = explain([40.0, 0.0], [[1.0, 0.0], [0.0, 1.0]], score="dot").to_text()
    assert "exp(40.000) = 2.354e+17" in text and "235385266837" not in text


def test_small_exponentials_stay_fixed_point():
    text = explain([2.0, 0.0, 1.0], [[1, 0, 0], [0, 1, 0], [0, 0, 1]]).to_text()
    assert "e+" not in text and "scientific" not in text


def test_a_width_of_12_writes_the_products_out_wrapped():
    text = explain(_ones(12), [_ones(12, 2.0), _ones(12, 0.0)], score="dot").to_text()
    lines = text.splitlines()
    first = lines.index("  q·k1 = " + " + ".join(["1×2"] * 8))
    assert lines[first + 1] == "      + " + " + ".join(["1×2"] * 4)
    assert lines[first + 2] == "      = 24"


def test_a_width_over_64_says_plainly_that_the_products_are_skipped():
    text = explain(_ones(100), [_ones(100, 2.0)], score="dot").to_text()
    assert "term-by-term products skipped: D = 100 is more than the 64 shown" in text
    assert "1×2 + 1×2" not in text and "scores = [200]" in text
