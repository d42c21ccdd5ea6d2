"""Attention diagnostics: entropy, padding mass, coverage, monotonicity, repetition, length."""

import math

import pytest
import torch

from attnkit.nmt.analysis.diagnostics import (
    attention_entropy,
    coverage,
    coverage_shares,
    last_word_share,
    length_ratio,
    monotonicity,
    padding_mass,
    repeated_ngram_rate,
    summarize,
)
from conftest_nmt import pad, tiny_model, tiny_transformer

# one sentence: 3 output steps (the last is padding) over 4 source positions (the last is padding)
WEIGHTS = torch.tensor([[[1.0, 0.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3, 0.0], [0.5, 0.0, 0.0, 0.5]]])
SRC_MASK = torch.tensor([[True, True, True, False]])
TGT_MASK = torch.tensor([[True, True, False]])


def test_entropy_is_zero_for_one_hot_and_log_s_for_uniform_rows_and_zero_at_padding():
    entropy = attention_entropy(WEIGHTS, SRC_MASK, TGT_MASK)
    torch.testing.assert_close(entropy, torch.tensor([[0.0, math.log(3), 0.0]]))


def test_padding_mass_counts_weight_on_masked_keys_in_real_rows_only():
    assert padding_mass(WEIGHTS, SRC_MASK, TGT_MASK) == 0.0  # the leaking row is padding
    assert padding_mass(WEIGHTS, SRC_MASK, torch.ones(1, 3, dtype=torch.bool)) == 0.5


@pytest.mark.parametrize("build", [tiny_model, tiny_transformer])
def test_padding_mass_of_a_real_padded_batch_is_exactly_zero(build):
    src, src_lengths = pad([[4, 5, 6, 7, 8, 3], [9, 3], [5, 6, 3]])
    tgt_in, tgt_lengths = pad([[2, 4, 5], [2, 6], [2, 7, 8]])
    _, weights = build()(src, src_lengths, tgt_in)
    src_mask = torch.arange(src.shape[1])[None] < src_lengths[:, None]
    tgt_mask = torch.arange(tgt_in.shape[1])[None] < tgt_lengths[:, None]
    assert padding_mass(weights, src_mask, tgt_mask) == 0.0


def test_coverage_sums_each_source_column_over_real_steps_and_shares_count_bounds():
    cover = coverage(WEIGHTS, SRC_MASK, TGT_MASK)
    torch.testing.assert_close(cover, torch.tensor([[4 / 3, 1 / 3, 1 / 3, 0.0]]))
    assert coverage_shares(cover, SRC_MASK) == (2 / 3, 0.0)
    assert coverage_shares(torch.tensor([[2.0, 0.7]]), torch.tensor([[True, True]])) == (0.0, 0.5)


def test_monotonicity_is_one_on_the_diagonal_minus_one_reversed_and_nan_when_constant():
    eye = torch.eye(4)[None]  # (1, T=4, S=4)
    masks = torch.ones(1, 4, dtype=torch.bool), torch.ones(1, 4, dtype=torch.bool)
    assert monotonicity(eye, *masks).item() == pytest.approx(1.0)
    assert monotonicity(eye.flip(-1), *masks).item() == pytest.approx(-1.0)
    constant = torch.zeros(1, 4, 4)
    constant[..., 2] = 1.0
    assert math.isnan(monotonicity(constant, *masks).item())


def test_monotonicity_ignores_padded_steps_and_keys():
    weights = torch.tensor([[[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]])  # (1, 3, 3)
    src_mask = torch.tensor([[True, True, False]])  # the third key is padding
    tgt_mask = torch.tensor([[True, True, False]])
    assert monotonicity(weights, src_mask, tgt_mask).item() == pytest.approx(-1.0)


def test_repeated_trigrams_count_words_of_a_repeat_the_reference_does_not_have():
    assert repeated_ngram_rate(["a b c a b c"], ["x"]) == 1.0
    assert repeated_ngram_rate(["a b c a b c"], ["a b c a b c"]) == 0.0
    # "b c d" twice covers words 1-3 and 4-6 of 8; "a" and the last "e" are not in a repeat
    assert repeated_ngram_rate(["a b c d b c d e"], ["a"]) == pytest.approx(6 / 8)
    with pytest.raises(ValueError, match="hypotheses has 1 lines and references 2"):
        repeated_ngram_rate(["a"], ["a", "b"])


def test_length_ratio_is_the_mean_of_sentence_ratios():
    assert length_ratio(["a b", "a b c"], ["a b c d", "a b c"]) == pytest.approx(0.75)


def test_shape_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"weights must be \(B, T, S\), got \(3, 4\)"):
        coverage(WEIGHTS[0], SRC_MASK, TGT_MASK)
    with pytest.raises(ValueError, match=r"src_mask must be bool \(1, 4\)"):
        coverage(WEIGHTS, SRC_MASK[:, :3], TGT_MASK)


