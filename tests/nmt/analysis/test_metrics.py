"""sacreBLEU / chrF wrappers and AER: known values on fixed pairs and hand-made alignments."""

import importlib.util
import math

import numpy as np
import pytest

from attnkit.nmt.analysis.metrics import (
    alignment_error_rate,
    chrf,
    perplexity,
    sacre_bleu,
    tokenized_bleu,
)

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


@pytest.mark.parametrize("scorer", [sacre_bleu, chrf, tokenized_bleu])
def test_a_single_string_is_refused_not_scored_character_by_character(scorer):
    # before, "the cat sat" was read as 11 one-character sentences and given a score
    with pytest.raises(TypeError, match="hypotheses must be a list of sentences, got one string"):
        scorer("the cat sat", "the cat sit")
    with pytest.raises(TypeError, match="references must be a list of sentences"):
        scorer(["the cat sat"], "the cat sat")


@pytest.mark.parametrize("scorer", [sacre_bleu, chrf, tokenized_bleu])
def test_sacrebleu_style_nested_references_are_refused_naming_the_argument(scorer):
    with pytest.raises(TypeError, match=r"references\[0\] is a list, not a string"):
        scorer(["a b c d", "x y"], [["a b c d", "x y"]])
    with pytest.raises(TypeError, match=r"hypotheses\[1\] is a NoneType"):
        scorer(["a b", None], ["a b", "c"])


def test_perplexity():
    assert perplexity(math.log(7.0)) == pytest.approx(7.0)
    assert perplexity(1e6) == math.inf
    assert math.isnan(perplexity(math.nan))  # not an overflow


@pytest.mark.parametrize("scorer", [sacre_bleu, chrf, tokenized_bleu])
def test_an_empty_test_set_is_a_clear_error_not_an_index_error(scorer):
    with pytest.raises(ValueError, match="no sentences to score"):
        scorer([], [])


@pytest.mark.parametrize("scorer", [sacre_bleu, chrf, tokenized_bleu])
def test_empty_strings_inside_a_test_set_score_zero(scorer):
    assert scorer(["", ""], ["a b", "c"]).score == 0.0


# ---------------------------------------------------------------- AER (Och & Ney 2003)

SURE = [{(0, 0), (1, 1)}]
POSSIBLE = [{(0, 0), (1, 1), (2, 1)}]


def test_perfect_alignment_has_zero_aer():
    for predicted in (SURE, POSSIBLE):  # any A with S <= A <= P is perfect
        result = alignment_error_rate(predicted, SURE, POSSIBLE)
        assert result.aer == 0.0 and result.precision == 1.0 and result.recall == 1.0


def test_partial_alignment_matches_hand_computation():
    # A = {0-0, 2-1, 2-2}: |A∩S| = 1, |A∩P| = 2, |A| = 3, |S| = 2 -> AER = 1 - 3/5
    result = alignment_error_rate([{(0, 0), (2, 1), (2, 2)}], SURE, POSSIBLE)
    assert result.aer == pytest.approx(0.4)
    assert result.precision == pytest.approx(2 / 3) and result.recall == pytest.approx(1 / 2)
    assert (result.predicted, result.sure, result.possible) == (3, 2, 3)


def test_aer_sums_counts_over_the_corpus_not_sentence_rates():
    # sentence 1: A = S (2 links); sentence 2: A = {0-1}, S = {0-0}, nothing shared
    result = alignment_error_rate([SURE[0], {(0, 1)}], [SURE[0], {(0, 0)}])
    assert result.aer == pytest.approx(1 - (2 + 2) / (3 + 3))


def test_pharaoh_strings_are_refused_not_scored_as_characters():
    # before, set("0-1 1-0") == set("0-0 1-1") (the same characters): AER 0 for a wrong alignment
    with pytest.raises(TypeError, match=r"predicted\[0\] is a string \('0-1 1-0'\)"):
        alignment_error_rate(["0-1 1-0"], ["0-0 1-1"])


