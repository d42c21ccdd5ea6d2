"""Batched beam search for any :class:`~attnkit.nmt.models.translator.Translator`,
returning alignments.

Like greedy search (:mod:`attnkit.nmt.decoding.greedy`), it decodes a batch
of sentences together and returns, per sentence, the output tokens and the
attention weights of every output step, trimmed to the sentence's real source
length. Each sentence may emit at most
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
are added; the bound uses the largest length penalty still reachable). With
``early_stopping`` it stops as soon as it has ``K`` finished hypotheses
(fairseq's rule): fewer steps, at the risk described in :func:`_drop_done`. ``K = 1``
always stops so, which makes it greedy search whatever the penalties (as fairseq's
and OpenNMT's beam 1 is, and ``--beam 1``): the exact rule would let the one live
beam, which passed over a top-ranked ``<eos>``, run on and win under ``alpha > 0``. Finished
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
(``index_select`` on the source memory and the decoder state). A model with
``beams_share_memory`` (the Transformer) keeps one memory row per sentence
for its K beams; otherwise the memory is repeated K times.

Notation: ``B`` sentences, ``K`` beam size, ``N = B*K`` rows, ``S`` source
length, ``t`` steps so far, ``V`` target vocabulary size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..models.translator import DecoderState, SourceMemory
from ..vocab_ids import BOS, EOS
from .inference import inference
from .settings import SearchSettings
from .steps import Hypothesis, SearchModel, block_repeats, max_lengths, next_log_probs

__all__ = ["beam_search", "beam_search_n_best", "coverage_penalty", "length_penalty"]


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
    penalty counts (its real length, less a final ``</s>``). ``early_stopping``:
    a sentence with K finished hypotheses is done (:func:`_settled`).
    """

    alpha: float
    beta: float
    words: list[int]
    early_stopping: bool = False

    def score(self, log_prob: float, steps: int, weights: Tensor, sentence: int) -> float:
        cp = coverage_penalty(weights[:, : self.words[sentence]], self.beta)  # (t, words)
        return log_prob / length_penalty(steps, self.alpha) + cp


def _source_words(src: Tensor, src_lengths: Tensor) -> list[int]:
    """Real source lengths ``(B,)`` less one where the source ends in ``</s>``."""
    last = src.gather(1, (src_lengths.long() - 1)[:, None])[:, 0]  # (B,)
    return (src_lengths.long() - (last == EOS).long()).tolist()


@dataclass
class _Trail:
    """The attention weights of every step so far, kept with back-pointers.

    Copying each live row's whole ``(t, S)`` history whenever beams are
    reordered would cost ``O(t)`` per step; instead step ``s`` keeps its own
    rows ``weights[s]`` ``(N_s, S)``, and ``parents[s]`` ``(N_{s+1},)`` says
    which row of step ``s`` each row of step ``s + 1`` continues. A
    hypothesis's history is read back only when it is finished.
    """

    weights: list[Tensor]
    parents: list[Tensor]

    def gather(self, rows: Tensor) -> Tensor:
        """The weights ``(P, t, S)`` of ``rows`` ``(P,)``, numbered as the newest rows.

        The newest rows are those of the last step's weights, or of the step
        after it once its parents are known.
        """
        if len(self.parents) == len(self.weights):
            rows = self.parents[-1][rows]
        steps = []
        for s in range(len(self.weights) - 1, -1, -1):
            steps.append(self.weights[s][rows])  # (P, S)
            if s:
                rows = self.parents[s - 1][rows]
        return torch.stack(steps[::-1], dim=1)  # (P, t, S)

    def follow(self, rows: Tensor) -> None:
        """The next rows continue ``rows`` ``(N',)`` of the newest ones."""
        if len(self.parents) == len(self.weights):
            self.parents[-1] = self.parents[-1][rows]
        else:
            self.parents.append(rows)


