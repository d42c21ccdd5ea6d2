"""The ``averaged`` checkpoint: the mean of a run's last snapshots, validated like training does.

With ``train.average_last N`` the loop keeps the model weights of the last N
validations (:mod:`attnkit.nmt.runs.snapshots`); when training ends,
:func:`write_averaged` averages them (:func:`attnkit.nmt.runs.averaging.average_weights`,
Vaswani et al. 2017 sec. 6.1), scores the result with the validation of
training (:func:`.objective.validate`) and saves it as ``RUN/averaged.json``
(model weights only), its scores and the steps it averaged in the record's
state. :func:`average_run` does the same after the fact (``attnkit average RUN``)
and then chooses again which checkpoint ``--checkpoint auto`` takes
(:mod:`.checkpoint_choice`, which compares ``averaged`` with ``best`` and
``last`` on the whole validation set).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import RunConfig
from ..data.tokenizer import load_tokenizers
from ..device import resolve_device
from ..precision import Precision, resolve_precision
from ..runs.averaging import average_weights
from ..runs.checkpoint import latest_good, save_checkpoint
from ..runs.run_folder import AVERAGED, RunFolder
from ..runs.runlock import run_lock
from .checkpoint_choice import Choice, choose_checkpoint
from .prepare import ValidationData, validation_data
from .scoring import model_from_weights, validation_scores

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
    """

    path: Path
    steps: list[int]
    scores: dict[str, float]
    best_step: int | None
    best_bleu: float | None

    def line(self) -> str:
        """``averaged 3 snapshots (steps 10, 15, 20): valid BLEU 12.40 vs best 12.00 ...``."""
        bleu = self.scores["valid_bleu"]
        if self.best_bleu is None:
            versus = "no best checkpoint to compare with"
        else:
            versus = (
                f"best {self.best_bleu:.2f} (step {self.best_step}), {bleu - self.best_bleu:+.2f}"
            )
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
    "valid_loss", "valid_ppl", "valid_bleu", "best_step", "best_bleu"}``. The global
    random state is left as it was. The run's ``choice.json``, which compared the
    checkpoint being replaced, is removed first: choose again
    (:func:`.checkpoint_choice.choose_checkpoint`).

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
    what = f"the snapshots in {snapshots.folder}"
    model = model_from_weights(config, data, weights, device, what)
    scores = validation_scores(model, data, config, device, precision)
    newest = loaded[-1].state
    best_step, best_bleu = _best(folder)
    steps = [snapshot.state["step"] for snapshot in loaded]
    state = {"averaged_steps": steps, "step": steps[-1], "epoch": newest.get("epoch"), **scores}
    state.update(best_step=best_step, best_bleu=best_bleu)
    # choice.json compared the averaged checkpoint being replaced; until it is chosen again,
    # auto goes by these scores (RunFolder.resolve_checkpoint), not by that comparison
    folder.choice.unlink(missing_ok=True)
    path = save_checkpoint(folder.path, AVERAGED, weights, state)
    return Averaged(path, steps, scores, best_step, best_bleu)


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
) -> tuple[Averaged, Choice]:
    """``attnkit average RUN``: (re)build ``RUN/averaged.json`` from the snapshots it keeps,
    then choose again the checkpoint ``--checkpoint auto`` takes (:mod:`.checkpoint_choice`).

    Holds the run folder's lock meanwhile (:mod:`attnkit.nmt.runs.runlock`), so
    it never writes while a training does.

    Args:
        run_dir: a run folder trained with ``train.average_last`` >= 2.
        count: average the newest ``count`` snapshots (default: all kept).
        device, precision: where and in which arithmetic to validate
            (:func:`attnkit.nmt.device.resolve_device`,
            :func:`attnkit.nmt.precision.resolve_precision`).
        echo: hears bf16 and why, when it validates in bf16, and the lock's warnings.

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
    if arithmetic.name == "bf16":  # said as translate, evaluate and align say it
        echo(f"attnkit: precision {arithmetic.reason}")
    with run_lock(folder.path, warn=echo, work="attnkit average"):
        config = RunConfig.load(folder.config)
        data = validation_data(config, *load_tokenizers(folder.path))
        averaged = write_averaged(
            folder, config, data, device=where, precision=arithmetic, count=count
        )
        choice = choose_checkpoint(folder, config, data, device=where, precision=arithmetic)
    return averaged, choice