@pytest.mark.parametrize("bad", [(0, 1, 2), (0, -1), (0.0, 1), ("0", "1"), (True, 1), {0, 1}, 3])
def test_a_link_that_is_not_a_pair_of_word_indices_is_refused(bad):
    with pytest.raises(TypeError, match=r"sure\[1\] holds .*: a link is a pair"):
        alignment_error_rate([SURE[0], {(0, 0)}], [SURE[0], [bad]])


def test_links_read_from_json_as_lists_are_scored_like_tuples():
    # [[0, 0], [2, 1], [2, 2]] is how JSON stores links; before, set() of lists was a TypeError
    predicted = [[[0, 0], np.array([2, 1]), (np.int64(2), 2)]]
    result = alignment_error_rate(predicted, [[[0, 0], [1, 1]]], [[[2, 1]]])
    assert result.aer == pytest.approx(0.4)
    assert (result.predicted, result.sure, result.possible) == (3, 2, 3)


def test_sure_links_count_as_possible_even_when_not_listed():
    result = alignment_error_rate(SURE, SURE, [set()])
    assert result.aer == 0.0 and result.possible == 2


def test_no_links_at_all_is_an_error_and_mismatched_corpora_raise():
    with pytest.raises(ValueError, match="AER is undefined"):
        alignment_error_rate([set()], [set()])
    with pytest.raises(ValueError, match="predicted has 2 sentences, sure 1"):
        alignment_error_rate([set(), set()], SURE, POSSIBLE)


def test_nothing_predicted_has_precision_1_recall_0_and_aer_1():
    # |A| = 0: precision |A ∩ P| / |A| is taken as 1.0 (no wrong link); recall 0 / 2;
    # AER = 1 - (0 + 0) / (0 + 2) = 1
    result = alignment_error_rate([set()], [{(0, 0), (1, 1)}])
    assert (result.precision, result.recall, result.aer) == (1.0, 0.0, 1.0)


def test_no_sure_gold_link_has_recall_1():
    # |S| = 0: recall |A ∩ S| / |S| is taken as 1.0 (no sure link missed); the one predicted
    # link is possible: precision 1 / 1, AER = 1 - (0 + 1) / (1 + 0) = 0
    result = alignment_error_rate([{(0, 0)}], [set()], [{(0, 0)}])
    assert (result.precision, result.recall, result.aer) == (1.0, 1.0, 0.0)


ZH_HYP = ["猫坐在垫子上。"]
ZH_REF = ["猫坐在垫子上了。"]


@pytest.mark.parametrize("lang", ["zh", "zh-CN", "ZH_Hant"])
def test_chinese_targets_are_scored_with_sacrebleus_chinese_tokenizer(lang):
    # before, 13a read each unspaced sentence as one word: BLEU 0.00 for a near-perfect
    # translation, where `sacrebleu -l en-zh` gives 72.90 (tok:zh)
    result = sacre_bleu(ZH_HYP, ZH_REF, tgt_lang=lang)
    assert result.score == pytest.approx(72.90, abs=0.01)
    assert "tok:zh" in result.signature
    lowered = tokenized_bleu(ZH_HYP, ZH_REF, tgt_lang=lang)
    assert lowered.score == pytest.approx(72.90, abs=0.01)
    assert "case:lc" in lowered.signature and "tok:zh" in lowered.signature


@pytest.mark.parametrize("lang", [None, "fr", "de", "en-GB"])
def test_other_targets_keep_13a(lang):
    result = sacre_bleu(HYP, REF, tgt_lang=lang)
    assert result.score == pytest.approx(37.99, abs=0.01)
    assert "tok:13a" in result.signature


def test_japanese_without_mecab_reads_characters_and_says_so():
    pytest.importorskip("sacrebleu")
    if importlib.util.find_spec("MeCab") is not None:
        pytest.skip("sacrebleu[ja] is installed: ja-mecab is used")
    with pytest.warns(UserWarning, match=r"target language 'ja' reads characters \(tok:char\)"):
        result = sacre_bleu(["猫がいる"], ["猫がいる"], tgt_lang="ja")
    assert result.score == pytest.approx(100.0)
    assert "tok:char" in result.signature
