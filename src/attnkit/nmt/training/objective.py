"""What training minimises and how a model is scored on the validation set.

The objective is the per-token cross-entropy of the target given the source
(Bahdanau et al. 2015 sec. 3; Luong et al. 2015 sec. 2, eq. 4) with label
smoothing (Szegedy et al. 2016 sec. 7), PAD positions ignored. Validation
reports the loss and perplexity without smoothing and greedy sacreBLEU on
detokenized output.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..analysis.metrics import perplexity, sacre_bleu
from ..config import RunConfig
from ..data.batching import Batch, Examples, make_batch, sorted_batches
from ..data.tokenizer import Tokenizer
from ..decoding.inference import inference
from ..decoding.search import decode_examples
from ..decoding.translate import input_limit
from ..models.translator import Translator
from ..vocab_ids import PAD
from .vocab_loss import linear_cross_entropy

__all__ = [
    "output_cross_entropy",
    "target_cross_entropy",
    "target_tokens",
    "token_loss",
    "validate",
]


def token_loss(
    model: Translator,
    batch: Batch,
    smoothing: float,
    teacher_forcing: float,
    reduction: str = "mean",
) -> torch.Tensor:
    """Label-smoothed cross-entropy of ``batch.tgt_out`` (PAD ignored), a scalar tensor.

    ``reduction`` is ``F.cross_entropy``'s: ``"mean"`` over the batch's target
    tokens, or ``"sum"``. ``teacher_forcing`` is the share of decoder inputs
    taken from the reference (1.0: all). ``model`` may be the translator's DDP
    wrapper. The loss is computed in float32 even when the forward pass runs
    under a bf16 autocast; with full teacher forcing the output layer and the
    loss are fused (:func:`output_cross_entropy`), so the ``(B, T, V)`` logits
    are never built.
    """
    if teacher_forcing < 1.0:
        logits, _ = model(
            batch.src,
            batch.src_lengths,
            batch.tgt_in,
            teacher_forcing=teacher_forcing,
            need_weights=False,
        )  # (B, T, V)
        return target_cross_entropy(logits, batch, smoothing, reduction)
    vectors, _ = model(
        batch.src, batch.src_lengths, batch.tgt_in, need_weights=False, logits=False
    )  # (B, T, Do)
    return output_cross_entropy(model, vectors, batch, smoothing, reduction)


def output_cross_entropy(
    model: Translator,
    vectors: torch.Tensor,
    batch: Batch,
    smoothing: float,
    reduction: str = "mean",
) -> torch.Tensor:
    """:func:`target_cross_entropy` of the logits ``model.project(vectors)``, without
    building them: :func:`~attnkit.nmt.training.vocab_loss.linear_cross_entropy`.

    Args:
        model: the translator or its DDP wrapper (whose ``module`` is the translator).
        vectors: ``forward(..., logits=False)``'s output vectors ``(B, T, Do)``.
    """
    weight, bias = getattr(model, "module", model).output_layer
    return linear_cross_entropy(
        vectors,
        weight,
        bias,
        batch.tgt_out,
        ignore_index=PAD,
        smoothing=smoothing,
        reduction=reduction,
    )


def target_cross_entropy(
    logits: torch.Tensor, batch: Batch, smoothing: float, reduction: str = "mean"
) -> torch.Tensor:
    """Label-smoothed cross-entropy of ``logits`` ``(B, T, V)`` against ``batch.tgt_out``
    (PAD ignored), in float32 also when the logits are bf16 (autocast)."""
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),  # (B*T, V)
        batch.tgt_out.reshape(-1),  # (B*T,)
        ignore_index=PAD,
        label_smoothing=smoothing,
        reduction=reduction,
    )


def target_tokens(examples: Examples, indices: Sequence[int]) -> int:
    """Target tokens the loss counts in the batch of ``indices`` (EOS included, as in Batch),
    from the lengths alone (a stored corpus is not read for it)."""
    _, tgt = examples.lengths()
    return int(tgt[np.asarray(indices, dtype=np.int64)].sum()) + len(indices)


def validate(
    model: Translator,
    examples: Examples,
    references: list[str],
    tgt_tok: Tokenizer,
    config: RunConfig,
    device: torch.device,
) -> dict[str, float]:
    """Score ``model`` on the validation set, in eval mode without gradients.

    Returns ``valid_loss`` (mean per-token cross-entropy, no smoothing, over
    all of ``examples``), ``valid_ppl`` (its exponential) and ``valid_bleu``
    (sacreBLEU of greedy translations of the first
    ``config.train.valid_bleu_sentences`` sources against ``references``).
    With a position table (a Transformer's ``max_positions``), pairs with a
    side too long for it are left out of the loss (fairseq's
    ``--skip-invalid-size-inputs-valid-test``). For BLEU, sources are cut as
    translation cuts them (:func:`~attnkit.nmt.decoding.translate.input_limit`:
    ``decode.max_input_len``, else ``data.max_src_len``, else 256 tokens, within
    the position table), so one very long line in a validation file is no
    greedy search of tens of thousands of steps.
    The model's train/eval mode is restored on return, also when this raises.
    """
    with inference(model):
        total, tokens = 0.0, 0
        scored = _readable(model, examples)
        for indices in sorted_batches(scored, config.decode.batch_size):
            batch = make_batch(scored, indices).to(device)
            total += float(token_loss(model, batch, 0.0, 1.0, reduction="sum"))
            tokens += batch.num_target_tokens
        limit = config.train.valid_bleu_sentences or len(examples)
        cut = slice(input_limit(config, model.max_source_len))  # as translate cuts them
        subset = Examples([s[cut] for s in examples.src[:limit]], examples.tgt[:limit])
        hyps = decode_examples(
            model,
            subset,
            beam_size=1,
            max_len_a=config.decode.max_len_a,
            max_len_b=config.decode.max_len_b,
            batch_size=config.decode.batch_size,
            device=device,
        )
    texts = [tgt_tok.decode(h.tokens) for h in hyps]
    bleu = sacre_bleu(texts, references[:limit], tgt_lang=config.data.tgt_lang)
    loss = total / max(tokens, 1)
    return {"valid_loss": loss, "valid_ppl": perplexity(loss), "valid_bleu": bleu.score}


def _readable(model: Translator, examples: Examples) -> Examples:
    """The pairs that fit the model's position tables (:func:`fitting`); all of them when it
    has none."""
    if model.max_source_len is None and model.max_target_len is None:
        return examples
    keep = fitting(examples, model.max_source_len, model.max_target_len)
    if keep.all():
        return examples
    chosen = np.flatnonzero(keep).tolist()
    return Examples([examples.src[i] for i in chosen], [examples.tgt[i] for i in chosen])


def fitting(
    examples: Examples, max_source_len: int | None, max_target_len: int | None
) -> np.ndarray:
    """Which pairs' source (with ``</s>``) and target (with ``<s>`` or ``</s>``) fit position
    tables of these lengths (None: no table), as a boolean mask ``(N,)``."""
    src, tgt = examples.lengths()  # tokens without specials
    keep = np.ones(len(examples), dtype=bool)
    for lengths, limit in ((src, max_source_len), (tgt, max_target_len)):
        if limit is not None:
            keep &= lengths < limit
    return keep
