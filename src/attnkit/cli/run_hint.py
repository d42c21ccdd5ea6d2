"""A run folder on the command line: the ``--checkpoint`` choice, and a missing folder named
with the command that makes it.

``attnkit translate runs/multi30k`` before training says which
``attnkit train configs/multi30k.yaml`` writes that folder, when the folder's
name matches a preset in ``configs/`` (the working directory's, or the
checkout's beside the installed package).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .errors import UsageError

__all__ = ["CHECKPOINTS", "check_run_folder", "checkpoint_option", "preset_for"]

CHECKPOINTS = ("auto", "best", "last", "averaged")  # auto: averaged if it validated better

_CHECKOUT_CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def checkpoint_option(p: argparse.ArgumentParser) -> None:
    """Add ``--checkpoint auto|best|last|averaged`` (default ``auto``)."""
    p.add_argument(
        "--checkpoint",
        default="auto",
        choices=CHECKPOINTS,
        help="the run's checkpoint: best (highest valid BLEU), last, averaged (the mean of "
        "the last snapshots: train.average_last, 'attnkit average RUN_DIR'), or auto "
        "(default): of best, last and averaged, the one that scored highest on the whole "
        "validation set when training ended (RUN/choice.json)",
    )


def preset_for(name: str) -> Path | None:
    """The preset ``configs/NAME.yaml`` (relative to the working directory when it is there)."""
    for folder in (Path("configs"), _CHECKOUT_CONFIGS):
        path = folder / f"{name}.yaml"
        if path.is_file():
            return path if folder == Path("configs") else path.resolve()
    return None


def check_run_folder(run_dir: str) -> None:
    """Raise a :class:`UsageError` naming the way out when ``run_dir`` holds no trained run.

    Raises:
        UsageError: ``run_dir`` or its ``config.yaml`` does not exist.
    """
    folder = Path(run_dir)
    if (folder / "config.yaml").is_file():
        return
    what = (
        f"{run_dir} has no config.yaml (not a training run folder)"
        if folder.is_dir()
        else f"run folder {run_dir} not found"
    )
    preset = preset_for(folder.name)
    if preset is None:
        raise UsageError(f"{what}; 'attnkit train CONFIG.yaml --out {run_dir}' makes one")
    default = Path("runs") / folder.name
    out = "" if folder == default else f" --out {run_dir}"
    raise UsageError(f"{what}; 'attnkit train {preset}{out}' makes it")
