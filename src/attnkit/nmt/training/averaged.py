"""The ``averaged`` checkpoint: the mean of a run's last snapshots, validated like training does.

With ``train.average_last N`` the loop keeps the model weights of the last N
validations (:mod:`attnkit.nmt.runs.snapshots`); when training ends,
:func:`write_averaged` averages them (:func:`attnkit.nmt.runs.averaging.average_weights`,
Vaswani et al. 2017 sec. 6.1), scores the result with the validation of
training (:func:`.objective.validate`) and saves it as ``RUN/averaged.json``
(model weights only), its scores and the steps it averaged in the record's
state. :func:`average_run` does the same after the fact (``attnkit average RUN``).

Where training's validation BLEU reads only the first
``train.valid_bleu_sentences`` sentences, the averaged and the ``best``
weights are also compared on the whole validation set (greedy BLEU), and
``--checkpoint auto`` follows that comparison: on 300 of Multi30k's 1,014
valid sentences the averaged model of the quick preset scored 0.09 and 0.03
below best in two runs, on all of them 1.39 and 0.12 above, and on test2016
1.5 and 0.9 above (benchmarks/RESULTS.md, "A learning rate that ends with the
budget").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import RunConfig
from ..data.tokenizer import load_tokenizers
from ..device import resolve_device
from ..models.registry import build_translator
from ..precision import Precision, resolve_precision
from ..runs.averaging import average_weights
from ..runs.checkpoint import latest_good, load_checkpoint, save_checkpoint
from ..runs.run_folder import AVERAGED, RunFolder
from ..runs.runlock import run_lock
from . import objective
from .prepare import ValidationData, validation_data

__all__ = ["Averaged", "average_run", "write_averaged"]

_HOW = "train with --train.average_last N (N >= 2) to keep them"


@dataclass(frozen=True)
class Averaged:
    """What :func:`write_averaged` wrote.

    Attributes:
        path: the record, ``RUN/averaged.json``.
        steps: the steps of the snapshots averaged, oldest first.
        scores: its ``valid_loss``, ``valid_ppl`` and ``valid_bleu``.
        best_step, best_bleu: the ``best`` checkpoint's step and the valid BLEU
            training recorded for it (None without a readable ``best``).
        whole: ``(averaged, best)`` greedy BLEU on the whole validation set,
            where training's BLEU read only part of it and ``best`` exists.
    """

    path: Path
    steps: list[int]
    scores: dict[str, float]
    best_step: int | None
    best_bleu: float | None
    whole: tuple[float, float] | None = None

    def line(self) -> str:
        """``averaged 3 snapshots (steps 10, 15, 20): valid BLEU 12.40 vs best 12.00 ...``."""
        bleu = self.scores["valid_bleu"]
        if self.best_bleu is None:
            versus = "no best checkpoint to compare with"
        else:
            versus = (
                f"best {self.best_bleu:.2f} (step {self.best_step}), {bleu - self.best_bleu:+.2f}"
            )
        if self.whole is not None:
            mean, best = self.whole
            versus += f"; on the whole valid set {mean:.2f} vs {best:.2f}, {mean - best:+.2f}"
        steps = ", ".join(map(str, self.steps))
        return (
            f"averaged {len(self.steps)} snapshots (steps {steps}): valid BLEU {bleu:.2f} vs "
            f"{versus}; saved as {self.path} (--checkpoint averaged)"
        )


def write_averaged(
    folder: RunFolder,
    config: RunConfig,
    data: ValidationData,
    *,
    device: torch.device,
    precision: Precision,
    count: int | None = None,
) -> Averaged:
    """Average the newest ``count`` snapshots of ``folder`` (default: all), validate, save.

    The mean ``θ̄ = 1/N Σ θ_i`` of the snapshots' weights
    (:func:`~attnkit.nmt.runs.averaging.average_weights`) is loaded into a fresh
    model of ``config.model``, scored by :func:`.objective.validate` on ``device``
    under ``precision``, and written as the ``averaged`` checkpoint (weights
    only, atomically) with state ``{"averaged_steps", "step", "epoch",
    "valid_loss", "valid_ppl", "valid_bleu", "best_step", "best_bleu"}``, and
    ``"whole_valid_bleu"`` / ``"best_whole_valid_bleu"`` where training's BLEU
    reads fewer sentences than the validation set holds (:func:`_whole_set`).
    The global random state is left as it was.

    Raises:
        ValueError: fewer than 2 snapshots would be averaged, ``count`` is more
            than ``folder`` keeps, or a snapshot is damaged or does not fit the model.
        FileNotFoundError: a snapshot's weights file is missing.
        WriteError: the checkpoint could not be written.
    """
    snapshots = folder.snapshots
    if count is not None and count < 2:
        raise ValueError(f"averaging needs 2 or more snapshots, got count {count}")
    kept = snapshots.steps()
    if len(kept) < 2:
        raise ValueError(
            f"averaging needs 2 or more snapshots; {snapshots.folder} keeps {len(kept)}; {_HOW}"
        )
    loaded = snapshots.load_last(count)
    weights = average_weights([snapshot.model for snapshot in loaded])
    model = _model(config, data, weights, device, f"the snapshots in {snapshots.folder}")
    scores = _validate(model, data, config, device, precision)
    newest = loaded[-1].state
    best_step, best_bleu = _best(folder)
    steps = [snapshot.state["step"] for snapshot in loaded]
    state = {"averaged_steps": steps, "step": steps[-1], "epoch": newest.get("epoch"), **scores}
    state.update(best_step=best_step, best_bleu=best_bleu)
    whole = None
    if best_bleu is not None and _reads_part(config, data):
        whole = _whole_set(model, folder, config, data, device, precision)
        state.update(whole_valid_bleu=whole[0], best_whole_valid_bleu=whole[1])
    path = save_checkpoint(folder.path, AVERAGED, weights, state)
    return Averaged(path, steps, scores, best_step, best_bleu, whole)


def _model(config: RunConfig, data: ValidationData, weights, device, what: str):
    with torch.random.fork_rng(devices=[]):  # a fresh model's random init draws from it
        model = build_translator(config.model, data.src_tok.vocab_size, data.tgt_tok.vocab_size)
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise ValueError(f"{what} do not fit the model: {err}") from None
    return model.to(device)


def _validate(model, data: ValidationData, config: RunConfig, device, precision) -> dict:
    with precision.autocast():
        return objective.validate(model, data.valid, data.references, data.tgt_tok, config, device)


def _reads_part(config: RunConfig, data: ValidationData) -> bool:
    limit = config.train.valid_bleu_sentences
    return limit is not None and limit < len(data.valid.src)


def _whole_set(model, folder: RunFolder, config, data, device, precision) -> tuple[float, float]:
    """Greedy valid BLEU of the averaged and the ``best`` weights on every validation sentence."""
    every = config.model_copy(
        update={"train": config.train.model_copy(update={"valid_bleu_sentences": None})}
    )
    best = _model(
        every, data, load_checkpoint(folder.best).model, device, f"{folder.best}'s weights"
    )
    return tuple(_validate(m, data, every, device, precision)["valid_bleu"] for m in (model, best))


def _best(folder: RunFolder) -> tuple[int | None, float | None]:
    """The ``best`` checkpoint's step and recorded valid BLEU, (None, None) if unreadable."""
    found = latest_good(folder.best)
    progress = found[1].get("progress", {}) if found else {}
    if not isinstance(progress.get("best_bleu"), int | float) or progress["best_bleu"] < 0:
        return None, None
    return progress.get("best_step"), float(progress["best_bleu"])


