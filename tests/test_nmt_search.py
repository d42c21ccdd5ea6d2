"""Greedy and beam search: beam 1 == greedy, batch independence, scores, limits, errors."""

from __future__ import annotations

import itertools

import pytest
import torch

from attnkit.nmt.search import (
    Hypothesis,
    beam_search,
    beam_search_n_best,
    greedy_decode,
    length_penalty,
)
from attnkit.nmt.vocab_ids import BOS, EOS, PAD
from conftest_nmt import pad, random_sequences, tiny_model, tiny_transformer

VARIANTS = [
    {"rnn": "gru", "query_timing": "previous", "score": "additive"},
    {"rnn": "lstm", "query_timing": "current", "input_feeding": True, "score": "general"},
    {"rnn": "gru", "query_timing": "current", "score": "dot", "decoder_layers": 2},
    {"arch": "transformer"},
    {"arch": "transformer", "norm_first": False, "positions": "learned"},
]


def _model(variant: dict, **extra: object):
    # Wider than the model tests' default so that translations vary in length.
    if variant.get("arch") == "transformer":
        return tiny_transformer(**{k: v for k, v in variant.items() if k != "arch"}, **extra)
    return tiny_model(embed_dim=16, hidden_size=16, **variant, **extra)


def _sources(n: int = 6, seed: int = 0) -> list[list[int]]:
    return random_sequences(n, 2, 9, torch.Generator().manual_seed(seed))


def _assert_same(a: Hypothesis, b: Hypothesis) -> None:
    assert a.tokens == b.tokens
    assert a.weights.shape == b.weights.shape
    torch.testing.assert_close(a.weights, b.weights, atol=1e-5, rtol=0)


def _teacher_forced(model, source: list[int], hyp: Hypothesis) -> tuple[float, torch.Tensor]:
    """log p(hyp) and its weights, from the teacher-forced pass over the hypothesis."""
    src, src_lengths = pad([source])
    gold = hyp.tokens + ([EOS] if hyp.ended else [])
    tgt_in = torch.tensor([[BOS, *gold[:-1]]]) if gold else torch.tensor([[BOS]])
    with torch.no_grad():
        logits, weights = model(src, src_lengths, tgt_in)
    log_probs = logits[0].log_softmax(-1)  # (T, V)
    return float(log_probs[torch.arange(len(gold)), gold].sum()), weights[0]


@pytest.mark.parametrize("variant", VARIANTS)
def test_beam_size_one_equals_greedy(variant) -> None:
    model = _model(variant)
    src, src_lengths = pad(_sources())
    greedy = greedy_decode(model, src, src_lengths)
    beam = beam_search(model, src, src_lengths, beam_size=1, length_penalty=0.0)
    assert len({len(h.tokens) for h in greedy}) > 1  # lengths vary: EOS and limits both seen
    for g, b in zip(greedy, beam, strict=True):
        _assert_same(g, b)
        assert b.log_prob == pytest.approx(g.log_prob, abs=1e-4)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_sentence_alone_equals_sentence_in_padded_batch(variant, search) -> None:
    model = _model(variant)
    sources = [[5, 6, 7], *_sources(5, seed=1)]  # neighbours up to 9 tokens long
    sources.insert(3, [9, 4])

    def run(batch):
        src, src_lengths = pad(batch)
        if search == "greedy":
            return greedy_decode(model, src, src_lengths)
        return beam_search(model, src, src_lengths, beam_size=3)

    together = run(sources)
    for i in (0, 3):
        (alone,) = run([sources[i]])
        _assert_same(alone, together[i])
        assert alone.weights.shape[1] == len(sources[i])


