"""Guided alignment: the translation loss plus the cross-entropy of one attention and word links.

Garg et al. 2019 ("Jointly Learning to Align and Translate with Transformer
Models", sec. 4.1-4.2, eq. 4): one (or more) heads of one decoder layer are
supervised with an external aligner's links. With ``G`` the links of a
sentence pair (target piece ``t`` x source piece ``s``, 1 where linked) and
``p^G_{t,s} = G_{t,s} / sum_s' G_{t,s'}`` (each linked target row normalised),
the alignment loss is

    L_a = -(1/R) sum_{rows t with a link} sum_s p^G_{t,s} log a_{t,s}

with ``a`` the supervised heads' mean attention and ``R`` the number of
linked target rows in the batch (rows without a link, and pairs without an
alignment, contribute nothing; those pairs are still trained on through the
cross-entropy). Garg et al. divide by the target length; dividing by the
linked rows keeps the weight's meaning when an aligner leaves words
unaligned. :func:`alignment_loss` reports it less the entropy of ``p^G`` (a
constant of the labels, so the gradient is the same): 0 exactly when the
attention equals the labels, positive otherwise. Training minimises
``CE + weight * L_a``.

**Timing** (which decoder step is supervised for target piece ``t``): the
teacher-forced pass has one row per decoder input ``tgt_in = [<s>, y_1..]``.
``shift: 1`` (the default) supervises the row whose *input* is ``y_t`` (row
``t + 1``): that step has read the word it must align, so the head learns a
look-up of the word in the source, close to Garg et al.'s full-context
alignment (their second decoder pass without the causal mask, which lets the
step see ``y_t``) without that extra pass; it is shift-att's timing (Chen
et al. 2020), which reads unsupervised attention at this step too.
``full_context: true`` takes Garg et al.'s route (as OpenNMT-py's
``full_context_alignment``): the supervised attention comes from a second
decoder pass without the causal mask, up to the supervised layer, so the step
for ``y_t`` also sees the words after it. ``shift: 0`` supervises the row that
*predicts* ``y_t`` (it has not seen it). Extraction must use the same shift and
pass (``attnkit align`` reads both from the run).

Source ``</s>`` and target ``</s>`` are never linked (the labels come from
:mod:`attnkit.nmt.data.word_links`; :class:`~attnkit.nmt.data.batching.Batch`
carries them as ``align`` ``(B, T, S)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..config import TrainConfig
from ..config.guided_alignment import GuidedAlignmentConfig
from ..data.batching import Batch
from ..models.translator import Translator
from . import objective
from .distributed import Group

__all__ = [
    "StepTerms",
    "alignment_loss",
    "global_batch_loss",
    "guided_terms",
    "supervised_layer",
    "training_terms",
]

EPS = 1e-9  # floor of a weight inside the log: a zero weight costs -p log(1e-9), never inf


def alignment_loss(weights: Tensor, align: Tensor, shift: int = 1) -> tuple[Tensor, int]:
    """Garg et al. 2019 eq. 4 less the labels' entropy: ``(1/R) sum_t KL(p^G_t || a_t)``.

    ``KL(p^G_t || a_t) = sum_s p^G_{t,s} (log p^G_{t,s} - log a_{t,s})`` is eq. 4's
    cross-entropy minus the entropy of ``p^G_t``, a constant of the labels: the
    same gradient, and 0 exactly when the attention matches the labels (a row
    with one link: the cross-entropy itself). Weights are floored at 1e-9
    inside the log.

    Args:
        weights: attention ``a``, ``(B, T, S)`` float, one row per decoder input
            (``tgt_in``), rows summing to 1 over the real source tokens.
        align: links ``G``, ``(B, T, S)``, row ``t`` = target piece ``t`` (the row
            of ``tgt_out``); >= 0, any scale (each row is normalised here).
        shift: 1: target piece ``t`` is supervised at row ``t + 1`` (the step that
            reads it); 0: at row ``t`` (the step that predicts it).

    Returns:
        ``(loss, R)``: the mean over the ``R`` linked target rows (a scalar tensor,
        0 with no gradient path when ``R = 0``) and ``R``.

    Raises:
        ValueError: ``weights`` and ``align`` differ in shape, or ``shift`` not 0/1.
    """
    if weights.shape != align.shape:
        raise ValueError(
            f"weights has shape {tuple(weights.shape)} but align has {tuple(align.shape)}"
        )
    if shift not in (0, 1):
        raise ValueError(f"shift must be 0 or 1, got {shift!r}")
    if shift:
        weights, align = weights[:, 1:], align[:, :-1]  # row t+1 reads piece t
    align = align.float()
    mass = align.sum(dim=-1, keepdim=True)  # (B, T', 1)
    linked = mass.squeeze(-1) > 0  # (B, T')
    rows = int(linked.sum())
    if rows == 0:
        return weights.sum() * 0.0, 0
    target = (align / mass.clamp_min(1.0e-12)).float()  # (B, T', S), linked rows sum to 1
    log_a = torch.log(weights.float().clamp_min(EPS))  # (B, T', S)
    log_p = torch.log(target.clamp_min(EPS))  # (B, T', S); only read where target > 0
    per_row = (target * (log_p - log_a)).sum(dim=-1)  # (B, T')
    return per_row[linked].sum() / rows, rows


def supervised_layer(config: GuidedAlignmentConfig, layers: int) -> int:
    """The 0-based decoder layer to supervise (:meth:`GuidedAlignmentConfig.decoder_layer`).

    Raises:
        ValueError: the configured layer is not one of the ``layers`` decoder layers.
    """
    return config.decoder_layer(layers)


def _total(ce: Tensor, loss_a: Tensor | None, weight: float) -> Tensor:
    """``CE + weight * L_a``; ``CE`` alone for a batch without labels."""
    return ce if loss_a is None else ce + weight * loss_a


def guided_terms(
    model: Translator,
    batch: Batch,
    config: GuidedAlignmentConfig,
    smoothing: float,
    *,
    layers: int,
    heads: int,
) -> tuple[Tensor, Tensor | None, int]:
    """``(CE, L_a, R)`` for a training batch (teacher forced, one forward pass); ``L_a`` is
    None for a batch without labels, ``R`` its linked target rows (:func:`alignment_loss`).

    The cross-entropy is :func:`~attnkit.nmt.training.objective.token_loss`'s
    (label smoothed, PAD ignored, the mean over the batch's target tokens).

    Args:
        model: the translator (or its DDP wrapper: called, never reached into).
        batch: a batch whose ``align`` holds the labels (None: CE alone).
        config: the ``train.guided_alignment`` section.
        smoothing: label smoothing.
        layers, heads: the model's decoder layers and heads per layer
            (``model.attention_layout``).

    Raises:
        ValueError: a configured head outside ``range(heads)``.
    """
    layer = supervised_layer(config, layers)
    picked = config.head_indices(heads)
    vectors, weights = model(
        batch.src,
        batch.src_lengths,
        batch.tgt_in,
        supervised_layer=layer,
        full_context=config.full_context,
        logits=False,
    )
    ce = objective.output_cross_entropy(model, vectors, batch, smoothing)
    if batch.align is None:
        return ce, None, 0
    attention = weights[:, picked].mean(dim=1)  # (B, T, S)
    loss_a, rows = alignment_loss(attention, batch.align, config.shift)
    return ce, loss_a, rows


@dataclass(frozen=True)
class StepTerms:
    """A training batch's loss terms, as :func:`training_terms` computes them on one rank.

    Attributes:
        ce: the label-smoothed cross-entropy, the mean over the batch's target tokens.
        alignment: ``L_a``, the mean over the batch's ``rows`` linked target rows (None
            without guidance or labels).
        rows: ``R``, the linked target rows ``alignment`` averages (0 without).
        weight: ``lambda``, the weight of ``L_a`` in the loss (0 without guidance).
    """

    ce: Tensor
    alignment: Tensor | None = None
    rows: int = 0
    weight: float = 0.0

    @property
    def loss(self) -> Tensor:
        """``CE + weight * L_a`` (``CE`` alone without an alignment term)."""
        return _total(self.ce, self.alignment, self.weight)


def training_terms(forward, model: Translator, batch: Batch, train: TrainConfig) -> StepTerms:
    """The training step's loss terms: with ``train.guided_alignment``, ``CE`` and ``L_a``
    (:func:`guided_terms`), else :func:`~attnkit.nmt.training.objective.token_loss` alone.

    Args:
        forward: what the step calls (the model, or its DDP wrapper).
        model: the translator itself (its ``attention_layout``).
        batch: the batch.
        train: the ``train`` section.
    """
    guided = train.guided_alignment
    if guided is None:
        return StepTerms(
            objective.token_loss(forward, batch, train.label_smoothing, train.teacher_forcing)
        )
    layout = model.attention_layout
    ce, loss_a, rows = guided_terms(
        forward, batch, guided, train.label_smoothing, layers=layout.layers, heads=layout.heads
    )
    return StepTerms(ce, loss_a, rows, guided.weight)


def global_batch_loss(
    terms: StepTerms, tokens: int, total_tokens: int, group: Group
) -> tuple[Tensor, float, float]:
    """This rank's part of a global batch's loss, and the global batch's loss and ``L_a``.

    A global batch of ``N = total_tokens`` target tokens and ``R`` linked target rows
    is shared out among the ``W`` ranks of ``group``; rank ``r`` holds ``n_r =
    tokens`` of the tokens and ``R_r = terms.rows`` of the rows. Its part is

        W * (n_r / N) * CE_r + weight * W * (R_r / R) * L_a,r

    so the mean of the ranks' gradients (DDP's all-reduce) is the gradient of the
    global batch's ``CE + weight * L_a``, CE a mean over its N tokens and ``L_a`` one
    over its R linked rows, as one process computes them on the whole batch (a mean
    of the ranks' own ``L_a`` would weight a row by its rank's share of rows). ``R``
    comes from one float64 all-reduce, which also gives the global values. A
    stand-in share that counts nothing (``tokens = 0``) adds nothing.

    Returns:
        ``(part, loss, alignment)``: the tensor to backpropagate on this rank, and the
        global batch's ``CE + weight * L_a`` and ``L_a`` (0 without alignment terms).
    """
    world = group.world_size
    rows = terms.rows if tokens else 0
    ce = terms.ce * (tokens * world / total_tokens)
    aligned = 0.0 if terms.alignment is None else float(terms.alignment.detach()) * rows
    ce_mean, aligned_mean, rows_mean = group.means(float(ce.detach()), aligned, rows)
    all_rows = round(rows_mean * world)
    alignment = aligned_mean * world / all_rows if all_rows else 0.0
    loss = ce_mean + terms.weight * alignment
    if terms.alignment is None or not rows:
        return ce, loss, alignment
    return ce + terms.weight * terms.alignment * (rows * world / all_rows), loss, alignment
