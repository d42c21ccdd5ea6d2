"""explain(): the lesson's worked example, parity with the core, masks, round trips, errors."""

import importlib
import json
import math
import warnings

import numpy as np
import pytest
import torch

import attnkit
from attnkit import explain, make_score, scaled_dot_product_attention
from attnkit.lessons import AttentionTrace

QUERY = [2.0, 0.0, 1.0]
KEYS = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]


def lesson():
    return explain(QUERY, KEYS)


def test_attnkit_explain_is_the_function_and_only_the_function():
    assert attnkit.explain is explain is attnkit.lessons.explain
    assert "explain" in attnkit.__all__
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("attnkit.explain")
    assert attnkit.lessons.trace.AttentionTrace is AttentionTrace


def test_worked_example_numbers_in_the_trace():
    t = lesson()
    assert t.raw_scores == [[2.0, 0.0, 1.0]]
    assert t.scale == pytest.approx(1 / math.sqrt(3))
    assert t.scaled_scores[0] == pytest.approx([1.1547, 0.0, 0.57735], abs=1e-4)
    assert t.exponentials[0] == pytest.approx([3.1731, 1.0, 1.7813], abs=1e-4)
    assert t.exp_sum[0] == pytest.approx(5.9544, abs=1e-4)
    assert t.shift == [pytest.approx(2 / math.sqrt(3))]
    assert t.weights[0] == pytest.approx([0.533, 0.168, 0.299], abs=5e-4)
    assert t.context[0] == pytest.approx([0.533, 0.168, 0.299], abs=5e-4)
    assert t.weighted_values[0][0] == pytest.approx([0.533, 0.0, 0.0], abs=5e-4)
    assert t.single_query and t.values == KEYS


def test_worked_example_text_has_the_lessons_numbers():
    text = str(lesson())
    for line in (
        "q·k1 = 2×1 + 0×0 + 1×0 = 2",
        "q·k2 = 2×0 + 0×1 + 1×0 = 0",
        "q·k3 = 2×0 + 0×0 + 1×1 = 1",
        "scores = [2, 0, 1]",
        "= [1.155, 0.000, 0.577]",
        "exp(1.155) = 3.174",
        "exp(0.000) = 1.000",
        "exp(0.577) = 1.781",
        "sum = 3.174 + 1.000 + 1.781 = 5.955",
        "= [0.533, 0.168, 0.299]",
        "check: 0.533 + 0.168 + 0.299 = 1.000  (ok, the weights sum to 1)",
        "c = 0.533×[1, 0, 0] + 0.168×[0, 1, 0] + 0.299×[0, 0, 1]",
        "stable softmax: subtract the row maximum m = 1.155",
        "at full precision",
    ):
        assert line in text, line


def test_full_precision_note_gives_the_true_reason_when_the_scores_are_exact():
    # the lesson's toy boxes: scores [5, 3, 3] are whole numbers, nothing is rounded
    # before exp; only the sum of the rounded exps (188.585) differs from 188.584
    text = explain([2.0, 1.0], [[2.0, 1.0], [0.0, 3.0], [1.0, 1.0]], score="dot").to_text()
    assert "sum = 148.413 + 20.086 + 20.086 = 188.585" in text
    assert "rounded scores" not in text
    assert "the sum adds the rounded exps;\n   at full precision exp(s) = [148.413" in text
    assert "sum = 188.584; the weights are exact" in text


def test_unscaled_dot_gives_softmax_of_the_raw_scores():
    t = explain(QUERY, KEYS, score="dot")
    assert t.scale == 1.0
    assert t.weights[0] == pytest.approx([0.665, 0.090, 0.245], abs=5e-4)
    assert "= [0.665, 0.090, 0.245]" in t.to_text()
    assert "scale: none" in t.to_text()


