"""Attention diagnostics on any batch of weights: entropy, padding mass, coverage, monotonicity.

Every tensor function takes attention weights ``(B, T, S)`` (one row per
output step, one column per source token, as search and forced decoding give
them) with boolean masks, True at real positions (the attnkit convention):
``src_mask (B, S)`` and ``tgt_mask (B, T)``. A model builder can call them in
their own loop; :func:`summarize` gathers the corpus figures that
``attnkit inspect`` prints. Text figures (:func:`repeated_ngram_rate`,
:func:`length_ratio`) work on whitespace words.

* entropy of a row: ``H_t = -sum_s w_ts log w_ts`` (nats); 0 for a one-hot row,
  ``log S`` for a uniform one.
* coverage of a source token: ``c_s = sum_t w_ts`` over the real output steps
  (Tu et al. 2016, sec. 3; the quantity in GNMT's coverage penalty, Wu et al.
  2016, eq. 14); under-covered below 0.5, over-covered above 1.5.
* padding mass: the weight on masked source positions in real rows; a correct
  mask makes it exactly 0.
* monotonicity: Spearman's rank correlation between output position ``t`` and
  the source position of its largest weight ``argmax_s w_ts``; 1 for a
  diagonal alignment, -1 for an anti-diagonal one.
* last-word share: the share of output steps whose largest weight is on the
  last source word (usually the final ``.``) -- the signature of a saturated
  softmax (unscaled dot-product scores) that summarises the sentence in one
  state; in a healthy model it is near ``1 / S``.
* ``</s>`` shares: of the output words' steps (the ``</s>`` output left out),
  the share whose largest weight is on the source's ``</s>``, and the same for
  each sentence's first output word alone (an RNN whose first state is
  bridged from the encoder can predict it without looking).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

__all__ = [
    "Summary",
    "attention_entropy",
    "coverage",
    "coverage_shares",
    "last_word_share",
    "length_ratio",
    "monotonicity",
    "padding_mass",
    "repeated_ngram_rate",
    "summarize",
]


def _check(weights: Tensor, src_mask: Tensor, tgt_mask: Tensor) -> None:
    """Raise a ValueError naming the argument when the shapes do not fit ``(B, T, S)``."""
    if not isinstance(weights, Tensor) or weights.dim() != 3:
        shape = tuple(weights.shape) if isinstance(weights, Tensor) else type(weights).__name__
        raise ValueError(f"weights must be (B, T, S), got {shape}")
    batch, steps, src_len = weights.shape
    for arg, mask, shape in (
        ("src_mask", src_mask, (batch, src_len)),
        ("tgt_mask", tgt_mask, (batch, steps)),
    ):
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.shape != shape:
            got = (
                f"{tuple(mask.shape)} {mask.dtype}"
                if isinstance(mask, Tensor)
                else type(mask).__name__
            )
            raise ValueError(
                f"{arg} must be bool {shape} for weights {tuple(weights.shape)}, got {got}"
            )


def attention_entropy(weights: Tensor, src_mask: Tensor, tgt_mask: Tensor) -> Tensor:
    """Entropy of each output step's attention ``H_t = -sum_s w_ts log w_ts`` (nats).

    Args:
        weights: ``(B, T, S)`` float, rows sum to 1 over the real source.
        src_mask: ``(B, S)`` bool, True at real source tokens.
        tgt_mask: ``(B, T)`` bool, True at real output steps.

    Returns:
        ``(B, T)`` float; 0 at padded steps. ``0 log 0`` counts as 0.

    Raises:
        ValueError: shapes that do not fit ``(B, T, S)``.
    """
    _check(weights, src_mask, tgt_mask)
    w = weights.detach().float() * src_mask[:, None, :]  # (B, T, S)
    terms = torch.where(w > 0, -w * w.clamp_min(torch.finfo(w.dtype).tiny).log(), 0.0)
    return terms.sum(dim=-1) * tgt_mask  # (B, T)


def padding_mass(weights: Tensor, src_mask: Tensor, tgt_mask: Tensor) -> float:
    """Total weight on masked source positions, summed over real output steps (must be 0).

    Raises:
        ValueError: shapes that do not fit ``(B, T, S)``.
    """
    _check(weights, src_mask, tgt_mask)
    real_rows = weights.detach().float() * tgt_mask[:, :, None]  # (B, T, S)
    on_padding = real_rows * (~src_mask)[:, None, :]  # (B, T, S)
    return float(on_padding.sum())


def coverage(weights: Tensor, src_mask: Tensor, tgt_mask: Tensor) -> Tensor:
    """Coverage of each source token ``c_s = sum_t w_ts`` over real output steps.

    Returns:
        ``(B, S)`` float; 0 at padded source positions.

    Raises:
        ValueError: shapes that do not fit ``(B, T, S)``.
    """
    _check(weights, src_mask, tgt_mask)
    return (weights.detach().float() * tgt_mask[:, :, None]).sum(dim=1) * src_mask  # (B, S)


def coverage_shares(
    cover: Tensor, src_mask: Tensor, low: float = 0.5, high: float = 1.5
) -> tuple[float, float]:
    """Shares of real source tokens with coverage ``< low`` and ``> high``.

    Args:
        cover: ``(B, S)`` float, from :func:`coverage`.
        src_mask: ``(B, S)`` bool, True at the source tokens to count.
        low: under-coverage bound.
        high: over-coverage bound.

    Returns:
        ``(under, over)`` fractions in [0, 1] (0 when no token is real).
    """
    real = int(src_mask.sum())
    if real == 0:
        return 0.0, 0.0
    under = int(((cover < low) & src_mask).sum())
    over = int(((cover > high) & src_mask).sum())
    return under / real, over / real


def monotonicity(weights: Tensor, src_mask: Tensor, tgt_mask: Tensor) -> Tensor:
    """Spearman correlation of output position and argmax source position, per sentence.

    Returns:
        ``(B,)`` float in [-1, 1]; NaN where it is undefined (fewer than two
        real steps, or every step attends most to the same source token).

    Raises:
        ValueError: shapes that do not fit ``(B, T, S)``.
    """
    _check(weights, src_mask, tgt_mask)
    masked = weights.detach().float().masked_fill(~src_mask[:, None, :], -1.0)  # (B, T, S)
    argmax = masked.argmax(dim=-1)  # (B, T)
    out = torch.full((weights.shape[0],), math.nan)
    for b in range(weights.shape[0]):
        positions = argmax[b][tgt_mask[b]].float()  # (T_b,)
        if positions.numel() < 2 or bool((positions == positions[0]).all()):
            continue
        ranks = _average_ranks(positions)
        steps = torch.arange(positions.numel(), dtype=torch.float)  # already ranks, no ties
        out[b] = torch.corrcoef(torch.stack([steps, ranks]))[0, 1]
    return out


def last_word_share(weights: Tensor, src_mask: Tensor, tgt_mask: Tensor) -> tuple[int, int]:
    """(output steps whose argmax is the last real source position, real output steps).

    Raises:
        ValueError: shapes that do not fit ``(B, T, S)``.
    """
    _check(weights, src_mask, tgt_mask)
    masked = weights.detach().float().masked_fill(~src_mask[:, None, :], -1.0)  # (B, T, S)
    last = src_mask.long().sum(dim=1) - 1  # (B,)
    on_last = (masked.argmax(dim=-1) == last[:, None]) & tgt_mask  # (B, T)
    return int(on_last.sum()), int(tgt_mask.sum())


def _average_ranks(x: Tensor) -> Tensor:
    """Ranks 0..n-1 of ``x`` ``(n,)``, ties sharing their mean rank (as Spearman needs)."""
    order = x.argsort()
    ranks = torch.empty_like(x)
    ranks[order] = torch.arange(x.numel(), dtype=x.dtype)
    for value in x.unique():
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def repeated_ngram_rate(hypotheses: Sequence[str], references: Sequence[str], n: int = 3) -> float:
    """Share of output words inside an n-gram repeated more often than the reference has it.

    An n-gram of a hypothesis is *repeated* when it occurs in it more than
    ``max(1, count in the reference)`` times; every word covered by one of its
    occurrences counts. A legitimately repeated phrase of the reference is
    not penalised.

    Returns:
        a fraction in [0, 1] over all hypothesis words (0 for no words).

    Raises:
        ValueError: different numbers of hypotheses and references, or ``n < 1``.
    """
    if len(hypotheses) != len(references) or n < 1:
        raise ValueError(
            f"hypotheses has {len(hypotheses)} lines and references {len(references)} "
            f"(must match), n={n} (must be >= 1)"
        )
    flagged = total = 0
    for hyp, ref in zip(hypotheses, references, strict=True):
        words, ref_words = hyp.split(), ref.split()
        grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
        allowed = Counter(tuple(ref_words[i : i + n]) for i in range(len(ref_words) - n + 1))
        counts = Counter(grams)
        covered = set()
        for i, gram in enumerate(grams):
            if counts[gram] > max(1, allowed[gram]):
                covered.update(range(i, i + n))
        flagged, total = flagged + len(covered), total + len(words)
    return flagged / total if total else 0.0


def length_ratio(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Mean over sentences of ``words(hypothesis) / words(reference)`` (empty references skipped).

    Raises:
        ValueError: different numbers of hypotheses and references.
    """
    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses has {len(hypotheses)} lines but references has {len(references)}"
        )
    ratios = [
        len(h.split()) / len(r.split())
        for h, r in zip(hypotheses, references, strict=True)
        if r.split()
    ]
    return sum(ratios) / len(ratios) if ratios else 0.0


