"""The HMM jump prior on attention word weights: exact posterior, limits, errors."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from attnkit.nmt.analysis.align import AlignOptions
from attnkit.nmt.analysis.jump_prior import jump_smoothed


def _brute_posterior(weights: torch.Tensor, strength: float) -> torch.Tensor:
    """gamma_j(i) by summing every path's probability (uniform start)."""
    steps, positions = weights.shape

    def p_jump(i: int, k: int) -> float:
        row = [math.exp(-strength * abs(m - i - 1)) for m in range(positions)]
        return row[k] / sum(row)

    gamma = torch.zeros(steps, positions, dtype=torch.float64)
    for path in itertools.product(range(positions), repeat=steps):
        p = float(weights[0, path[0]])
        for j in range(1, steps):
            p *= p_jump(path[j - 1], path[j]) * float(weights[j, path[j]])
        for j, i in enumerate(path):
            gamma[j, i] += p
    return gamma / gamma.sum(dim=1, keepdim=True)


def test_matches_the_posterior_summed_over_every_path():
    torch.manual_seed(0)
    weights = torch.softmax(torch.randn(4, 3, dtype=torch.float64), dim=1)
    got = jump_smoothed(weights, strength=0.7, mix=1.0)
    torch.testing.assert_close(got, _brute_posterior(weights, 0.7), rtol=1e-10, atol=1e-12)


def test_a_long_sentence_gets_the_exact_posterior_not_an_underflow():
    # Uniform weights over 30 source words: the emissions are one constant, so the posterior
    # is the prior chain's marginal, gamma_j = u P^j (u uniform, P the jump matrix). Over 400
    # target words every path's probability is below 30^-400, far under float64's 1e-308:
    # only the per-step rescaling of the forward and backward passes keeps it finite.
    steps, words, strength = 400, 30, 0.7
    weights = torch.full((steps, words), 1.0 / words, dtype=torch.float64)
    position = torch.arange(words, dtype=torch.float64)
    jump = (position[None, :] - position[:, None] - 1.0).abs()  # |i' - i - 1|
    prior = torch.exp(-strength * jump)
    prior /= prior.sum(dim=1, keepdim=True)  # p(i' | i)
    marginal, expected = torch.full((words,), 1.0 / words, dtype=torch.float64), []
    for _ in range(steps):
        expected.append(marginal)
        marginal = marginal @ prior
    got = jump_smoothed(weights, strength, mix=1.0)
    torch.testing.assert_close(got, torch.stack(expected), rtol=1e-9, atol=1e-12)


def test_mix_blends_posterior_and_weights():
    torch.manual_seed(1)
    weights = torch.softmax(torch.randn(5, 4, dtype=torch.float64), dim=1)
    posterior = jump_smoothed(weights, strength=0.5, mix=1.0)
    expected = 0.3 * posterior + 0.7 * weights
    torch.testing.assert_close(jump_smoothed(weights, 0.5, mix=0.3), expected)
    torch.testing.assert_close(jump_smoothed(weights, 0.5, mix=0.0), weights)


def test_a_flat_prior_returns_normalised_rows_unchanged():
    weights = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    torch.testing.assert_close(jump_smoothed(weights, strength=0.0), weights)


def test_strength_0_is_off_even_where_eos_took_weight():
    weights = torch.tensor([[0.5, 0.2, 0.1], [0.1, 0.1, 0.6]])  # rows sum to 0.8
    assert torch.equal(jump_smoothed(weights, strength=0.0), weights)


def test_the_prior_picks_the_repeated_word_next_to_the_path():
    # Source "the cat saw the dog", target "le chat a vu le chien": the second
    # "le" attends both "the"s equally; its neighbours sit on the diagonal.
    weights = torch.full((6, 5), 0.01)
    for j, i in [(0, 0), (1, 1), (2, 2), (3, 2), (5, 4)]:
        weights[j, i] = 0.96
    weights[4, 0] = weights[4, 3] = 0.485
    smoothed = jump_smoothed(weights, strength=1.0)
    assert smoothed[4, 3] > 0.6 > 0.3 > smoothed[4, 0]
    assert smoothed.argmax(dim=1).tolist() == [0, 1, 2, 2, 3, 4]
    torch.testing.assert_close(smoothed.sum(dim=1), torch.ones(6))


def test_keeps_dtype_and_empty_input():
    weights = torch.rand(3, 2, dtype=torch.float32)
    assert jump_smoothed(weights, 1.0).dtype == torch.float32
    assert jump_smoothed(torch.zeros(0, 4), 1.0).shape == (0, 4)


def test_a_zero_weight_does_not_make_a_row_nan():
    weights = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    assert torch.isfinite(jump_smoothed(weights, 2.0)).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"weights": torch.rand(2, 3, 4), "strength": 1.0}, "weights must be"),
        ({"weights": torch.rand(2, 3), "strength": -0.1}, "strength must be >= 0"),
        ({"weights": torch.rand(2, 3), "strength": float("nan")}, "finite, got nan"),
        ({"weights": torch.rand(2, 3), "strength": float("inf")}, "finite, got inf"),
        ({"weights": torch.rand(2, 3), "strength": 1.0, "mix": 1.5}, r"mix must be in \[0, 1\]"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        jump_smoothed(**kwargs)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_align_options_reject_a_negative_or_infinite_jump_prior(bad):
    with pytest.raises(ValueError, match=f"jump_prior must be >= 0 and finite, got {bad}"):
        AlignOptions(jump_prior=bad)
