"""Which checkpoint ``--checkpoint auto`` takes: ``best``, ``last`` or ``averaged``, compared on the
whole validation set when training ends.

Training keeps ``best`` by the greedy BLEU of its validations, which read only
the first ``train.valid_bleu_sentences`` sentences where that is set (the
quick preset reads 300 of Multi30k's 1,014). On so few sentences the winner
is often noise: with a learning rate that falls to its floor at the step
budget, the quick preset's ``last`` checkpoint scored 0.24 and 0.69 test BLEU
above the ``best`` chosen on 300 sentences in two runs, and its ``averaged``
one 1.5 and 0.9 above (benchmarks/RESULTS.md).

So when training ends (and after ``attnkit average``) :func:`choose_checkpoint`
scores each candidate, ``best``, ``last`` (unless it is ``best``'s step) and
``averaged`` (where the run has one), with training's greedy validation on
every validation sentence, or takes training's own scores where its
validation already read them all, and records the winner in
``RUN/choice.json``. Ties go to the later weights: ``averaged``, then
``last``, then ``best``. :meth:`~attnkit.nmt.runs.run_folder.RunFolder.resolve_checkpoint`
follows the record while the checkpoint it names is still the one scored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from ...atomic import atomic_write_bytes
from ..config import RunConfig
from ..precision import Precision
from ..runs.checkpoint import latest_good, load_latest
from ..runs.run_folder import AVERAGED, RunFolder, checkpoint_step
from .prepare import ValidationData
from .scoring import model_from_weights, reads_part, validation_scores, whole_set

__all__ = ["CANDIDATES", "Choice", "choose_checkpoint", "pick"]

CANDIDATES = (AVERAGED, "last", "best")  # the tie order: the later weights first


@dataclass(frozen=True)
class Choice:
    """What :func:`choose_checkpoint` decided.

    Attributes:
        chosen: the checkpoint ``auto`` now means.
        steps: each candidate's step (``averaged``: its newest snapshot's).
        scores: each candidate's greedy valid BLEU (sacreBLEU, 0-100).
        whole: True when the scores were measured here on the whole validation
            set; False when they are training's (which read all of it, or there
            was one candidate).
    """

    chosen: str
    steps: dict[str, int]
    scores: dict[str, float]
    whole: bool

    def line(self) -> str:
        """``checkpoint auto: last (whole valid set, greedy BLEU: last 37.10 at step 2750, …)``."""
        where = "whole valid set" if self.whole else "training's validation"
        shown = ", ".join(
            f"{name} {self.scores[name]:.2f} at step {self.steps[name]}" for name in self.scores
        )
        return f"checkpoint auto: {self.chosen} ({where}, greedy BLEU: {shown})"

    def record(self) -> dict:
        """The JSON of ``RUN/choice.json``."""
        return {
            "chosen": self.chosen,
            "steps": self.steps,
            "scores": self.scores,
            "whole_valid_set": self.whole,
        }


def choose_checkpoint(
    folder: RunFolder,
    config: RunConfig,
    data: ValidationData,
    *,
    device: torch.device,
    precision: Precision,
) -> Choice:
    """Score the candidates of ``folder``, write ``RUN/choice.json`` and return the choice.

    Args:
        folder: a run folder whose training has ended.
        config: its config; data: its validation data (:func:`.prepare.validation_data`).
        device, precision: where and in which arithmetic to validate.

    Raises:
        ValueError: the run has neither a ``best`` nor a ``last`` checkpoint, or
            one does not fit the model.
        WriteError: the record could not be written.
    """
    steps, recorded = _candidates(folder)
    if not steps:
        raise ValueError(f"{folder.path} holds no best or last checkpoint to choose from")
    whole = reads_part(config, data) and len(steps) > 1
    if whole:
        recorded = _whole_set_scores(folder, config, data, steps, device, precision)
    scores = {name: recorded[name] for name in CANDIDATES if name in recorded}
    choice = Choice(pick(scores), {name: steps[name] for name in scores}, scores, whole)
    text = json.dumps(choice.record(), indent=2) + "\n"
    atomic_write_bytes(folder.choice, text.encode("utf-8"))
    return choice


def pick(scores: dict[str, float]) -> str:
    """The name of the highest score; ties go to the first in :data:`CANDIDATES`."""
    return max(scores, key=lambda name: (scores[name], -CANDIDATES.index(name)))


def _candidates(folder: RunFolder) -> tuple[dict[str, int], dict[str, float]]:
    """Each candidate's step and the valid BLEU training recorded for it."""
    states = {}
    for name in CANDIDATES:
        found = latest_good(folder.checkpoint(name))
        if found and checkpoint_step(found[1]) is not None:
            states[name] = found[1]
    steps = {name: checkpoint_step(state) for name, state in states.items()}
    if "last" in steps and steps["last"] == steps.get("best"):
        del steps["last"]  # the same weights, saved by the same validation
    rows = {row.get("step"): row.get("valid_bleu") for row in folder.read_history(float("inf"))}
    scores = {}
    for name, step in steps.items():
        bleu = states[name].get("valid_bleu") if name == AVERAGED else rows.get(step)
        scores[name] = float(bleu) if isinstance(bleu, int | float) else float("-inf")
    return steps, scores


def _whole_set_scores(folder, config, data, steps, device, precision) -> dict[str, float]:
    every = whole_set(config)
    scores = {}
    for name in steps:
        path = folder.checkpoint(name)
        weights = load_latest(path).model
        model = model_from_weights(every, data, weights, device, f"{path}'s weights")
        scores[name] = validation_scores(model, data, every, device, precision)["valid_bleu"]
    return scores