@pytest.mark.parametrize("variant", VARIANTS)
def test_hypothesis_scores_and_weights_match_the_teacher_forced_pass(variant) -> None:
    model = _model(variant)
    sources = _sources(4, seed=2)
    src, src_lengths = pad(sources)
    alpha = 0.7
    n_best = beam_search_n_best(model, src, src_lengths, beam_size=3, length_penalty=alpha)
    greedy = greedy_decode(model, src, src_lengths)
    for source, hyps, g in zip(sources, n_best, greedy, strict=True):
        assert len(hyps) >= 3
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for hyp in [*hyps, g]:
            log_prob, weights = _teacher_forced(model, source, hyp)
            assert hyp.log_prob == pytest.approx(log_prob, abs=1e-4)
            torch.testing.assert_close(hyp.weights, weights, atol=1e-5, rtol=0)
        for hyp in hyps:
            steps = hyp.weights.shape[0]
            assert hyp.score == pytest.approx(hyp.log_prob / ((5 + steps) / 6) ** alpha)
        assert g.score == g.log_prob


def test_wide_beam_finds_the_exhaustive_optimum() -> None:
    # Target vocab of 6: symbols 4, 5 and EOS can be emitted; with a limit of
    # 3 steps there are 15 possible outputs, and K = 12 keeps all of them.
    model = tiny_model(vocab=5, seed=3, embed_dim=8, hidden_size=8)
    source = [4, 4, 4]
    src, src_lengths = pad([source])
    (best,) = beam_search(
        model, src, src_lengths, beam_size=12, length_penalty=0.0, max_len_a=0, max_len_b=3
    )
    outputs = [[EOS]] + [[*p, EOS] for n in (1, 2) for p in itertools.product((4, 5), repeat=n)]
    outputs += [list(p) for p in itertools.product((4, 5), repeat=3)]
    assert len(outputs) == 15
    scored = []
    for out in outputs:
        ended = out[-1] == EOS
        hyp = Hypothesis(out[:-1] if ended else out, torch.zeros(len(out), 3), 0.0, 0.0)
        scored.append((_teacher_forced(model, source, hyp)[0], hyp.tokens))
    top_log_prob, top_tokens = max(scored)
    assert best.tokens == top_tokens
    assert best.log_prob == pytest.approx(top_log_prob, abs=1e-5)


def test_length_limit_and_no_special_tokens_emitted() -> None:
    model = _model(VARIANTS[0])
    with torch.no_grad():  # make PAD and BOS by far the likeliest outputs
        model.decoder.output.bias[PAD] += 50.0
        model.decoder.output.bias[BOS] += 40.0
    sources = _sources(3)
    src, src_lengths = pad(sources)
    for hyps in (
        greedy_decode(model, src, src_lengths, max_len_a=0.5, max_len_b=1),
        beam_search(model, src, src_lengths, beam_size=2, max_len_a=0.5, max_len_b=1),
    ):
        for source, hyp in zip(sources, hyps, strict=True):
            limit = int(0.5 * len(source) + 1)
            assert hyp.weights.shape[0] <= limit
            assert hyp.weights.shape[0] == len(hyp.tokens) + hyp.ended
            assert not {PAD, BOS, EOS} & set(hyp.tokens)


def test_length_penalty_values() -> None:
    assert length_penalty(1, 1.0) == 1.0
    assert length_penalty(7, 0.5) == pytest.approx(2**0.5)
    assert length_penalty(10, 0.0) == 1.0


def test_search_restores_training_mode_and_builds_no_graph() -> None:
    model = _model(VARIANTS[1]).train()
    src, src_lengths = pad(_sources(2))
    hyps = beam_search(model, src, src_lengths, beam_size=2)
    assert model.training
    assert not hyps[0].weights.requires_grad


def test_bad_arguments_raise_value_errors() -> None:
    model = _model(VARIANTS[0])
    src, src_lengths = pad(_sources(2))
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, src, src_lengths, beam_size=0)
    with pytest.raises(ValueError, match="max_len_a"):
        greedy_decode(model, src, src_lengths, max_len_a=0.0, max_len_b=0.5)
    with pytest.raises(ValueError, match="src_lengths"):
        greedy_decode(model, src, src_lengths[:1])
