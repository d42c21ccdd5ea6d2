"""Score functions: each equals a per-pair loop over its formula."""

import math

import pytest
import torch

from attnkit import (
    SCORES,
    AdditiveScore,
    ConcatScore,
    DotScore,
    GeneralScore,
    ScaledDotScore,
    make_score,
)
from score_helpers import WIDTHS, build_score

B, TQ, TK = 2, 3, 4


def per_pair(formula, query, keys):
    """Scores built one (b, i, j) pair at a time from the paper's formula."""
    out = torch.empty(query.shape[0], query.shape[1], keys.shape[1], dtype=query.dtype)
    for b in range(query.shape[0]):
        for i in range(query.shape[1]):
            for j in range(keys.shape[1]):
                out[b, i, j] = formula(query[b, i], keys[b, j])
    return out


def formula_of(score):
    if isinstance(score, ScaledDotScore):
        return lambda q, k: torch.dot(q, k) / math.sqrt(k.numel())
    if isinstance(score, DotScore):
        return torch.dot
    if isinstance(score, GeneralScore):
        return lambda q, k: q @ score.weight.weight @ k
    if isinstance(score, ConcatScore):  # v^T tanh(W [q; k])
        return lambda q, k: score.v.weight[0] @ torch.tanh(score.weight @ torch.cat([q, k]))
    # additive: v^T tanh(W_q q + W_k k)
    return lambda q, k: (
        score.v.weight[0] @ torch.tanh(score.query_proj.weight @ q + score.key_proj.weight @ k)
    )


@pytest.mark.parametrize("name", list(SCORES))
def test_score_equals_per_pair_formula(name):
    torch.manual_seed(0)
    dq, dk = WIDTHS[name]
    score = build_score(name, dq, dk)
    query, keys = torch.randn(B, TQ, dq), torch.randn(B, TK, dk)
    with torch.no_grad():
        got = score(query, keys)
        expected = per_pair(formula_of(score), query, keys)
    assert got.shape == (B, TQ, TK)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", list(SCORES))
def test_prepared_keys_give_the_same_scores(name):
    torch.manual_seed(1)
    dq, dk = WIDTHS[name]
    score = build_score(name, dq, dk)
    query, keys = torch.randn(B, TQ, dq), torch.randn(B, TK, dk)
    prepared = score.prepare_keys(keys)
    # a decoder asks one step at a time with the prepared keys
    for i in range(TQ):
        step = score(query[:, i : i + 1], keys, prepared)
        torch.testing.assert_close(step, score(query, keys)[:, i : i + 1])


