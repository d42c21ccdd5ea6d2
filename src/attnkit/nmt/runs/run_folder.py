"""What a run folder holds, and the rules for starting, resuming or overwriting a run in it.

A run folder (written by :func:`attnkit.nmt.training.loop.train`) holds ``config.yaml``,
the tokenizer files, the ``best``/``last`` checkpoints, ``metrics.jsonl`` (one
JSON row per validation) and ``learning_curve.png``. :func:`prepare_folder`
decides whether a training may start there; the metrics history is read back
up to a checkpoint's step and rewritten atomically.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ...atomic import atomic_write_bytes
from .checkpoint import checkpoint_exists
from ..config import RunConfig, config_changes

__all__ = [
    "RESUME_MAY_CHANGE",
    "RUN_FILES",
    "RUN_GLOBS",
    "changes_text",
    "prepare_folder",
    "read_history",
    "write_history",
]

RUN_FILES = ("config.yaml", "metrics.jsonl", "learning_curve.png", "tokenizer.json")
RUN_GLOBS = ("best.*", "last.*", "spm*.model", "vocab*.json")


# What --resume may change: how long the run goes on, how often it validates and saves,
# and its label.
RESUME_MAY_CHANGE = (
    *(
        f"train.{key}"
        for key in (
            "epochs",
            "max_steps",
            "max_minutes",
            "early_stopping",
            "valid_every",
            "checkpoint_every",
            "valid_bleu_sentences",
        )
    ),
    "name",
)


def prepare_folder(
    run_dir: Path, config: RunConfig, *, resume: bool, overwrite: bool, echo: Callable[[str], None]
) -> bool:
    """Make ``run_dir`` ready; True when it holds a checkpoint to resume from.

    A folder without a ``last`` checkpoint holds no run (a start that failed
    before its first save): it is reused as if empty, so a retry needs no flag.
    """
    saved = run_dir / "config.yaml"
    if overwrite:
        for name in RUN_FILES:
            (run_dir / name).unlink(missing_ok=True)
        for pattern in RUN_GLOBS:
            for path in run_dir.glob(pattern):
                path.unlink()
    resuming = checkpoint_exists(run_dir / "last.json")
    if resuming and not resume:
        raise ValueError(
            f"{run_dir} already holds a run; pass --resume to continue or reuse it, "
            "or --overwrite to start over"
        )
    changes = config_changes(RunConfig.load(saved), config) if resuming else []
    fixed = [change for change in changes if change[0] not in RESUME_MAY_CHANGE]
    if fixed:
        raise ValueError(
            f"the config differs from the one saved in {saved} ({changes_text(fixed)}); only "
            f"{', '.join(RESUME_MAY_CHANGE)} may change on --resume; pass --overwrite to start "
            "over or use another --out folder"
        )
    if changes:
        echo(f"resuming with {changes_text(changes)}")
    run_dir.mkdir(parents=True, exist_ok=True)
    if changes or not resuming:
        atomic_write_bytes(saved, config.to_yaml().encode("utf-8"))
    return resuming


def changes_text(changes: list[tuple[str, object, object]]) -> str:
    """``model.hidden_size: 64 in the run, 128 given; ...``."""
    return "; ".join(
        f"{key}: {json.dumps(before)} in the run, {json.dumps(after)} given"
        for key, before, after in changes
    )


def read_history(path: Path, up_to_step: float) -> list[dict]:
    """Rows of ``metrics.jsonl`` up to a step; a torn last line (a crash mid-write) is dropped."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] <= up_to_step:
            rows.append(row)
    return rows


def write_history(path: Path, rows: list[dict]) -> None:
    """Replace ``metrics.jsonl`` with ``rows``, atomically."""
    atomic_write_bytes(path, "".join(json.dumps(row) + "\n" for row in rows).encode("utf-8"))