@dataclass
class _Beams:
    """Live beams of the sentences still being decoded (``n`` sentences, ``N = n*K`` rows)."""

    sentence: Tensor  # (n,) long, original index of each live sentence
    scores: Tensor  # (n, K) cumulative log-probabilities
    tokens: Tensor  # (N, t) long, emitted tokens
    trail: _Trail  # attention weights of every step
    state: DecoderState  # batch N, or the previous step's rows while ``parents`` is set
    memory: SourceMemory  # batch n when ``shared``, else N
    shared: bool  # one memory row per sentence, read by its K beams
    parents: Tensor | None = None  # (N,) the rows of ``state`` the live rows continue

    def index_select(self, sentences: Tensor, rows: Tensor) -> _Beams:
        """Keep/reorder sentences ``(n',)`` and rows ``(N',)`` (both long indices)."""
        self.trail.follow(rows)
        return _Beams(
            self.sentence[sentences],
            self.scores[sentences],
            self.tokens[rows],
            self.trail,
            self.state,
            self.memory.index_select(sentences if self.shared else rows),
            self.shared,
            rows if self.parents is None else self.parents[rows],
        )

    def gather_state(self) -> None:
        """Apply the pending reorder of ``state``: one gather per step, whatever was dropped."""
        if self.parents is not None:
            self.state, self.parents = self.state.index_select(self.parents), None

    def source_lengths(self, rows: Tensor) -> list[int]:
        """Real source lengths of ``rows`` ``(P,)``."""
        k = self.scores.shape[1]
        return self.memory.lengths[rows // k if self.shared else rows].tolist()


def beam_search(
    model: SearchModel,
    src: Tensor,
    src_lengths: Tensor,
    settings: SearchSettings = SearchSettings(),  # noqa: B008 (frozen, so safe as a default)
    **overrides: float | int,
) -> list[Hypothesis]:
    """Batched beam search; the best hypothesis per sentence (see the module docstring).

    Args:
        model: the translator or ensemble (run in eval mode without gradients here).
        src: ``(B, S)`` long, padded with PAD.
        src_lengths: ``(B,)`` integer, any order.
        settings: beam size K (1 gives the greedy translation), length and
            coverage penalties, n-gram blocking and the length limit.
        **overrides: fields of ``settings`` to replace (e.g. ``beam_size=4``).

    Returns:
        one :class:`Hypothesis` per sentence, in input order; ``score`` is
        ``log p(y) / lp(y) + cp(x; y)``.

    Raises:
        TypeError: an override that is no field of :class:`SearchSettings`.
        ValueError: a bad override value (``beam_size < 1``, ``coverage_penalty < 0``),
            bad source tensors or a length limit < 1.
    """
    n_best = beam_search_n_best(model, src, src_lengths, settings, **overrides)
    return [hypotheses[0] for hypotheses in n_best]


def beam_search_n_best(
    model: SearchModel,
    src: Tensor,
    src_lengths: Tensor,
    settings: SearchSettings = SearchSettings(),  # noqa: B008 (frozen, so safe as a default)
    **overrides: float | int,
) -> list[list[Hypothesis]]:
    """Like :func:`beam_search`, but every finished hypothesis per sentence, best first.

    Each sentence gets at least ``K`` hypotheses (fewer when it reached its length
    limit first, or when its other continuations have probability 0), each with its own
    attention weights.
    """
    settings = settings.with_overrides(**overrides)
    beam_size = settings.beam_size
    with inference(model):
        memory = model.encode(src, src_lengths)
        ranking = _Ranking(
            settings.length_penalty,
            settings.coverage_penalty,
            _source_words(src, memory.lengths),
            settings.early_stopping or beam_size == 1,  # beam 1 is greedy search
        )
        limits = max_lengths(
            memory.lengths, settings.max_len_a, settings.max_len_b, model.max_target_len
        ).tolist()
        finished: list[list[Hypothesis]] = [[] for _ in limits]
        beams = _initial_beams(model, memory, beam_size)
        step = 0
        while beams.sentence.numel():
            step += 1
            log_probs, weights, state = next_log_probs(
                model, beams.tokens[:, -1], beams.state, beams.memory
            )
            block_repeats(log_probs, beams.tokens[:, 1:], settings.no_repeat_ngram)
            beams.trail.weights.append(weights)  # (N, S)
            beams.state = state
            candidates = _top_candidates(beams.scores, log_probs, beam_size)
            _finish_eos(beams, candidates, step, beam_size, ranking, finished)
            beams = _advance(beams, candidates, beam_size)
            _finish_at_limit(beams, step, limits, ranking, finished)
            beams = _drop_done(beams, step, limits, ranking, finished)
            beams.gather_state()
    return [sorted(hyps, key=lambda h: -h.score) for hyps in finished]


def _initial_beams(model: SearchModel, memory: SourceMemory, k: int) -> _Beams:
    """Expand every sentence to K rows; only beam 0 is live at the first step."""
    batch, device = memory.mask.shape[0], memory.mask.device
    rows = torch.arange(batch, device=device).repeat_interleave(k)  # (N,)
    scores = torch.full((batch, k), -torch.inf, device=device)
    scores[:, 0] = 0.0  # the other K-1 copies would only duplicate beam 0
    tokens = torch.full((batch * k, 1), BOS, dtype=torch.long, device=device)
    state = model.initial_state(memory).index_select(rows)
    shared = model.beams_share_memory
    if not shared:
        memory = memory.index_select(rows)
    sentences = torch.arange(batch, device=device)
    return _Beams(sentences, scores, tokens, _Trail([], []), state, memory, shared)


def _top_candidates(scores: Tensor, log_probs: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The 2K best one-token extensions per sentence: ``scores, beam, token``, each ``(n, 2K)``.

    A sentence's 2K best extensions are among its beams' own 2K best tokens,
    so only those ``(N, 2K)`` are added to the beams' scores and ranked.
    """
    n = scores.shape[0]
    width = min(2 * k, log_probs.shape[-1])
    best, tokens = log_probs.topk(width, dim=-1)  # (N, W) each
    total = (scores.view(n * k, 1) + best).view(n, k * width)  # (n, K*W)
    top_scores, flat = total.topk(min(2 * k, k * width), dim=-1)  # (n, 2K)
    return top_scores, flat // width, tokens.view(n, k * width).gather(1, flat)


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
    weights = beams.trail.gather(rows).float().cpu()  # (P, t, S)
    lengths = beams.source_lengths(rows)
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
    beams.trail.follow(rows)
    kept = _Beams(
        beams.sentence,
        scores.gather(1, order),  # (n, K)
        beams.tokens[rows],
        beams.trail,
        beams.state,  # gathered once the done sentences are dropped too
        beams.memory,  # rows of one sentence share its source, no reorder needed
        beams.shared,
        rows,
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
    Stopping at K finished hypotheses alone (``early_stopping``) may end a
    sentence on K early, poor ``<eos>`` candidates while a far better beam is
    still one step short; it is offered because it is much faster when
    ``alpha > 0`` makes the bound loose.
    """
    k = beams.scores.shape[1]
    best_live = beams.scores.max(dim=1).values.tolist()  # (n,)
    keep = [
        i
        for i, sentence in enumerate(beams.sentence.tolist())
        if step < limits[sentence]
        and not _settled(finished[sentence], best_live[i], k, ranking, step, limits[sentence])
    ]
    if len(keep) == beams.sentence.numel():
        return beams
    device = beams.scores.device
    sentences = torch.tensor(keep, dtype=torch.long, device=device)  # (n',)
    rows = (sentences[:, None] * k + torch.arange(k, device=device)).view(-1)  # (n'*K,)
    return beams.index_select(sentences, rows)


def _settled(
    done: list[Hypothesis], best_live: float, k: int, ranking: _Ranking, step: int, limit: int
) -> bool:
    """Whether a sentence is done: K finished hypotheses and, unless stopping
    early, no live beam that could still beat the best of them; or a finished one and
    no live beam of any probability (all -inf: none could ever become a hypothesis)."""
    if done and best_live == -math.inf:
        return True
    if len(done) < k:
        return False
    if ranking.early_stopping:
        return True
    alpha = ranking.alpha
    # lp grows with length for alpha > 0 and shrinks for alpha < 0; logp <= 0
    largest_penalty = max(length_penalty(step + 1, alpha), length_penalty(limit, alpha))
    return max(h.score for h in done) >= best_live / largest_penalty