@pytest.mark.parametrize("name", list(SCORES))
def test_score_gradcheck_float64(name):
    torch.manual_seed(2)
    dq, dk = (3, 3) if name in ("dot", "scaled_dot") else (3, 2)
    score = build_score(name, dq, dk, dtype=torch.float64)
    query = torch.randn(2, 2, dq, dtype=torch.float64, requires_grad=True)
    keys = torch.randn(2, 3, dk, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(score, (query, keys))


def test_worked_example_scores():
    query = torch.tensor([[[2.0, 0.0, 1.0]]])
    keys = torch.eye(3)[None]
    assert DotScore()(query, keys).flatten().tolist() == [2.0, 0.0, 1.0]
    scaled = ScaledDotScore()(query, keys).flatten().tolist()
    assert scaled == pytest.approx([1.155, 0.0, 0.577], abs=5e-4)


def test_concat_weight_is_the_papers_single_matrix():
    score = ConcatScore(6, 4, hidden_dim=5)
    assert score.weight.shape == (5, 10)
    assert isinstance(score, AdditiveScore) and score.name == "concat"


@pytest.mark.parametrize("name", ["dot", "scaled_dot"])
def test_dot_scores_reject_different_widths(name):
    with pytest.raises(ValueError, match=rf"keys has Dk=4 but query has Dq=3 for score '{name}'"):
        make_score(name)(torch.randn(B, TQ, 3), torch.randn(B, TK, 4))


@pytest.mark.parametrize("name", ["general", "concat", "additive"])
def test_learned_scores_reject_widths_they_were_not_built_for(name):
    score = build_score(name, 6, 4)
    with pytest.raises(ValueError, match=r"keys has width 5 but score .* built for 4"):
        score(torch.randn(B, TQ, 6), torch.randn(B, TK, 5))
    with pytest.raises(ValueError, match=r"query has width 3"):
        score(torch.randn(B, TQ, 3), torch.randn(B, TK, 4))


def test_scores_reject_mismatched_batches_and_ranks():
    with pytest.raises(ValueError, match=r"leading \(batch\) dims"):
        DotScore()(torch.randn(2, 3, 4), torch.randn(3, 5, 4))
    with pytest.raises(ValueError, match=r"query must have shape"):
        DotScore()(torch.randn(4), torch.randn(3, 5, 4))
    with pytest.raises(TypeError, match="keys must be a torch.Tensor for score 'dot', got list"):
        DotScore()(torch.randn(1, 1, 3), [[[1.0, 0.0, 0.0]]])


def test_make_score_errors():
    with pytest.raises(ValueError, match="unknown score 'cosine'; choose one of dot, scaled_dot"):
        make_score("cosine")
    with pytest.raises(ValueError, match="needs query_dim"):
        make_score("additive")
    with pytest.raises(ValueError, match="hidden_dim must be a positive int, got 0"):
        AdditiveScore(4, hidden_dim=0)
    with pytest.raises(ValueError, match=r"'dot' .* needs query_dim == key_dim, got 3 and 4"):
        make_score("dot", 3, 4)
    with pytest.raises(ValueError, match="query_dim must be a positive int, got True"):
        make_score("general", True)
    with pytest.raises(ValueError, match="query_dim must be a positive int, got -1"):
        make_score("dot", query_dim=-1)  # the parameter-free scores check widths given too
    with pytest.raises(ValueError, match="key_dim must be a positive int, got 0"):
        make_score("scaled_dot", 4, 0)
    assert make_score("scaled_dot", 4, 4, hidden_dim=7).name == "scaled_dot"  # A is ignored


def test_scores_keep_nothing_per_batch_on_the_module():
    score = build_score("additive", 6, 4)
    before = set(vars(score))
    score(torch.randn(B, TQ, 6), torch.randn(B, TK, 4))
    assert set(vars(score)) == before


@pytest.mark.parametrize("name", list(SCORES))
def test_prepared_keys_of_other_keys_are_refused_not_broadcast(name):
    # prepared keys of one sentence must not be broadcast over a batch of two
    torch.manual_seed(3)
    dq, dk = WIDTHS[name]
    score = build_score(name, dq, dk)
    query, keys = torch.randn(B, TQ, dq), torch.randn(B, TK, dk)
    width = score.prepare_keys(keys).shape[-1]
    stale = (score.prepare_keys(keys[:1]), score.prepare_keys(keys[:, :2]))
    for prepared in stale:
        with pytest.raises(
            ValueError, match=rf"prepared_keys has shape .* need \({B}, {TK}, {width}\)"
        ):
            score(query, keys, prepared)
    if name in ("general", "concat", "additive"):  # the raw keys are not the prepared ones
        with pytest.raises(ValueError, match=r"prepared_keys has shape \(2, 4, 4\)"):
            score(query, keys, keys)


@pytest.mark.parametrize("name", list(SCORES))
def test_scores_refuse_integer_and_mixed_dtypes_naming_the_argument(name):
    dq, dk = WIDTHS[name]
    score = build_score(name, dq, dk)
    query, keys = torch.ones(B, TQ, dq), torch.ones(B, TK, dk)
    with pytest.raises(TypeError, match=rf"query must be floating point for score '{name}'"):
        score(query.long(), keys)
    with pytest.raises(TypeError, match=rf"keys must be floating point for score '{name}'"):
        score(query, keys.long())
    with pytest.raises(
        TypeError, match=r"keys has dtype torch.float64 but query has torch.float32"
    ):
        score(query, keys.double())
    if name in ("general", "concat", "additive"):
        with pytest.raises(TypeError, match=r"score .* has torch.float32 parameters"):
            score(query.double(), keys.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast casts each product itself
        assert score(query, keys.bfloat16()).shape == (B, TQ, TK)