def test_score_modules_for_dot_and_scaled_dot_are_traced_by_name():
    assert explain(QUERY, KEYS, score=attnkit.ScaledDotScore()) == lesson()
    assert explain(QUERY, KEYS, score=attnkit.DotScore()).score == "dot"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numbers_equal_scaled_dot_product_attention(causal, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        3 * torch.randn(n, d, generator=g, dtype=torch.float64) for n, d in ((4, 5), (6, 5), (6, 3))
    )
    mask = torch.tensor([True, True, False, True, True, True])
    t = explain(q, k, v, mask=mask, causal=causal)
    context, weights = scaled_dot_product_attention(
        q, k, v, mask.expand(4, 6), is_causal=causal, return_weights=True
    )
    # numpy's exp and torch's may differ in the last bit, never more
    for ours, core in ((t.weights, weights), (t.context, context)):
        torch.testing.assert_close(
            torch.tensor(ours, dtype=torch.float64), core, rtol=1e-12, atol=0
        )
    assert [w == 0.0 for w in t.weights[0]] == (weights[0] == 0).tolist()
    assert not t.single_query and len(t.weights) == 4


def test_several_queries_give_the_score_matrix_and_rowwise_softmax():
    t = explain([QUERY, [1.0, 1.0, 1.0]], KEYS)
    assert t.raw_scores == [[2.0, 0.0, 1.0], [1.0, 1.0, 1.0]]
    assert t.weights[1] == pytest.approx([1 / 3] * 3)
    text = t.to_text()
    assert "Score matrix S = Q·K^T" in text and "Query 2 of 2 (q2)" in text
    assert "q2·k1 = 1×1 + 1×0 + 1×0 = 1" in text


def test_masked_key_shows_as_masked_and_gets_zero_weight():
    t = explain(QUERY, KEYS, mask=[True, False, True])
    assert t.masked_scores[0][1] == -math.inf
    assert t.weights[0][1] == 0.0 and t.exponentials[0][1] == 0.0
    w1 = 1 / (1 + math.exp(-1 / math.sqrt(3)))  # softmax of [2, 1] / sqrt(3)
    assert t.weights[0] == pytest.approx([w1, 0.0, 1 - w1])
    text = t.to_text()
    assert "k2 masked, score -> -inf" in text and "masked = [1.155, -inf, 0.577]" in text
    assert "| masked |" in t.to_markdown()


def test_fully_masked_row_gives_zero_weights_and_context_and_says_so():
    t = explain([QUERY, QUERY], KEYS, mask=[[1, 1, 1], [0, 0, 0]])
    assert t.weights[1] == [0.0, 0.0, 0.0] and t.context[1] == [0.0, 0.0, 0.0]
    assert t.shift[1] is None and not t.row_has_key(1) and t.row_has_key(0)
    assert t.weight_sums() == [pytest.approx(1.0), 0.0]
    assert "this row has no allowed key" in t.to_text()
    assert "no allowed key" in t.to_markdown()


def test_causal_mask_is_bottom_right_aligned():
    t = explain([QUERY, QUERY], KEYS, causal=True)  # Tq=2, Tk=3
    assert t.mask == [[True, True, False], [True, True, True]]


def test_learned_score_module_is_traced_unscaled():
    torch.manual_seed(0)
    score = make_score("additive", query_dim=3, key_dim=2, hidden_dim=4)
    keys = [[0.5, -1.0], [1.0, 2.0], [0.0, 0.3]]
    t = explain(QUERY, keys, score=score)
    expected = score(torch.tensor([[QUERY]]), torch.tensor([keys]))[0]
    assert t.score == "additive" and t.scale == 1.0
    assert t.raw_scores[0] == pytest.approx(expected[0].tolist(), abs=1e-6)
    assert t.weights[0] == pytest.approx(torch.softmax(expected[0].double(), -1).tolist())
    assert "s1 = v·tanh(...) = " in t.to_text()  # worked out, then used unscaled


def set_weights(score, **weights):
    with torch.no_grad():
        for name, value in weights.items():
            getattr(score, name).weight.copy_(torch.tensor(value))
    return score


