"""sacreBLEU / chrF wrappers: known values on fixed pairs."""

import math

import pytest

from attnkit.nmt.metrics import chrf, perplexity, sacre_bleu, tokenized_bleu

REF = ["the cat is on the mat"]
HYP = ["the cat sat on the mat"]


def test_identical_hypothesis_scores_100():
    assert sacre_bleu(["a b c d e f"], ["a b c d e f"]).score == pytest.approx(100.0)
    assert chrf(REF, REF).score == pytest.approx(100.0)


def test_partial_overlap_bleu_matches_hand_computation():
    # n-gram precisions 5/6, 3/5, 1/4 and 0/3 (exp smoothing turns 0/3 into 1/(2*3)),
    # equal lengths so the brevity penalty is 1.
    expected = 100 * (5 / 6 * 3 / 5 * 1 / 4 * 1 / 6) ** 0.25
    result = sacre_bleu(HYP, REF)
    assert result.score == pytest.approx(expected, abs=1e-9)
    assert result.score == pytest.approx(37.99, abs=0.01)
    assert "case:mixed" in result.signature and "tok:13a" in result.signature


def test_chrf_known_value():
    assert chrf(HYP, REF).score == pytest.approx(64.58, abs=0.01)


def test_tokenized_bleu_ignores_case_but_sacrebleu_does_not():
    hyp = ["The Cat sat on the mat ."]
    assert tokenized_bleu(hyp, REF).score == pytest.approx(30.74, abs=0.01)
    assert sacre_bleu(hyp, REF).score == pytest.approx(24.45, abs=0.01)
    assert "case:lc" in tokenized_bleu(hyp, REF).signature


def test_mismatched_lengths_raise():
    with pytest.raises(ValueError, match="hypotheses has 2 lines but references has 1"):
        sacre_bleu(["a", "b"], ["a"])


def test_perplexity():
    assert perplexity(math.log(7.0)) == pytest.approx(7.0)
    assert perplexity(1e6) == math.inf


@pytest.mark.parametrize("scorer", [sacre_bleu, chrf, tokenized_bleu])
def test_an_empty_test_set_is_a_clear_error_not_an_index_error(scorer):
    with pytest.raises(ValueError, match="no sentences to score"):
        scorer([], [])


@pytest.mark.parametrize("scorer", [sacre_bleu, chrf, tokenized_bleu])
def test_empty_strings_inside_a_test_set_score_zero(scorer):
    assert scorer(["", ""], ["a b", "c"]).score == 0.0
