"""Greedy and beam search for any :class:`~attnkit.nmt.models.translator.Translator`,
returning alignments.

Both decode a batch of sentences together and return, per sentence, the
output tokens and the attention weights of every output step, trimmed to the
sentence's real source length. Each sentence may emit at most
``int(max_len_a * src_len + max_len_b)`` tokens, counting ``<eos>``; ``<pad>``
and ``<bos>`` are never emitted.

Beam search (as in Sutskever et al. 2014 and Wu et al. 2016, the GNMT
paper) keeps ``K`` live hypotheses per sentence, all sentences in one batch of
``B*K`` rows. At each step it takes the ``2K`` best extensions of each
sentence's beams; those ending in ``<eos>`` that rank in the top ``K`` are
finished, and the best ``K`` others stay alive, so a sentence always has ``K``
live beams. A sentence stops at its length limit (its live beams are then
finished as they stand), or once it has ``K`` finished hypotheses and no live
beam could still reach a better score (log-probabilities only fall as tokens
are added; the bound uses the largest length penalty still reachable). Finished
hypotheses are ranked by the GNMT length penalty (Wu et al. 2016, eq. 14):
``score = log p(y) / lp(y)``, ``lp(y) = ((5 + |y|) / 6) ** alpha``, with
``|y|`` the number of output steps including ``<eos>``; ``alpha = 0`` is the
plain log-probability. The GNMT coverage penalty of the same equation can be
added, ``cp(x; y) = beta * sum_i log(min(sum_t p_ti, 1))`` over the source
tokens ``i`` (a final ``</s>`` left out: it is no word of the sentence) and
the output steps ``t``: it lowers the score of a finished hypothesis whose
attention left source tokens uncovered (``beta = 0``, the default, turns it
off). Since ``cp <= 0``, the stopping
bound below stays valid. ``no_repeat_ngram = n`` rules out any token that
would repeat an n-gram the hypothesis already holds (greedy search too), so
no output repeats an n-gram. Finished sentences leave the batch
(``index_select`` on the source memory and the decoder state).

:func:`decode_examples` drives either search over a whole tokenized corpus in
length-sorted batches and returns the hypotheses in input order.

Notation: ``B`` sentences, ``K`` beam size, ``N = B*K`` rows, ``S`` source
length, ``t`` steps so far, ``V`` target vocabulary size.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..data.batching import Examples, make_batch, sorted_batches
from ..models.translator import DecoderState, SourceMemory, Translator
from ..vocab_ids import BOS, EOS, PAD

__all__ = [
    "Hypothesis",
    "beam_search",
    "beam_search_n_best",
    "coverage_penalty",
    "decode_examples",
    "greedy_decode",
    "length_penalty",
]


@dataclass
class Hypothesis:
    """One translation of one sentence.

    Attributes:
        tokens: output token ids, without ``<bos>`` and ``<eos>``.
        weights: attention weights ``(n_steps, S_i)``, float, on the CPU, one row
            per output step: ``len(tokens) + 1`` rows when the hypothesis ended
            with ``<eos>`` (the last row is the ``<eos>`` step), ``len(tokens)``
            when it hit the length limit. ``S_i`` is the sentence's real length.
        score: the ranking score: the log-probability for greedy decoding, the
            length-normalised log-probability for beam search.
        log_prob: ``log p(y | x)`` summed over the output steps (incl. ``<eos>``).
    """

    tokens: list[int]
    weights: Tensor
    score: float
    log_prob: float

    @property
    def ended(self) -> bool:
        """Whether the hypothesis emitted ``<eos>`` (rather than hitting the limit)."""
        return self.weights.shape[0] > len(self.tokens)


def length_penalty(steps: int, alpha: float) -> float:
    """GNMT length penalty ``((5 + steps) / 6) ** alpha`` (Wu et al. 2016, eq. 14)."""
    return ((5.0 + steps) / 6.0) ** alpha


def coverage_penalty(weights: Tensor, beta: float) -> float:
    """GNMT coverage penalty ``cp = beta * sum_i log(min(sum_t p_ti, 1))`` (Wu et al. 2016, eq. 14).

    Args:
        weights: attention of one hypothesis ``(t, S_i)``, float: one row per
            output step, one column per real source token.
        beta: the penalty weight, >= 0; 0 gives exactly 0.0.

    Returns:
        ``cp <= 0``; a source token that received no attention at all counts
        as the smallest positive float32 (log about -87) instead of ``-inf``.
    """
    if beta == 0:
        return 0.0
    cover = weights.float().sum(dim=0)  # (S_i,) attention each source token received
    cover = cover.clamp(min=torch.finfo(torch.float32).tiny, max=1.0)
    return beta * float(cover.log().sum())


@dataclass(frozen=True)
class _Ranking:
    """How a finished hypothesis is scored: ``log p / lp(alpha) + cp(beta)`` (GNMT eq. 14).

    ``words[b]``: how many leading source tokens of sentence ``b`` the coverage
    penalty counts (its real length, less a final ``</s>``).
    """

    alpha: float
    beta: float
    words: list[int]

    def score(self, log_prob: float, steps: int, weights: Tensor, sentence: int) -> float:
        cp = coverage_penalty(weights[:, : self.words[sentence]], self.beta)  # (t, words)
        return log_prob / length_penalty(steps, self.alpha) + cp


def _source_words(src: Tensor, src_lengths: Tensor) -> list[int]:
    """Real source lengths ``(B,)`` less one where the source ends in ``</s>``."""
    last = src.gather(1, (src_lengths.long() - 1)[:, None])[:, 0]  # (B,)
    return (src_lengths.long() - (last == EOS).long()).tolist()


# ---------------------------------------------------------------- shared helpers


@contextlib.contextmanager
def _inference(model: nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and no autograd, restoring the previous mode after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _max_lengths(src_lengths: Tensor, max_len_a: float, max_len_b: float) -> Tensor:
    """Per-sentence step limits ``int(a * src_len + b)`` ``(B,)``; each must be >= 1."""
    limits = (max_len_a * src_lengths.double() + max_len_b).floor().long()  # (B,)
    if limits.numel() and int(limits.min()) < 1:
        raise ValueError(
            f"max_len_a={max_len_a} and max_len_b={max_len_b} give a length limit "
            f"{int(limits.min())} < 1 for a source of length "
            f"{int(src_lengths[limits.argmin()])}"
        )
    return limits


def _next_log_probs(
    model: Translator, tokens: Tensor, state: DecoderState, memory: SourceMemory
) -> tuple[Tensor, Tensor, DecoderState]:
    """One step: log-probabilities ``(N, V)`` with PAD and BOS ruled out, weights ``(N, S)``."""
    logits, weights, state = model.step(tokens, state, memory)
    log_probs = logits.float().log_softmax(dim=-1)  # (N, V)
    log_probs[:, PAD] = -torch.inf
    log_probs[:, BOS] = -torch.inf
    return log_probs, weights, state


def _block_repeats(log_probs: Tensor, history: Tensor, n: int) -> None:
    """Rule out, in place, each row's tokens that would repeat an n-gram of its ``history``.

    ``log_probs`` ``(N, V)``; ``history`` ``(N, t)`` long, the tokens emitted so
    far (no ``<bos>``); ``n <= 0`` blocks nothing. ``<eos>`` never appears in a
    live history, so some token always stays allowed.
    """
    if n <= 0 or history.shape[1] < n:
        return
    grams = history.unfold(1, n, 1)  # (N, G, n), every n-gram so far
    prefix = history[:, history.shape[1] - (n - 1) :]  # (N, n-1), the newest n-1 tokens
    match = (grams[:, :, :-1] == prefix[:, None, :]).all(dim=-1)  # (N, G)
    banned = torch.zeros_like(log_probs, dtype=torch.long).scatter_reduce_(
        1, grams[:, :, -1], match.long(), "amax"
    )  # (N, V)
    log_probs.masked_fill_(banned.bool(), -torch.inf)


# ---------------------------------------------------------------- greedy


def greedy_decode(
    model: Translator,
    src: Tensor,
    src_lengths: Tensor,
    *,
    max_len_a: float = 1.5,
    max_len_b: float = 10,
    no_repeat_ngram: int = 0,
) -> list[Hypothesis]:
    """Greedy decoding: emit the most probable token at each step until ``<eos>``.

    Args:
        model: the translator (run in eval mode without gradients here; its
            mode is restored afterwards).
        src: ``(B, S)`` long, padded with PAD.
        src_lengths: ``(B,)`` integer, any order.
        max_len_a: length limit slope (times the source length).
        max_len_b: length limit intercept.
        no_repeat_ngram: n > 0 never emits a token that repeats an n-gram.

    Returns:
        one :class:`Hypothesis` per sentence, in input order; ``score`` is the
        log-probability.

    Raises:
        ValueError: bad source tensors (see ``Translator.encode``) or a length limit < 1.
    """
    with _inference(model):
        memory = model.encode(src, src_lengths)
        limits = _max_lengths(memory.lengths, max_len_a, max_len_b)
        tokens = torch.full_like(memory.lengths, BOS)  # (B,)
        state, done = model.initial_state(memory), torch.zeros_like(memory.mask[:, 0])
        steps, weights, log_probs = [], [], []
        for t in range(int(limits.max())):
            step_log_probs, step_weights, state = _next_log_probs(model, tokens, state, memory)
            if steps:
                _block_repeats(step_log_probs, torch.stack(steps, 1), no_repeat_ngram)  # (B, t)
            best, tokens = step_log_probs.max(dim=-1)  # (B,), (B,)
            steps.append(tokens)
            weights.append(step_weights)
            log_probs.append(best)
            done = done | (tokens == EOS) | (t + 1 >= limits)
            if bool(done.all()):
                break
        return _greedy_hypotheses(
            torch.stack(steps, 1),
            torch.stack(weights, 1),
            torch.stack(log_probs, 1),
            memory.lengths,
            limits,
        )


def _greedy_hypotheses(
    steps: Tensor, weights: Tensor, log_probs: Tensor, src_lengths: Tensor, limits: Tensor
) -> list[Hypothesis]:
    """Cut each row of steps ``(B, t)``, weights ``(B, t, S)`` at its first EOS or limit."""
    weights = weights.float().cpu()  # (B, t, S)
    log_probs = log_probs.cpu()  # (B, t)
    hypotheses = []
    for b, (row, limit, src_len) in enumerate(
        zip(steps.tolist(), limits.tolist(), src_lengths.tolist(), strict=True)
    ):
        n = min(limit, row.index(EOS) + 1 if EOS in row else len(row))
        log_prob = float(log_probs[b, :n].sum())
        tokens = row[: n - 1] if row[n - 1] == EOS else row[:n]
        hypotheses.append(Hypothesis(tokens, weights[b, :n, :src_len].clone(), log_prob, log_prob))
    return hypotheses


# ---------------------------------------------------------------- beam


@dataclass
class _Beams:
    """Live beams of the sentences still being decoded (``n`` sentences, ``N = n*K`` rows)."""

    sentence: Tensor  # (n,) long, original index of each live sentence
    scores: Tensor  # (n, K) cumulative log-probabilities
    tokens: Tensor  # (N, t) long, emitted tokens
    weights: Tensor  # (N, t, S) attention weights
    state: DecoderState  # batch N
    memory: SourceMemory  # batch N

    def index_select(self, sentences: Tensor, rows: Tensor) -> _Beams:
        """Keep/reorder sentences ``(n',)`` and rows ``(N',)`` (both long indices)."""
        return _Beams(
            self.sentence[sentences],
            self.scores[sentences],
            self.tokens[rows],
            self.weights[rows],
            self.state.index_select(rows),
            self.memory.index_select(rows),
        )


def beam_search(
    model: Translator,
    src: Tensor,
    src_lengths: Tensor,
    *,
    beam_size: int = 5,
    length_penalty: float = 1.0,
    max_len_a: float = 1.5,
    max_len_b: float = 10,
    coverage_penalty: float = 0.0,
    no_repeat_ngram: int = 0,
) -> list[Hypothesis]:
    """Batched beam search; the best hypothesis per sentence (see the module docstring).

    Args:
        model: the translator (run in eval mode without gradients here).
        src: ``(B, S)`` long, padded with PAD.
        src_lengths: ``(B,)`` integer, any order.
        beam_size: K >= 1; ``K = 1`` gives the greedy translation.
        length_penalty: alpha of the GNMT penalty ``((5 + |y|) / 6) ** alpha``.
        max_len_a: length limit slope (times the source length).
        max_len_b: length limit intercept.
        coverage_penalty: beta >= 0 of the GNMT coverage penalty (0 = off).
        no_repeat_ngram: n > 0 never emits a token that repeats an n-gram.

    Returns:
        one :class:`Hypothesis` per sentence, in input order; ``score`` is
        ``log p(y) / lp(y) + cp(x; y)``.

    Raises:
        ValueError: ``beam_size < 1``, ``coverage_penalty < 0``, bad source
            tensors or a length limit < 1.
    """
    n_best = beam_search_n_best(
        model,
        src,
        src_lengths,
        beam_size=beam_size,
        length_penalty=length_penalty,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        coverage_penalty=coverage_penalty,
        no_repeat_ngram=no_repeat_ngram,
    )
    return [hypotheses[0] for hypotheses in n_best]


def beam_search_n_best(
    model: Translator,
    src: Tensor,
    src_lengths: Tensor,
    *,
    beam_size: int = 5,
    length_penalty: float = 1.0,
    max_len_a: float = 1.5,
    max_len_b: float = 10,
    coverage_penalty: float = 0.0,
    no_repeat_ngram: int = 0,
) -> list[list[Hypothesis]]:
    """Like :func:`beam_search`, but every finished hypothesis per sentence, best first.

    Each sentence gets at least ``K`` hypotheses (fewer only when it reached
    its length limit first), each with its own attention weights.
    """
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be an int >= 1, got {beam_size!r}")
    if not coverage_penalty >= 0:
        raise ValueError(f"coverage_penalty must be >= 0, got {coverage_penalty!r}")
    with _inference(model):
        memory = model.encode(src, src_lengths)
        ranking = _Ranking(length_penalty, coverage_penalty, _source_words(src, memory.lengths))
        limits = _max_lengths(memory.lengths, max_len_a, max_len_b).tolist()
        finished: list[list[Hypothesis]] = [[] for _ in limits]
        beams = _initial_beams(model, memory, beam_size)
        step = 0
        while beams.sentence.numel():
            step += 1
            log_probs, weights, state = _next_log_probs(
                model, beams.tokens[:, -1], beams.state, beams.memory
            )
            _block_repeats(log_probs, beams.tokens[:, 1:], no_repeat_ngram)
            beams.weights = torch.cat([beams.weights, weights[:, None]], dim=1)  # (N, t, S)
            beams.state = state
            candidates = _top_candidates(beams.scores, log_probs, beam_size)
            _finish_eos(beams, candidates, step, beam_size, ranking, finished)
            beams = _advance(beams, candidates, beam_size)
            _finish_at_limit(beams, step, limits, ranking, finished)
            beams = _drop_done(beams, step, limits, ranking, finished)
    return [sorted(hyps, key=lambda h: -h.score) for hyps in finished]


def _initial_beams(model: Translator, memory: SourceMemory, k: int) -> _Beams:
    """Expand every sentence to K rows; only beam 0 is live at the first step."""
    (batch, src_len), device = memory.mask.shape, memory.mask.device
    rows = torch.arange(batch, device=device).repeat_interleave(k)  # (N,)
    scores = torch.full((batch, k), -torch.inf, device=device)
    scores[:, 0] = 0.0  # the other K-1 copies would only duplicate beam 0
    tokens = torch.full((batch * k, 1), BOS, dtype=torch.long, device=device)
    weights = torch.zeros(batch * k, 0, src_len, device=device)  # (N, 0, S)
    expanded = memory.index_select(rows)
    sentences = torch.arange(batch, device=device)
    return _Beams(sentences, scores, tokens, weights, model.initial_state(expanded), expanded)


def _top_candidates(scores: Tensor, log_probs: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The 2K best one-token extensions per sentence: ``scores, beam, token``, each ``(n, 2K)``."""
    n, vocab = scores.shape[0], log_probs.shape[-1]
    total = scores[:, :, None] + log_probs.view(n, k, vocab)  # (n, K, V)
    top_scores, flat = total.view(n, k * vocab).topk(min(2 * k, k * vocab), dim=-1)  # (n, 2K)
    return top_scores, flat // vocab, flat % vocab