def test_general_score_is_worked_out_as_q_times_w_k():
    # Luong's q^T W k_j with W (3 x 2): W k1 = [1, 2, 3], q·(W k1) = 2×1 + 0×2 + 1×3 = 5
    score = set_weights(make_score("general", 3, 2), weight=[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    t = explain([QUERY, [1.0, 1.0, 1.0]], [[1.0, 2.0], [0.0, -1.0]], score=score)
    assert t.raw_scores == [[5.0, -1.0], [6.0, -2.0]]
    assert t.score_parts["key_proj"] == [[1.0, 2.0, 3.0], [0.0, -1.0, -1.0]]
    text = t.to_text()
    assert "Score matrix S = Q·W·K^T (rows = queries):" in text
    for line in (
        "  W = [[1, 0], [0, 1], [1, 1]]  (the module's weights, Dq x Dk)\n",
        "  W k1 = [1, 2, 3]\n  q1·(W k1) = 2×1 + 0×2 + 1×3 = 5\n",
        "  W k2 = [0, -1, -1]\n  q2·(W k2) = 1×0 + 1×(-1) + 1×(-1) = -2\n",
    ):
        assert line in text, line
    assert AttentionTrace.from_dict(json.loads(json.dumps(t.to_dict()))) == t


@pytest.mark.parametrize("name", ["additive", "concat"])
def test_additive_and_concat_scores_are_worked_out_through_the_tanh(name):
    # v·tanh(W_q q + W_k k_j), W_q = W_k = I, v = [1, -1], q = [1, 0]:
    # k1 = [0, 0]: tanh([1, 0]) = [0.762, 0], s1 = 0.762; k2 = [0, 2]: s2 = 0.762 - 0.964
    score = set_weights(
        make_score(name, 2, 2, 2),
        query_proj=[[1.0, 0.0], [0.0, 1.0]],
        key_proj=[[1.0, 0.0], [0.0, 1.0]],
        v=[[1.0, -1.0]],
    )
    t = explain([1.0, 0.0], [[0.0, 0.0], [0.0, 2.0]], score=score)
    assert t.raw_scores[0] == pytest.approx([math.tanh(1.0), math.tanh(1.0) - math.tanh(2.0)])
    text = t.to_text()
    for line in (
        "  W_q = [[1, 0], [0, 1]]  (the module's weights, A = 2 hidden units)\n"
        "  W_k = [[1, 0], [0, 1]]\n  v = [1, -1]\n  W_q q = [1, 0]\n",
        "  W_k k2 = [0, 2]\n  tanh(W_q q + W_k k2) = [0.762, 0.964]\n"
        "  s2 = v·tanh(...) = 1×0.762 + (-1)×0.964 = -0.202\n",
    ):
        assert line in text, line
    assert ("(W [q; k_j] = W_q q + W_k k_j" in text) == (name == "concat")
    # too wide to write out (Dq = 16): the one line as before
    wide = explain([1.0] * 16, [[1.0, 0.0]], score=make_score(name, 16, 2, 2))
    assert "computed by the" in wide.to_text() and "W_q =" not in wide.to_text()


def test_a_learned_score_with_other_query_and_key_widths_names_both():
    # q^T W k_j with W (3 x 2): the query has 3 numbers, each key 2; "D = 3" said both had 3
    score = make_score("general", query_dim=3, key_dim=2)
    text = explain(QUERY, [[0.5, -1.0], [1.0, 2.0]], score=score).to_text()
    assert "  Tq = 1 query, Tk = 2 keys, Dq = 3, Dk = 2\n" in text
    assert "  Tq = 1 query, Tk = 3 keys, D = 3\n" in str(lesson())


def test_overflowing_exponentials_fall_back_to_the_stable_form():
    t = explain([40.0, 0.0], [[30.0, 0.0], [0.0, 1.0]], score="dot")
    assert t.exponentials[0][0] == math.inf and t.weights[0] == [1.0, 0.0]
    assert "overflows float64" in t.to_text()
    assert AttentionTrace.from_dict(json.loads(json.dumps(t.to_dict()))) == t


def test_exponentials_that_fit_but_whose_sum_overflows_fall_back_to_the_stable_form():
    # exp(709.5) = 1.355e+308 fits in float64; two of them (2.7e+308) do not
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "overflow encountered in reduce" on stderr
        t = explain([709.5], [[1.0], [1.0]], score="dot")
    assert t.exponentials[0] == [pytest.approx(1.3549e308, rel=1e-4)] * 2
    assert t.exp_sum[0] == math.inf and t.weights[0] == [0.5, 0.5]
    text = t.to_text()
    assert "exp(s_j) or their sum overflows float64 here" in text
    assert "exp(s_j - m) = [1, 1], sum = 2.000, weights = [0.500, 0.500]" in text
    markdown = t.to_markdown()
    assert "| k1 | [1] | [1] | 709.500 | 709.500 | 1.355e+308 | 1.000 | 0.500 |" in markdown
    assert "Sum of exp(s_j) = overflows; stable softmax shift m = 709.500" in markdown


def test_tiny_exponentials_keep_their_digits_so_the_division_can_be_done_by_hand():
    # scores [-15, -10]: exp(s) = 3.059e-07 and 4.540e-05, both 0.000 to 3 decimals
    t = explain([-5.0, 0.0], [[3.0, 0.0], [2.0, 0.0]], score="dot")
    assert t.weights[0] == pytest.approx([0.00669, 0.99331], abs=1e-5)
    text = t.to_text()
    assert (
        "  exp(-15.000) = 3.059e-07   exp(-10.000) = 4.540e-05\n"
        "  sum = 3.059e-07 + 4.540e-05 = 4.571e-05\n"
        "  weights = [3.059e-07/4.571e-05, 4.540e-05/4.571e-05]\n"
        "          = [0.007, 0.993]\n"
        "  (small numbers in scientific notation: 4.5e-05 = 4.5 × 10^-5 = 0.000045)\n"
    ) in text
    assert "0.000/0.000" not in text and "at full precision" not in text
    markdown = t.to_markdown()
    assert "| k1 | [3, 0] | [3, 0] | -15 | -15.000 | 3.059e-07 | 0.007 | 0.007 |" in markdown
    assert "Sum of exp(s_j) = 4.571e-05;" in markdown
    # exp(-800) is 0 in float64 itself: no plain division at all, the stable form
    text = explain([-800.0], [[1.0], [1.0]], score="dot").to_text()
    assert "every exp(s_j) underflows to 0 in float64 here; the stable form below" in text
    assert "exp(s_j - m) = [1, 1], sum = 2.000, weights = [0.500, 0.500]" in text
    assert "/0.000" not in text


def test_softmax_step_says_when_its_divisions_give_other_weights_by_hand():
    # scores [-6, -7]: exp(s) = 0.002479 and 0.000912 print as 0.002 and 9.119e-04, the
    # sum 0.003391 as 0.003; by hand 0.002/0.003 = 0.667, the weight is 0.731
    t = explain([-1.0, 0.0], [[6.0, 0.0], [7.0, 0.0]], score="dot")
    assert t.weights[0] == pytest.approx([0.73106, 0.26894], abs=1e-5)
    assert (
        "  weights = [0.002/0.003, 9.119e-04/0.003]\n"
        "          = [0.731, 0.269]\n"
        "  (by hand these divisions give [0.667, 0.304]; the weights are exact)\n"
    ) in t.to_text()
    # the lessons' divisions agree with their weights: 3.174/5.955 = 0.533, ...
    assert "by hand these divisions" not in str(lesson())
    boxes = explain([2.0, 1.0], [[2.0, 1.0], [0.0, 3.0], [1.0, 1.0]], score="dot")
    assert "by hand these divisions" not in str(boxes)


def test_json_round_trip_is_exact():
    t = explain([QUERY, [0.1, -0.2, 0.3]], KEYS, [[1, 2], [3, 4], [5, 6]], mask=[1, 1, 0])
    data = json.loads(json.dumps(t.to_dict()))
    assert data["masked_scores"][0][2] == "-inf"
    assert data["weights"] == t.weights and data["row_labels"] == ["q1", "q2"]
    assert AttentionTrace.from_dict(data) == t


def test_to_dict_rounds_to_the_precision_asked():
    data = lesson().to_dict(precision=3)
    assert data["weights"] == [[0.533, 0.168, 0.299]]
    assert data["scaled_scores"] == [[1.155, 0.0, 0.577]]


def test_from_dict_rejects_other_documents():
    with pytest.raises(ValueError, match="not an attnkit attention trace"):
        AttentionTrace.from_dict({"weights": [[1.0]]})
    data = lesson().to_dict()
    del data["context"]
    with pytest.raises(ValueError, match="missing the field.*context"):
        AttentionTrace.from_dict(data)


def test_markdown_has_a_table_row_per_key():
    md = lesson().to_markdown()
    assert "| k1 | [1, 0, 0] | [1, 0, 0] | 2 | 1.155 | 3.174 | 1.000 | 0.533 |" in md
    assert "Context c = Σ_j w_j v_j = [0.533, 0.168, 0.299]." in md


def test_markdown_shows_inf_only_for_the_exponentials_that_overflow():
    # exp(1414.2) overflows, exp(0) = 1 and a masked key's exp(-inf) = 0 do not
    md = explain([2000.0, 0.0], [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], mask=[1, 1, 0]).to_markdown()
    assert "| k1 | [1, 0] | [1, 0] | 2000 | 1414.214 | inf | 1.000 | 1.000 |" in md
    assert "| k2 | [0, 1] | [0, 1] | 0 | 0.000 | 1.000 | 0.000 | 0.000 |" in md
    assert "| k3 | [1, 1] | [1, 1] | 2000 | masked | 0.000 | 0.000 | 0.000 |" in md


def test_very_wide_vectors_are_not_written_term_by_term_and_say_so():
    t = explain([1.0] * 65, [[1.0] * 65, [0.0] * 65])
    text = t.to_text()
    assert "1×1" not in text and "scores = [65, 0]" in text
    assert "term-by-term products skipped: D = 65" in text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"query": [1.0, 2.0], "keys": KEYS}, "keys has Dk=3 but query has Dq=2"),
        ({"query": QUERY, "keys": [[1.0, 2.0], [1.0]]}, "keys must be a rectangular array"),
        ({"query": QUERY, "keys": []}, "keys"),
        ({"query": [1.0, math.nan, 0.0], "keys": KEYS}, "query has a non-finite entry"),
        ({"query": [10**400, 0, 0], "keys": KEYS}, "query has a number too large for float64"),
        (
            {"query": [1e308, 0.0], "keys": [[0.0, 1.0], [1e308, 0.0]]},
            "the score of query q1 and key k2 is inf: the product overflows float64",
        ),
        (
            {"query": QUERY, "keys": KEYS, "values": [[1.0]]},
            "values has Tk=1 rows but keys has Tk=3",
        ),
        (
            {"query": QUERY, "keys": KEYS, "mask": [True, False]},
            r"does not broadcast to \(Tq, Tk\)",
        ),
        (
            {"query": [QUERY, QUERY], "keys": KEYS, "mask": [[1, 0, 1], [1, 1]]},
            "mask must be a rectangular array of booleans or 0/1",
        ),
        ({"query": QUERY, "keys": KEYS, "score": "general"}, "has learned weights"),
        ({"query": QUERY, "keys": KEYS, "score": "cosine"}, "unknown score 'cosine'"),
    ],
)
def test_bad_input_raises_a_clear_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        explain(**kwargs)