def average_run(
    run_dir: str | Path,
    *,
    count: int | None = None,
    device: str = "cpu",
    precision: str = "auto",
    echo: Callable[[str], None] = print,
) -> Averaged:
    """``attnkit average RUN``: (re)build ``RUN/averaged.json`` from the snapshots it keeps.

    Holds the run folder's lock meanwhile (:mod:`attnkit.nmt.runs.runlock`), so
    it never writes while a training does.

    Args:
        run_dir: a run folder trained with ``train.average_last`` >= 2.
        count: average the newest ``count`` snapshots (default: all kept).
        device, precision: where and in which arithmetic to validate
            (:func:`attnkit.nmt.device.resolve_device`,
            :func:`attnkit.nmt.precision.resolve_precision`).
        echo: hears the lock's warnings.

    Raises:
        FileNotFoundError: ``run_dir`` is not a run folder.
        ValueError: as :func:`write_averaged`; ``device`` or ``precision`` is
            unknown or unavailable; the validation split is empty.
        RunInUse: a training holds the folder.
    """
    folder = RunFolder(Path(run_dir))
    if not folder.config.is_file():
        raise FileNotFoundError(
            f"{folder.config} not found; is {folder.path} a training run folder?"
        )
    where = resolve_device(device, "--device")
    arithmetic = resolve_precision(precision, where, option="--precision")
    with run_lock(folder.path, warn=echo):
        config = RunConfig.load(folder.config)
        data = validation_data(config, *load_tokenizers(folder.path))
        return write_averaged(folder, config, data, device=where, precision=arithmetic, count=count)
