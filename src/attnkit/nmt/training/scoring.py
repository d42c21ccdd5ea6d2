"""Score saved weights the way training validates: a fresh model, the validation pass, and the
whole validation set where training's BLEU read only part of it.

Used after training by :mod:`.averaged` (the mean of the snapshots) and
:mod:`.checkpoint_choice` (which checkpoint ``--checkpoint auto`` takes).
"""

from __future__ import annotations

from ..config import RunConfig
from ..models.registry import translator_for_weights
from ..precision import Precision
from . import objective
from .prepare import ValidationData

__all__ = ["model_from_weights", "reads_part", "validation_scores", "whole_set"]


def model_from_weights(config: RunConfig, data: ValidationData, weights, device, what: str):
    """A model of ``config.model`` holding ``weights`` on ``device``; the global RNG is untouched.

    Raises:
        ValueError: the weights do not fit the model (``what`` names them).
    """
    model = translator_for_weights(config.model, data.src_tok.vocab_size, data.tgt_tok.vocab_size)
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise ValueError(f"{what} do not fit the model: {err}") from None
    return model.to(device)


def validation_scores(
    model, data: ValidationData, config: RunConfig, device, precision: Precision
) -> dict[str, float]:
    """``valid_loss``, ``valid_ppl`` and greedy ``valid_bleu`` (:func:`.objective.validate`)."""
    with precision.autocast():
        return objective.validate(model, data.valid, data.references, data.tgt_tok, config, device)


def reads_part(config: RunConfig, data: ValidationData) -> bool:
    """Whether training's validation BLEU reads fewer sentences than ``data`` holds."""
    limit = config.train.valid_bleu_sentences
    return limit is not None and limit < len(data.valid.src)


def whole_set(config: RunConfig) -> RunConfig:
    """``config`` with validation BLEU read on every validation sentence."""
    train = config.train.model_copy(update={"valid_bleu_sentences": None})
    return config.model_copy(update={"train": train})