def test_bad_precision_raises():
    with pytest.raises(ValueError, match="precision"):
        lesson().to_text(precision=-1)
    with pytest.raises(ValueError, match="precision"):
        lesson().to_dict(precision=-1)


def test_check_and_context_say_when_the_rounded_weights_add_up_differently_by_hand():
    # softmax([1, 0.5, 0]) = [0.506, 0.307, 0.186] (rounded): 0.999 by hand, and the
    # values [1, 0], [0, 1], [1, 1] give [0.692, 0.493] by hand, [0.693, 0.494] exactly
    t = explain([1.0, 0.5, 0.0], KEYS, [[1, 0], [0, 1], [1, 1]], score="dot")
    assert t.context[0] == pytest.approx([0.69280, 0.49351], abs=1e-5)
    text = t.to_text()
    for line in (
        "check: 0.506 + 0.307 + 0.186 = 1.000  (ok, the weights sum to 1)\n"
        "  (the rounded weights shown add up to 0.999; the exact weights sum to 1.000)",
        "    = [0.693, 0.494]\n"
        "  (by hand from the rounded weights shown: [0.692, 0.493]; the context is exact)",
    ):
        assert line in text, line
    assert "By hand from the rounded weights shown: [0.692, 0.493]" in t.to_markdown()
    # the lesson's own example adds up by hand: no note
    assert "by hand from the rounded" not in str(lesson())
    assert "add up to" not in str(lesson())