def _finish_eos(
    beams: _Beams,
    candidates: tuple[Tensor, Tensor, Tensor],
    step: int,
    k: int,
    ranking: _Ranking,
    finished: list[list[Hypothesis]],
) -> None:
    """Record the candidates that end in EOS and rank in the top K of their sentence."""
    scores, beam, token = candidates
    rank = torch.arange(scores.shape[1], device=scores.device)  # (2K,)
    is_final = (token == EOS) & (rank < k) & torch.isfinite(scores)  # (n, 2K)
    if not bool(is_final.any()):
        return
    score_rows, beam_rows = scores.tolist(), beam.tolist()
    picks = [(i, i * k + beam_rows[i][j], score_rows[i][j]) for i, j in is_final.nonzero().tolist()]
    _record(beams, picks, step, ranking, finished)


def _record(
    beams: _Beams,
    picks: list[tuple[int, int, float]],
    step: int,
    ranking: _Ranking,
    finished: list[list[Hypothesis]],
) -> None:
    """Store finished hypotheses; ``picks`` holds (live sentence, row, log-probability)."""
    if not picks:
        return
    rows = torch.tensor([row for _, row, _ in picks], device=beams.tokens.device)  # (P,)
    tokens = beams.tokens[rows, 1:].tolist()  # drop BOS; an ending EOS is not stored
    weights = beams.weights[rows].float().cpu()  # (P, t, S)
    lengths = beams.memory.lengths[rows].tolist()
    sentences = beams.sentence.tolist()
    for p, (i, _, log_prob) in enumerate(picks):
        own = weights[p, :, : lengths[p]].clone()  # (t, S_i)
        score = ranking.score(log_prob, step, own, sentences[i])
        hyp = Hypothesis(tokens[p], own, score, log_prob)
        finished[sentences[i]].append(hyp)