@dataclass
class Summary:
    """Corpus figures of ``attnkit inspect`` (see the module docstring for each)."""

    sentences: int
    mean_entropy: float
    padding_mass: float
    under_covered: float
    over_covered: float
    mean_coverage: float
    monotonicity: float
    monotonicity_sentences: int
    last_word_share: float
    eos_share: float
    first_word_on_eos: float
    repeated_3gram_rate: float
    length_ratio: float

    def as_dict(self) -> dict:
        return asdict(self)


def _share(hits: int, counted: int) -> float:
    return hits / counted if counted else 0.0


def _length_mask(lengths: Tensor, size: int) -> Tensor:
    """``(B, size)`` bool, True at positions below each length (True = real)."""
    return torch.arange(size, device=lengths.device)[None, :] < lengths[:, None]


def summarize(
    batches: Iterable[tuple[Tensor, ...]],
    hypotheses: Sequence[str],
    references: Sequence[str],
    *,
    ends_with_eos: bool = True,
) -> tuple[Summary, Tensor]:
    """Corpus figures from padded batches of weights and the output/reference texts.

    Entropy and padding mass use every real row and column. Coverage and
    monotonicity leave out ``</s>`` (``ends_with_eos``: the last real source
    token and output step of each sentence), so they speak of words only.

    Args:
        batches: ``(weights (B, T, S), src_lengths (B,), tgt_lengths (B,))`` per
            batch, lengths counting real positions (``</s>`` included), optionally
            followed by ``tgt_ended (B,)`` bool: False for an output that stopped
            at its length limit without ``</s>`` (its last step is a word's).
        hypotheses: the outputs, one per sentence.
        references: the references, one per sentence.
        ends_with_eos: both sides end in ``</s>`` (outputs only where ``tgt_ended``).

    Returns:
        the :class:`Summary` and every counted source token's coverage ``(N,)``
        (for a histogram).

    Raises:
        ValueError: as the tensor functions, or texts of different lengths.
    """
    entropy_sum = steps = mass = 0.0
    covers, monotone, on_last, word_steps = [], [], 0, 0
    on_eos = [0, 0, 0, 0]  # word steps on </s>, word steps, first steps on </s>, first steps
    for weights, src_lengths, tgt_lengths, *tgt_ended in batches:
        src_mask = _length_mask(src_lengths, weights.shape[2])  # (B, S)
        tgt_mask = _length_mask(tgt_lengths, weights.shape[1])  # (B, T)
        entropy_sum += float(attention_entropy(weights, src_mask, tgt_mask).sum())
        steps += int(tgt_mask.sum())
        mass += padding_mass(weights, src_mask, tgt_mask)
        drop = int(ends_with_eos)
        tgt_drop = tgt_ended[0].long() * drop if tgt_ended else drop  # (B,) or an int
        src_words = _length_mask(src_lengths - drop, weights.shape[2])  # (B, S)
        tgt_words = _length_mask(tgt_lengths - tgt_drop, weights.shape[1])  # (B, T)
        covers.append(coverage(weights, src_words, tgt_words)[src_words])
        monotone.append(monotonicity(weights, src_words, tgt_words))
        hits, counted = last_word_share(weights, src_words, tgt_words)
        on_last, word_steps = on_last + hits, word_steps + counted
        if ends_with_eos:  # the last real source position is </s>
            first = tgt_words & (torch.arange(weights.shape[1], device=weights.device) == 0)
            found = (*last_word_share(weights, src_mask, tgt_words),
                     *last_word_share(weights, src_mask, first))  # fmt: skip
            on_eos = [a + b for a, b in zip(on_eos, found, strict=True)]
    cover = torch.cat(covers) if covers else torch.zeros(0)
    rho = torch.cat(monotone) if monotone else torch.zeros(0)
    defined = rho[~rho.isnan()]
    under, over = coverage_shares(cover, torch.ones_like(cover, dtype=torch.bool))
    summary = Summary(
        sentences=len(hypotheses),
        mean_entropy=entropy_sum / steps if steps else 0.0,
        padding_mass=mass,
        under_covered=under,
        over_covered=over,
        mean_coverage=float(cover.mean()) if cover.numel() else 0.0,
        monotonicity=float(defined.mean()) if defined.numel() else math.nan,
        monotonicity_sentences=int(defined.numel()),
        last_word_share=on_last / word_steps if word_steps else 0.0,
        eos_share=_share(*on_eos[:2]) if ends_with_eos else math.nan,
        first_word_on_eos=_share(*on_eos[2:]) if ends_with_eos else math.nan,
        repeated_3gram_rate=repeated_ngram_rate(hypotheses, references, 3),
        length_ratio=length_ratio(hypotheses, references),
    )
    return summary, cover