def test_a_float_mask_of_ones_and_zeros_masks_as_the_lessons_write_it():
    """torch.tril(torch.ones(T, T)) is the lessons' causal mask: 1.0 = may attend."""
    as_float = explain(QUERY, KEYS, mask=np.array([1.0, 0.0, 1.0]))
    as_bool = explain(QUERY, KEYS, mask=[True, False, True])
    np.testing.assert_array_equal(as_float.weights, as_bool.weights)
    with pytest.raises(ValueError, match=r"booleans or 0/1 \(1 = may attend\), got float64 values"):
        explain(QUERY, KEYS, mask=np.array([0.0, -np.inf, 0.0]))  # an additive mask
    with pytest.raises(ValueError, match=r"0/1 \(1 = may attend\), got object values \[1, None\]"):
        explain(QUERY, KEYS, mask=[1, None, 1])  # a hole in a mask typed by hand


def test_scale_step_says_when_dividing_by_the_rounded_root_prints_another_number():
    # 7/sqrt(3) = 4.0415 prints 4.041, but 7/1.732 (the root shown) = 4.0416 prints 4.042
    t = explain([7.0, 0.0, 1.0], KEYS)
    assert t.scaled_scores[0][0] == pytest.approx(4.04145, abs=1e-5)
    assert (
        "  scaled = [7/1.732, 0/1.732, 1/1.732]\n"
        "         = [4.041, 0.000, 0.577]\n"
        "  (by hand from the rounded numbers shown: [4.042, 0.000, 0.577]; "
        "the scaled scores are exact)\n"
    ) in t.to_text()
    markdown = t.to_markdown()
    assert "Scale: 1/sqrt(3) = 1/1.732 = 0.577." in markdown
    assert "By hand from the rounded numbers shown: [4.042, 0.000, 0.577]" in markdown
    # the lesson's own division, 2/1.732 = 1.155, agrees: no note
    assert "rounded numbers" not in str(lesson()) + lesson().to_markdown()
    # -3.573/2 = -1.7865 is -1.787 by hand (rounded half up) as the exact -1.78663 is,
    # though the binary float nearest -1.7865 would print -1.786: no note either
    tie = explain([1.0, 0.0, 0.0, 0.0], [[-3.57326, 0.0, 0.0, 0.0]]).to_text()
    assert "scaled = [-3.573/2]\n         = [-1.787]\n" in tie
    assert "rounded numbers" not in tie


def test_scale_step_by_hand_check_takes_scores_of_any_size():
    # 1e+28/1.732 rounded to 3 decimals has 32 digits, more than Decimal's default 28:
    # the by-hand check raised decimal.InvalidOperation instead of printing the lesson
    t = explain([1e14, 1e14, 1e14], [[1e14, 0.0, 0.0], [0.0, 1e14, 0.0]])
    text = t.to_text()
    assert "scores = [1.000e+28, 1.000e+28]" in text
    assert "1/sqrt(3) = 1/1.732" in text
    assert "Scale: 1/sqrt(3)" in t.to_markdown()
    assert (
        "scaled = [1.000e+28/1.732, 1.000e+28/1.732]\n         = [5.774e+27, 5.774e+27]\n" in text
    )
    assert "weights" in explain([1e6] * 3, [[1e6, 0, 0]]).to_text(15)  # 1e12, 15 decimals