def test_summary_leaves_eos_out_of_coverage_and_keeps_it_in_entropy():
    # source "w0 w1 </s>", output "y0 </s>": y0 attends w0, </s> attends </s>
    weights = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]])
    summary, cover = summarize([(weights, torch.tensor([3]), torch.tensor([2]))], ["y0"], ["y0"])
    torch.testing.assert_close(cover, torch.tensor([1.0, 0.0]))  # w0, w1; </s> left out
    assert (summary.under_covered, summary.over_covered) == (0.5, 0.0)
    assert summary.mean_entropy == 0.0 and summary.padding_mass == 0.0
    assert summary.length_ratio == 1.0 and summary.monotonicity_sentences == 0
    assert summary.last_word_share == 0.0  # y0 attends w0, not the last word w1
    assert summary.eos_share == 0.0 and summary.first_word_on_eos == 0.0


def test_summary_counts_word_steps_and_first_words_that_look_at_eos():
    # sentence 0: source "a b </s>", output "y0 y1 </s>": y0 looks at </s>, y1 at b;
    # sentence 1: source "a </s>" + pad, output "y0 y1 </s>": y0 at a, y1 at </s>
    weights = torch.tensor(
        [
            [[0.1, 0.2, 0.7], [0.0, 0.9, 0.1], [0.0, 0.0, 1.0]],
            [[0.6, 0.4, 0.0], [0.3, 0.7, 0.0], [0.0, 1.0, 0.0]],
        ]
    )
    lengths = (torch.tensor([3, 2]), torch.tensor([3, 3]))
    summary, _ = summarize([(weights, *lengths)], ["y0 y1", "y0 y1"], ["y0 y1", "y0 y1"])
    assert summary.eos_share == 0.5  # 2 of the 4 word steps (the </s> outputs left out)
    assert summary.first_word_on_eos == 0.5  # sentence 0's first word
    no_eos, _ = summarize([(weights, *lengths)], ["y0 y1"] * 2, ["y0 y1"] * 2, ends_with_eos=False)
    assert math.isnan(no_eos.eos_share) and math.isnan(no_eos.first_word_on_eos)


def test_last_word_share_counts_steps_stuck_on_the_final_source_word():
    # sentence 0: source "a b .", output steps attend ".", ".", "a"; sentence 1:
    # source "a ." + pad, one real step on "." and one padded step (not counted)
    weights = torch.tensor(
        [
            [[0.0, 0.1, 0.9], [0.0, 0.01, 0.99], [0.8, 0.1, 0.1]],
            [[0.2, 0.8, 0.0], [0.9, 0.1, 0.0], [0.0, 0.0, 0.0]],
        ]
    )
    src_mask = torch.tensor([[True, True, True], [True, True, False]])
    tgt_mask = torch.tensor([[True, True, True], [True, False, False]])
    assert last_word_share(weights, src_mask, tgt_mask) == (3, 4)


def test_summary_counts_the_last_step_of_an_output_cut_at_its_limit_as_a_word():
    # source "w0 w1 </s>"; sentence 0 "y0 </s>" ended, sentence 1 "y0 y1" cut (no </s>)
    weights = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    lengths = (torch.tensor([3, 3]), torch.tensor([2, 2]))
    ended = torch.tensor([True, False])
    summary, cover = summarize([(weights, *lengths, ended)], ["y0", "y0 y1"], ["y0", "y0 y1"])
    torch.testing.assert_close(cover, torch.tensor([1.0, 0.0, 1.0, 1.0]))  # y1 covers w1
    assert summary.monotonicity_sentences == 1 and summary.monotonicity == pytest.approx(1.0)