def _advance(beams: _Beams, candidates: tuple[Tensor, Tensor, Tensor], k: int) -> _Beams:
    """Keep the K best non-EOS candidates per sentence as the new live beams."""
    scores, beam, token = candidates
    width = scores.shape[1]
    # Sort EOS candidates after all others, keeping rank order within each group.
    order = ((token == EOS).long() * width + torch.arange(width, device=scores.device)).argsort(
        dim=-1
    )[:, :k]  # (n, K)
    n = scores.shape[0]
    rows = (torch.arange(n, device=scores.device)[:, None] * k + beam.gather(1, order)).view(-1)
    kept = _Beams(
        beams.sentence,
        scores.gather(1, order),  # (n, K)
        beams.tokens[rows],
        beams.weights[rows],
        beams.state.index_select(rows),
        beams.memory,  # rows of one sentence share its source, no reorder needed
    )
    kept.tokens = torch.cat([kept.tokens, token.gather(1, order).view(-1, 1)], dim=1)  # (N, t+1)
    return kept


def _finish_at_limit(
    beams: _Beams,
    step: int,
    limits: list[int],
    ranking: _Ranking,
    finished: list[list[Hypothesis]],
) -> None:
    """Finish, without EOS, the live beams of sentences that reached their length limit."""
    k = beams.scores.shape[1]
    picks = [
        (i, i * k + j, log_prob)
        for i, (sentence, row_scores) in enumerate(
            zip(beams.sentence.tolist(), beams.scores.tolist(), strict=True)
        )
        if step >= limits[sentence]
        for j, log_prob in enumerate(row_scores)
        if log_prob != -math.inf
    ]
    _record(beams, picks, step, ranking, finished)


