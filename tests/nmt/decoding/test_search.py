"""Greedy and beam search: beam 1 == greedy, batch independence, scores, limits, errors."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from attnkit.nmt.decoding.search import (
    Hypothesis,
    beam_search,
    beam_search_n_best,
    coverage_penalty,
    greedy_decode,
    length_penalty,
)
from attnkit.nmt.decoding.settings import SearchSettings
from attnkit.nmt.decoding.steps import block_repeats, max_lengths
from attnkit.nmt.decoding.translate import Translation
from attnkit.nmt.vocab_ids import BOS, EOS, PAD, UNK
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
@pytest.mark.parametrize(("alpha", "beta"), [(0.0, 0.0), (2.0, 0.0), (1.0, 0.5)])
def test_beam_size_one_equals_greedy(variant, alpha, beta) -> None:
    # Penalties rank finished hypotheses; with one beam they must not keep a beam
    # going past the <eos> greedy search stops at (alpha 2 did, on 3 variants).
    model = _model(variant)
    src, src_lengths = pad(_sources())
    greedy = greedy_decode(model, src, src_lengths)
    beam = beam_search(
        model, src, src_lengths, beam_size=1, length_penalty=alpha, coverage_penalty=beta
    )
    assert len({len(h.tokens) for h in greedy}) > 1  # lengths vary: EOS and limits both seen
    for g, b in zip(greedy, beam, strict=True):
        _assert_same(g, b)
        assert b.log_prob == pytest.approx(g.log_prob, abs=1e-4)


def test_hypotheses_compare_by_value() -> None:
    # `==` of two hypotheses raised "Boolean value of Tensor with more than one value is
    # ambiguous" (the dataclass compared its weights tensor as a truth value)
    model = _model(VARIANTS[0])
    src, src_lengths = pad(_sources())
    first, again = (greedy_decode(model, src, src_lengths) for _ in range(2))
    assert first == again
    other = Hypothesis(first[0].tokens, first[0].weights + 1e-3, first[0].score, first[0].log_prob)
    assert first[0] != other
    assert first[0] != Hypothesis(first[0].tokens, first[0].weights.double(), 0.0, 0.0)
    text = Translation("a b", "x", ["a", "b"], ["x"], first[0].weights, hypotheses=[])
    same = Translation("a b", "x", ["a", "b"], ["x"], first[0].weights.clone(), hypotheses=[])
    assert text == same and text != Translation("a b", "x", ["a", "b"], ["x"], None)


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


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(map(str, v.values())))
def test_beams_sharing_one_source_row_search_as_with_repeated_rows(variant) -> None:
    model = _model(variant)
    assert model.beams_share_memory
    src, src_lengths = pad(_sources(6, seed=3))
    shared = beam_search_n_best(model, src, src_lengths, beam_size=4, length_penalty=1.0)
    model.beams_share_memory = False  # the instance now repeats its memory per beam
    repeated = beam_search_n_best(model, src, src_lengths, beam_size=4, length_penalty=1.0)
    for mine, theirs in zip(shared, repeated, strict=True):
        assert len(mine) == len(theirs)
        for a, b in zip(mine, theirs, strict=True):
            _assert_same(a, b)
            assert a.score == pytest.approx(b.score, abs=1e-5)


def _every_output(symbols: tuple[int, ...], limit: int) -> list[list[int]]:
    """Every output of at most ``limit`` steps: those ending in </s>, then those cut at it."""
    ended = [[*p, EOS] for n in range(limit) for p in itertools.product(symbols, repeat=n)]
    return ended + [list(p) for p in itertools.product(symbols, repeat=limit)]


@pytest.mark.parametrize("variant", VARIANTS[::3], ids=lambda v: v.get("arch", v.get("rnn")))
@pytest.mark.parametrize(("alpha", "beta"), [(0.0, 0.0), (1.5, 0.4)])
def test_a_beam_wider_than_every_prefix_ranks_every_output_as_brute_force_does(
    variant, alpha, beta
) -> None:
    # Target vocab of 6: <unk>, 4, 5 and </s> may be emitted (never <pad> or <s>). With a
    # limit of 3 steps there are 1 + 3 + 9 outputs ending in </s> and 27 cut at the limit.
    # K = 54 exceeds every step's candidates (at most 9 prefixes x 4 tokens), so every
    # output finishes and the n-best list is all 40, in the order of their scores under
    # forced decoding (the old test enumerated no <unk> and checked only the best). The
    # three sources of different lengths are searched in one batch, each scored alone.
    model = _model(variant, vocab=5, seed=3)
    sources = [[4, 4, EOS], [4], [4, 1, 4, 4, 1, EOS]]
    src, src_lengths = pad(sources)
    n_best = beam_search_n_best(
        model, src, src_lengths, beam_size=54, length_penalty=alpha, coverage_penalty=beta,
        max_len_a=0, max_len_b=3,
    )  # fmt: skip
    outputs = _every_output((UNK, 4, 5), 3)
    assert len(outputs) == 40
    for source, hyps in zip(sources, n_best, strict=True):
        words = len(source) - (source[-1] == EOS)
        brute = []
        for out in outputs:
            hyp = Hypothesis(out[:-1] if out[-1] == EOS else out, torch.zeros(len(out), 1), 0, 0)
            log_prob, weights = _teacher_forced(model, source, hyp)
            score = log_prob / length_penalty(len(out), alpha)
            score += coverage_penalty(weights[:, :words], beta)
            brute.append((score, log_prob, hyp.tokens, weights))
        brute.sort(key=lambda row: -row[0])
        assert [h.tokens for h in hyps] == [tokens for _, _, tokens, _ in brute]
        for hyp, (score, log_prob, _, weights) in zip(hyps, brute, strict=True):
            assert hyp.score == pytest.approx(score, abs=1e-5)
            assert hyp.log_prob == pytest.approx(log_prob, abs=1e-5)
            torch.testing.assert_close(hyp.weights, weights, atol=1e-5, rtol=0)


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


@pytest.mark.parametrize("variant", VARIANTS[::3], ids=lambda v: v.get("arch", v.get("rnn")))
def test_early_stopping_ends_each_sentence_on_a_prefix_of_the_exact_search(variant) -> None:
    """Both searches follow the same beams until a sentence has K finished hypotheses;
    early stopping ends it there, the exact search may go on and find better ones."""
    model = _model(variant)
    src, src_lengths = pad(_sources(8, seed=3))
    exact = beam_search_n_best(model, src, src_lengths, beam_size=3, length_penalty=1.0)
    early = beam_search_n_best(
        model, src, src_lengths, beam_size=3, length_penalty=1.0, early_stopping=True
    )
    longer = 0
    for found, found_early in zip(exact, early, strict=True):
        tokens = {tuple(h.tokens) for h in found}
        assert {tuple(h.tokens) for h in found_early} <= tokens
        assert found[0].score >= found_early[0].score
        assert len(found_early) >= 3 or any(not h.ended for h in found_early)  # or a limit
        longer += len(found) > len(found_early)
    assert longer  # the exact search went on for some sentence: the test can tell them apart


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


def test_search_restores_each_submodules_own_mode() -> None:
    model = _model(VARIANTS[1]).train()
    model.encoder.eval()  # e.g. a frozen encoder while the decoder trains
    src, src_lengths = pad(_sources(2))
    greedy_decode(model, src, src_lengths)
    beam_search(model, src, src_lengths, beam_size=2)
    assert model.training and model.decoder.training
    assert not model.encoder.training and not model.encoder.dropout.training


def test_bad_arguments_raise_value_errors() -> None:
    model = _model(VARIANTS[0])
    src, src_lengths = pad(_sources(2))
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, src, src_lengths, beam_size=0)
    with pytest.raises(ValueError, match="coverage_penalty must be >= 0, got -0.1"):
        beam_search(model, src, src_lengths, coverage_penalty=-0.1)
    with pytest.raises(ValueError, match=r"length_penalty must be at most 100, got 1e\+308"):
        beam_search(model, src, src_lengths, length_penalty=1e308)  # overflowed the penalty
    with pytest.raises(ValueError, match="coverage_penalty must be at most 100, got inf"):
        beam_search(model, src, src_lengths, coverage_penalty=math.inf)
    with pytest.raises(ValueError, match="length_penalty must be a number, got '1'"):
        beam_search(model, src, src_lengths, length_penalty="1")  # a raw '>=' TypeError
    with pytest.raises(ValueError, match="max_len_a"):
        greedy_decode(model, src, src_lengths, max_len_a=0.0, max_len_b=0.5)
    with pytest.raises(ValueError, match="src_lengths"):
        greedy_decode(model, src, src_lengths[:1])


@pytest.mark.parametrize(
    "field,value", [("no_repeat_ngram", 2.0), ("no_repeat_ngram", True), ("beam_size", True)]
)
def test_settings_that_must_be_ints_refuse_floats_and_bools(field, value) -> None:
    # no_repeat_ngram=2.0 passed, then stopped the search in torch's unfold (a TypeError)
    with pytest.raises(ValueError, match=rf"{field} must be an int >= \d, got {value!r}"):
        SearchSettings(**{field: value})
    assert SearchSettings(no_repeat_ngram=2).no_repeat_ngram == 2


def test_a_huge_length_limit_means_no_limit_not_a_negative_one() -> None:
    # max_len_a=1e30 wrapped round to a limit of -2**63 and was refused as "< 1"
    src_lengths = torch.tensor([3, 1])
    assert max_lengths(src_lengths, 1e30, 5).tolist() == [2**31 - 1] * 2
    assert max_lengths(src_lengths, 1e30, 5, cap=64).tolist() == [64, 64]
    with pytest.raises(ValueError, match=r"length limit -2147483647 < 1"):
        max_lengths(src_lengths, -1e30, 5)
    model = tiny_transformer(max_positions=12)  # its table stops the search
    src, lengths = pad(_sources())
    assert greedy_decode(model, src, lengths, max_len_a=1e30) == greedy_decode(
        model, src, lengths, max_len_a=0.0, max_len_b=12
    )


def test_an_unknown_override_is_named_with_the_settings_there_are() -> None:
    # beam_search(..., beam=5) raised dataclasses' "__init__() got an unexpected keyword
    # argument 'beam'", naming neither the call nor what it takes
    with pytest.raises(TypeError, match=r"unknown search setting\(s\) 'beam'; the settings are "):
        SearchSettings().with_overrides(beam=5, max_len_b=None)
    assert "beam_size" in str(
        pytest.raises(TypeError, SearchSettings().with_overrides, beam=5).value
    )
    assert SearchSettings().with_overrides(beam_size=5, max_len_b=None).beam_size == 5


@pytest.mark.parametrize("field,value", [("max_len_b", math.inf), ("max_len_a", math.nan)])
def test_a_length_limit_that_is_not_finite_is_refused_by_name(field, value) -> None:
    # it gave "a length limit -9223372036854775808 < 1" once the source was encoded
    with pytest.raises(ValueError, match=rf"{field} must be a finite number, got {value}"):
        SearchSettings(**{field: value})


@pytest.mark.parametrize("value", ["no", "false", 0, None])
def test_early_stopping_takes_only_a_bool(value) -> None:
    # "no" (a string from a script's option) was truthy and turned early stopping on
    with pytest.raises(ValueError, match=f"early_stopping must be True or False, got {value!r}"):
        SearchSettings(early_stopping=value)
    assert SearchSettings(early_stopping=True).early_stopping is True


def test_coverage_penalty_value_by_hand() -> None:
    # two output steps over three source tokens: coverage 1.2, 0.45, 0.35 -> min(., 1)
    weights = torch.tensor([[0.5, 0.25, 0.25], [0.7, 0.2, 0.1]])
    expected = 0.2 * (math.log(1.0) + math.log(0.45) + math.log(0.35))
    assert coverage_penalty(weights, 0.2) == pytest.approx(expected)
    assert coverage_penalty(weights, 0.0) == 0.0
    unattended = torch.tensor([[1.0, 0.0]])  # a source token with no attention: finite, not -inf
    assert coverage_penalty(unattended, 1.0) == pytest.approx(math.log(torch.finfo().tiny))


def test_beam_scores_add_the_coverage_penalty_to_the_length_normalised_log_prob() -> None:
    model = _model(VARIANTS[0])
    sources = _sources(4, seed=5)
    sources[1] = [*sources[1], EOS]  # a final </s> is no word: the penalty leaves it out
    src, src_lengths = pad(sources)
    alpha, beta = 0.7, 0.4
    n_best = beam_search_n_best(
        model, src, src_lengths, beam_size=3, length_penalty=alpha, coverage_penalty=beta
    )
    for source, hyps in zip(sources, n_best, strict=True):
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        words = len(source) - (source[-1] == EOS)
        for hyp in hyps:
            cover = hyp.weights[:, :words].sum(dim=0).clamp(max=1.0)  # (S,)
            expected = hyp.log_prob / length_penalty(hyp.weights.shape[0], alpha)
            expected += beta * float(cover.log().sum())
            assert hyp.score == pytest.approx(expected, abs=1e-5)


def _repetitive_model():
    model = _model(VARIANTS[0])
    with torch.no_grad():  # make symbols 4 and 5 the likeliest outputs at every step
        model.decoder.output.bias[4] += 6.0
        model.decoder.output.bias[5] += 5.5
        model.decoder.output.bias[EOS] -= 5.0
    return model


def _repeats(tokens: list[int], n: int) -> bool:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_block_repeats_rules_out_exactly_the_tokens_that_close_a_seen_ngram(n) -> None:
    gen = torch.Generator().manual_seed(n)
    history = torch.randint(3, 7, (8, 9), generator=gen)  # (N, t): a small alphabet repeats
    log_probs = torch.randn(8, 10, generator=gen)
    blocked = log_probs.clone()
    block_repeats(blocked, history, n)
    for row, tokens in enumerate(history.tolist()):
        seen = {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}
        for token in range(10):
            closes = tuple(tokens[len(tokens) - (n - 1) :] + [token]) in seen
            expected = -math.inf if closes else float(log_probs[row, token])
            assert float(blocked[row, token]) == expected, (row, token)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_ngram_blocking_never_emits_a_repeated_ngram(n) -> None:
    model = _repetitive_model()
    src, src_lengths = pad(_sources(4, seed=6))
    unblocked = greedy_decode(model, src, src_lengths)
    assert any(_repeats(h.tokens, n) for h in unblocked)  # the test would catch a repeat
    for hyps in (
        greedy_decode(model, src, src_lengths, no_repeat_ngram=n),
        beam_search(model, src, src_lengths, beam_size=3, no_repeat_ngram=n),
        *beam_search_n_best(model, src, src_lengths, beam_size=3, no_repeat_ngram=n),
    ):
        for hyp in hyps:
            assert not _repeats(hyp.tokens, n), hyp.tokens


def test_beam_size_one_equals_greedy_with_ngram_blocking() -> None:
    model = _repetitive_model()
    src, src_lengths = pad(_sources())
    greedy = greedy_decode(model, src, src_lengths, no_repeat_ngram=2)
    beam = beam_search(model, src, src_lengths, beam_size=1, length_penalty=0.0, no_repeat_ngram=2)
    for g, b in zip(greedy, beam, strict=True):
        _assert_same(g, b)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_transformer_stops_where_its_position_table_ends(search):
    """``max_len_a``/``b`` allow 20 steps; positions end at 8: every hypothesis stops there."""
    model = tiny_transformer(max_positions=8)
    assert model.max_target_len == 8 and tiny_model().max_target_len is None
    src, lengths = pad(_sources(n=6, seed=3))
    if search == "greedy":
        hyps = greedy_decode(model, src, lengths, max_len_a=0.0, max_len_b=20)
    else:
        hyps = beam_search(model, src, lengths, beam_size=3, max_len_a=0.0, max_len_b=20)
    steps = [h.weights.shape[0] for h in hyps]
    assert max(steps) == 8 and all(s <= 8 for s in steps)
    unlimited = greedy_decode(tiny_transformer(), src, lengths, max_len_a=0.0, max_len_b=20)
    assert max(h.weights.shape[0] for h in unlimited) > 8  # so the cap, not EOS, stopped them


def test_the_coverage_penalty_leaves_out_a_final_end_of_sentence_token() -> None:
    # GNMT's cp sums over the source words; a final </s> is no word. With a limit of one
    # output step no column's coverage reaches 1, so the </s> column would lower the score.
    model = _model(VARIANTS[0])
    source = [5, 6, 7, EOS]
    src, src_lengths = pad([source])
    beta = 0.4
    (hyps,) = beam_search_n_best(
        model, src, src_lengths, beam_size=2, coverage_penalty=beta, max_len_a=0, max_len_b=1
    )
    for hyp in hyps:
        cover = hyp.weights.sum(dim=0)  # (4,): one step, each column below 1
        assert float(cover[-1]) < 1.0  # the </s> column would count if it were included
        expected = hyp.log_prob / length_penalty(1, 1.0) + beta * float(cover[:3].log().sum())
        assert hyp.score == pytest.approx(expected, abs=1e-6)


class _TableModel(torch.nn.Module):
    """A model whose next-token log-probabilities are looked up by (source, output so far).

    ``table[(source, prefix)]`` maps tokens to probabilities (others get -inf; an unlisted
    prefix gives </s> probability 1); attention is
    uniform over the real source. ``calls`` counts decoder steps.
    """

    steps_normalized = True
    max_target_len = None
    max_source_len = None
    beams_share_memory = False

    def __init__(self, table: dict, vocab: int = 6) -> None:
        super().__init__()
        self.table, self.vocab, self.calls = table, vocab, 0

    def encode(self, src, src_lengths):
        return _TableState(src, src_lengths)

    def initial_state(self, memory):
        return _TableState(memory.src[:, :0], memory.lengths)  # no output yet

    def step(self, prev_tokens, state, memory):
        self.calls += 1
        out = torch.cat([state.src, prev_tokens[:, None]], dim=1)  # (N, t+1), BOS first
        rows = []
        for source, length, prefix in zip(memory.src, memory.lengths, out, strict=True):
            key = (tuple(source[:length].tolist()), tuple(prefix[1:].tolist()))
            probs = self.table.get(key, {EOS: 1.0})  # an unlisted prefix ends
            row = torch.full((self.vocab,), -math.inf)
            for token, p in probs.items():
                row[token] = math.log(p)
            rows.append(row)
        weights = memory.mask.float() / memory.lengths[:, None]  # (N, S)
        return torch.stack(rows), weights, _TableState(out, state.lengths)


class _TableState:
    """Source rows (as memory) or output rows (as decoder state), with the source lengths."""

    def __init__(self, src, lengths) -> None:
        self.src, self.lengths = src, lengths
        self.mask = src != PAD

    def index_select(self, index):
        return _TableState(self.src[index], self.lengths[index])


def test_beam_keeps_the_k_best_non_eos_extensions_even_behind_a_top_ranked_eos() -> None:
    # K = 2. Step 1: </s> .5, "4" .3, "5" .2; then each ends. The best 2K extensions of a
    # beam must be ranked: with only its K best (</s>, "4"), "5" would be lost although it is
    # the second-best way to go on. By hand: three finished hypotheses, best first.
    table = {((4,), ()): {EOS: 0.5, 4: 0.3, 5: 0.2}, ((4,), (4,)): {EOS: 1.0}}
    table[((4,), (5,))] = {EOS: 1.0}
    src, src_lengths = pad([[4]])
    (hyps,) = beam_search_n_best(
        _TableModel(table), src, src_lengths, beam_size=2, length_penalty=0.0
    )
    assert [h.tokens for h in hyps] == [[], [4], [5]]
    assert [h.log_prob for h in hyps] == pytest.approx(
        [math.log(0.5), math.log(0.3), math.log(0.2)]
    )


def test_greedy_stops_at_the_step_where_every_sentence_is_done() -> None:
    # Limits a * len + b with a = 1, b = 0: 1 step for the 1-token source, 3 for the other,
    # which emits </s> at once. Both are done after one step: a second would be wasted work.
    table = {((4,), ()): {5: 0.9, EOS: 0.1}, ((4, 4, 4), ()): {EOS: 0.9, 5: 0.1}}
    model = _TableModel(table)
    src, src_lengths = pad([[4], [4, 4, 4]])
    short, ended = greedy_decode(model, src, src_lengths, max_len_a=1, max_len_b=0)
    assert (short.tokens, ended.tokens, ended.ended) == ([5], [], True)
    assert model.calls == 1


@pytest.mark.parametrize("k", [2, 5])
def test_beam_search_keeps_no_hypothesis_of_probability_zero(k) -> None:
    # Only "4 </s>" has a probability above 0: the other K - 1 beams have log-probability
    # -inf from step 1 on, and their extensions (</s> included) stay -inf until the limit
    # of 3 steps. A hypothesis of probability 0 is none: the n-best list holds "4" alone,
    # with log p = 0. K = 2: dead beams reach the limit. K = 5: dead </s> candidates (-inf)
    # rank among the top K.
    table = {((4,), ()): {4: 1.0}}
    src, src_lengths = pad([[4]])
    model = _TableModel(table)
    (hyps,) = beam_search_n_best(model, src, src_lengths, beam_size=k, max_len_a=0, max_len_b=3)
    assert [(h.tokens, h.ended, h.log_prob) for h in hyps] == [([4], True, 0.0)]
    # "4 </s>" is done after 2 steps and every live beam is dead: the dead beams took a
    # third step to the limit
    assert model.calls == 2


def test_decode_n_best_names_a_plain_list_and_a_float_n() -> None:
    from attnkit.nmt.data.batching import Examples
    from attnkit.nmt.decoding.search import decode_examples, decode_n_best

    model = _model(VARIANTS[0])
    with pytest.raises(TypeError, match=r"examples must be Examples .*got list"):
        decode_examples(model, [[4, 5, 6]])  # was: 'list' object has no attribute 'src'
    with pytest.raises(TypeError, match="n must be an int, got float 2.0"):
        decode_n_best(model, Examples([[4, 5, 6]]), n=2.0)  # was: a slice-index TypeError
    [[best]] = decode_n_best(model, Examples([[4, 5, 6]]), n=1)
    assert best == decode_examples(model, Examples([[4, 5, 6]]))[0]