def _drop_done(
    beams: _Beams,
    step: int,
    limits: list[int],
    ranking: _Ranking,
    finished: list[list[Hypothesis]],
) -> _Beams:
    """Remove the sentences that are at their length limit or can no longer improve.

    A sentence is done once it has K finished hypotheses and the best of them
    scores at least as well as any live beam still could: live log-probabilities
    only fall as tokens are added, so a live beam's best possible final score
    is its log-probability over the largest length penalty it can still reach
    (the coverage penalty is <= 0, so leaving it out keeps this an upper bound).
    Stopping at K finished hypotheses alone would end a sentence on K early,
    poor ``<eos>`` candidates while a far better beam is still one step short.
    """
    k = beams.scores.shape[1]
    best_live = beams.scores.max(dim=1).values.tolist()  # (n,)
    keep = [
        i
        for i, sentence in enumerate(beams.sentence.tolist())
        if step < limits[sentence]
        and not _settled(finished[sentence], best_live[i], k, ranking.alpha, step, limits[sentence])
    ]
    if len(keep) == beams.sentence.numel():
        return beams
    device = beams.scores.device
    sentences = torch.tensor(keep, dtype=torch.long, device=device)  # (n',)
    rows = (sentences[:, None] * k + torch.arange(k, device=device)).view(-1)  # (n'*K,)
    return beams.index_select(sentences, rows)


def _settled(
    done: list[Hypothesis], best_live: float, k: int, alpha: float, step: int, limit: int
) -> bool:
    """Whether no live beam of a sentence can beat its best finished hypothesis."""
    if len(done) < k:
        return False
    # lp grows with length for alpha > 0 and shrinks for alpha < 0; logp <= 0
    largest_penalty = max(length_penalty(step + 1, alpha), length_penalty(limit, alpha))
    return max(h.score for h in done) >= best_live / largest_penalty


# ---------------------------------------------------------------- a whole corpus


@torch.no_grad()
def decode_examples(
    model: Translator,
    examples: Examples,
    *,
    beam_size: int = 1,
    length_penalty: float = 1.0,
    max_len_a: float = 1.5,
    max_len_b: float = 10,
    coverage_penalty: float = 0.0,
    no_repeat_ngram: int = 0,
    batch_size: int = 64,
    device: torch.device | str = "cpu",
) -> list[Hypothesis]:
    """Translate every example's source in length-sorted batches.

    Greedy search for ``beam_size == 1``, beam search otherwise. Sentences are
    sorted by length so each batch carries little padding; the results come
    back in input order.

    Args:
        model: the translator (run in eval mode without gradients; its mode is
            restored afterwards).
        examples: tokenized sources (``examples.tgt`` is ignored), ids without
            specials; the batches append ``</s>``.
        beam_size: K >= 1.
        length_penalty: alpha of the GNMT length penalty (beam search only).
        max_len_a: length limit slope (times the source length).
        max_len_b: length limit intercept.
        coverage_penalty: beta of the GNMT coverage penalty (beam search only).
        no_repeat_ngram: n > 0 never emits a token that repeats an n-gram.
        batch_size: sentences per batch.
        device: where the batches go (the model's device).

    Returns:
        one :class:`Hypothesis` per example, in input order.

    Raises:
        ValueError: ``beam_size`` or ``batch_size`` < 1, or a length limit < 1.
    """
    sources = Examples(examples.src)
    results: list[Hypothesis | None] = [None] * len(sources)
    limits = {"max_len_a": max_len_a, "max_len_b": max_len_b, "no_repeat_ngram": no_repeat_ngram}
    for indices in sorted_batches(sources, batch_size):
        batch = make_batch(sources, indices).to(device)
        if beam_size == 1:
            hyps = greedy_decode(model, batch.src, batch.src_lengths, **limits)
        else:
            hyps = beam_search(
                model,
                batch.src,
                batch.src_lengths,
                beam_size=beam_size,
                length_penalty=length_penalty,
                coverage_penalty=coverage_penalty,
                **limits,
            )
        for index, hyp in zip(indices, hyps, strict=True):
            results[index] = hyp
    return results  # type: ignore[return-value]
