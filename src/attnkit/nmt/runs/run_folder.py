"""A run folder as one object: its file names, the default run name, the rules for starting,
resuming or overwriting a run in it, and its metrics history.

A run folder (written by :func:`attnkit.nmt.training.loop.train`) holds
``config.yaml`` (the resolved config), the tokenizer files (``tokenizer.json``
and the vocabularies it names), the ``best``/``last`` checkpoints
(``best.json``, ``last.json``, ``last.prev.json`` and their safetensors),
``snapshots/`` and ``averaged.json`` (checkpoint averaging, ``train.average_last``:
:mod:`.snapshots`), ``choice.json`` (the checkpoint ``--checkpoint auto`` takes:
:mod:`attnkit.nmt.training.checkpoint_choice`), ``metrics.jsonl`` (one JSON row per
validation), ``learning_curve.png``,
``prepared.json`` (what the tokenizers were trained on), ``init_from.json`` (the
checkpoint a fine-tuning run started from, ``train.init_from``), ``precision.json`` (the
arithmetic each training session ran in, and why; an unreadable one is moved
to ``precision.json.damaged``), ``store/train/`` (the
training split as a memory-mapped token store), ``store/sampled/`` (the current
epoch's sampled segmentation of it, ``train.subword_sampling``) and ``.lock``
(:mod:`.runlock`).
:class:`RunFolder` is the one place these names are spelled.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...atomic import atomic_write_bytes, writing
from ..config import RunConfig, config_changes
from ..data.tokenizer import MANIFEST
from .checkpoint import checkpoint_exists, delete_checkpoint, read_regular_file, record_path
from .runlock import LOCK_NAME
from .snapshots import Snapshots

__all__ = [
    "AUTO",
    "AVERAGED",
    "CHECKPOINTS",
    "RESUME_MAY_CHANGE",
    "RUNS_PARENT",
    "RunFolder",
    "changes_text",
    "checkpoint_step",
]

RUNS_PARENT = Path("runs")  # where a run goes when no folder is given: runs/<config name>
AVERAGED = "averaged"  # the checkpoint averaging the last snapshots (train.average_last)
AUTO = "auto"  # what choice.json names, else averaged where it validated as well as best
CHECKPOINTS = ("best", "last", AVERAGED)  # the checkpoints a run has, and choice.json may name

# What --resume may change: how long the run goes on, how often it validates and saves,
# its label, and the machine it runs on (threads, device and precision change the order or
# the width of floating point sums, not what is trained: the run goes on, but no longer
# repeats bit for bit).
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
            "average_last",
            "threads",
            "device",
            "precision",
        )
    ),
    "name",
)

# checkpoints (a record, its fallback, weights named by 8 hex digits) and tokenizer files,
# exactly: --overwrite must not take a user's own best.txt or spm_old.model with them
_RUN_GLOBS = (
    *(f"{name}.{tail}" for name in ("best", "last", "averaged")
      for tail in ("json", "prev.json", "????????.safetensors")),
    *(f"{stem}.{ext}" for stem, ext in (("spm", "model"), ("spm.src", "model"),
      ("spm.tgt", "model"), ("vocab", "json"), ("vocab.src", "json"), ("vocab.tgt", "json"))),
)  # fmt: skip

# how prepare()'s errors name its flags: the CLI's options and attnkit.nmt.train's arguments
_RESUME = "--resume (resume=True in Python)"
_OVERWRITE = "--overwrite (overwrite=True in Python)"


@dataclass(frozen=True)
class RunFolder:
    """The files of one run folder (``path``), by name; nothing is read or written on creation.

    Attributes:
        path: the folder (it need not exist yet).
    """

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def default(cls, config_name: str) -> RunFolder:
        """``runs/<config_name>``, the folder of a run trained without ``--out``."""
        return cls(RUNS_PARENT / config_name)

    @property
    def name(self) -> str:
        """The folder's name: the run's name when its config gives none."""
        return self.path.name

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def learning_curve(self) -> Path:
        return self.path / "learning_curve.png"

    @property
    def precision(self) -> Path:
        """The precision of each training session: ``{"sessions": [{"step", "setting",
        "precision", "reason"}, ...]}``, ``step`` being where the session started."""
        return self.path / "precision.json"

    @property
    def damaged_precision(self) -> Path:
        """Where an unreadable :attr:`precision` is moved aside (:meth:`record_precision`)."""
        return self.path / "precision.json.damaged"

    @property
    def init_record(self) -> Path:
        """The checkpoint a fine-tuning run's weights started from (``train.init_from``):
        ``{"run", "checkpoint", "record", "sha256", "step"}``."""
        return self.path / "init_from.json"

    @property
    def choice(self) -> Path:
        """The checkpoint ``auto`` takes and the scores behind it: ``{"chosen", "steps",
        "scores", "whole_valid_set"}`` (:mod:`attnkit.nmt.training.checkpoint_choice`)."""
        return self.path / "choice.json"

    @property
    def lock(self) -> Path:
        return self.path / LOCK_NAME

    @property
    def store(self) -> Path:
        """The training split's token store (:mod:`attnkit.nmt.data.store`), a folder."""
        return self.path / "store" / "train"

    @property
    def sampled_store(self) -> Path:
        """The current epoch's sampled segmentation of the training split, a token store
        rebuilt each epoch (``train.subword_sampling``)."""
        return self.path / "store" / "sampled"

    @property
    def prepared(self) -> Path:
        """What the tokenizers were trained on: settings key, sampled and total pairs."""
        return self.path / "prepared.json"

    def checkpoint(self, name: str) -> Path:
        """The record of checkpoint ``name`` (``best``, ``last``, ``last.prev``, ``averaged``):
        ``NAME.json``."""
        return record_path(self.path, name)

    @property
    def best(self) -> Path:
        return self.checkpoint("best")

    @property
    def averaged(self) -> Path:
        """The record of the ``averaged`` checkpoint (the mean of the snapshots)."""
        return self.checkpoint(AVERAGED)

    def resolve_checkpoint(self, name: str) -> str:
        """``name``, or for ``auto``: the checkpoint ``choice.json`` names, while it holds
        the step that was scored (:mod:`attnkit.nmt.training.checkpoint_choice`). Without
        that record (a run trained before it existed, or resumed and not finished):
        ``averaged`` when the run has one whose valid BLEU was at least the ``best``
        checkpoint's when it was written (on the whole validation set where the record
        has that comparison), else ``best``. Where ``best`` has moved on since (a
        finished run trained on with a raised budget), its training BLEU is compared
        with the averaged one's, not the BLEU of the ``best`` it replaced."""
        if name != AUTO:
            return name
        chosen = self._recorded_choice()
        if chosen:
            return chosen
        state = _averaged_state(self.averaged)
        mine, theirs = "valid_bleu", "best_bleu"
        best = _progress(self.best)
        if "best_step" in best and best["best_step"] != state.get("best_step", best["best_step"]):
            state = {**state, "best_bleu": best.get("best_bleu")}
        elif "whole_valid_bleu" in state:
            mine, theirs = "whole_valid_bleu", "best_whole_valid_bleu"
        try:
            wins = state[mine] >= state[theirs]
        except (KeyError, TypeError):
            wins = False  # no averaged checkpoint, or no scores to compare
        return AVERAGED if wins else "best"

    def _recorded_choice(self) -> str:
        """``choice.json``'s checkpoint if that checkpoint still holds the scored step, else ''."""
        try:
            record = json.loads(read_regular_file(self.choice))
            name, step = record["chosen"], record["steps"][record["chosen"]]
            if name not in CHECKPOINTS:  # "../other/best" would be read outside the folder
                return ""
            saved = json.loads(read_regular_file(self.checkpoint(name)))["state"]
        except (OSError, ValueError, KeyError, TypeError):
            return ""
        return name if checkpoint_step(saved) == step else ""

    @property
    def snapshots(self) -> Snapshots:
        """The model weights of the last validations (``train.average_last``): ``snapshots/``."""
        return Snapshots(self.path / "snapshots")

    @property
    def last(self) -> Path:
        return self.checkpoint("last")

    def drop_averaging_after(self, step: int) -> list[int]:
        """Delete the snapshots of steps after ``step``, and the ``averaged`` checkpoint if it
        averaged any of them (a run resumed at ``step`` redoes those steps); returns the steps
        of the snapshots deleted."""
        dropped = self.snapshots.drop_after(step)
        steps = _averaged_state(self.averaged).get("averaged_steps")
        steps = [s for s in steps if isinstance(s, int)] if isinstance(steps, list) else []
        if max(steps, default=0) > step:
            delete_checkpoint(self.path, AVERAGED)
        return dropped

    def has_run(self) -> bool:
        """Whether a ``last`` checkpoint (or its kept previous version) is there to resume."""
        return checkpoint_exists(self.last)

    def clear(self) -> None:
        """Delete a previous run's files (``--overwrite``); the lock file stays."""
        for path in (
            self.config,
            self.metrics,
            self.learning_curve,
            self.path / MANIFEST,
            self.choice,
            self.prepared,
            self.init_record,
            self.precision,
            self.damaged_precision,
        ):
            path.unlink(missing_ok=True)
        for pattern in _RUN_GLOBS:
            for path in self.path.glob(pattern):
                path.unlink()
        snapshots = self.snapshots
        snapshots.keep_last(0)
        if snapshots.folder.is_dir():
            for path in snapshots.folder.glob("*.safetensors"):  # a crash's leftovers
                path.unlink()

    def prepare(
        self, config: RunConfig, *, resume: bool, overwrite: bool, echo: Callable[[str], None]
    ) -> bool:
        """Make the folder ready for training ``config``; True when it holds a run to resume.

        With ``overwrite`` the previous run's files go first. A folder without a
        ``last`` checkpoint holds no run (a start that failed before its first
        save): it is reused as if empty, so a retry needs no flag. When resuming,
        ``config`` may differ from the saved one only in :data:`RESUME_MAY_CHANGE`;
        a new run's config is saved as ``config.yaml`` here, a resumed one's (with
        any such changes) by :meth:`save_config` once it trains again, so a finished
        run that is only reused keeps the config it was trained with.

        Raises:
            ValueError: the folder holds a run and ``resume`` is False, or the
                config differs in a key that may not change (the message lists them),
                or it holds a run's history whose ``last`` checkpoints are gone.
        """
        if overwrite:
            self.clear()
        resuming = self.has_run()
        if not resuming:
            self._refuse_a_run_without_its_last_checkpoint()
        if resuming and not resume:
            raise ValueError(
                f"{self.path} already holds a run; pass {_RESUME} to continue or reuse it, "
                f"or {_OVERWRITE} to start over"
            )
        changes = self.config_changes(config) if resuming else []
        if fixed := _fixed(changes):
            raise ValueError(
                f"the config differs from the one saved in {self.config} ({changes_text(fixed)}); "
                f"only {', '.join(RESUME_MAY_CHANGE)} may change on --resume; pass {_OVERWRITE} "
                "to start over or use another --out folder"
            )
        if changes:
            echo(f"resuming with {changes_text(changes)}")
        self.path.mkdir(parents=True, exist_ok=True)
        if not resuming:
            self.save_config(config)
            self.metrics.unlink(missing_ok=True)  # rows of a run killed before its first save
        return resuming

    def _refuse_a_run_without_its_last_checkpoint(self) -> None:
        """A run saves ``last`` after every validation, so a second row in ``metrics.jsonl``
        means a ``last`` was written: with neither it nor ``last.prev`` left, its checkpoints
        were deleted or lost, and starting again would overwrite what remains.

        Raises:
            ValueError: naming the validations found and the way out (``--overwrite``).
        """
        if not self.metrics.is_file():
            return
        with self.metrics.open("rb") as rows:
            count = sum(1 for row in rows if row.strip())
        if count >= 2:
            raise ValueError(
                f"{self.path} holds the history of a run ({count} validations in "
                f"{self.metrics.name}) but no {self.last.name} or last.prev.json to resume "
                f"from; starting here would overwrite what is left: restore those files, "
                f"pass {_OVERWRITE} to start over, or use another --out folder"
            )

    def config_changes(self, config: RunConfig) -> list[tuple[str, object, object]]:
        """``(key, saved value, value in config)`` for each key where ``config`` differs from
        the run's saved ``config.yaml``."""
        return config_changes(RunConfig.load(self.config), config)

    def refuse_changes_since(self, trained: object, config: RunConfig) -> None:
        """Refuse to resume under ``config`` where it differs from ``trained``, the config a
        checkpoint records its run was trained with, outside :data:`RESUME_MAY_CHANGE`.

        :meth:`prepare` compares ``config`` with ``config.yaml``, which a hand edit (or
        ``--resume RUN_DIR`` reading that edit) changes along with it: a ``batch_size`` or
        ``lr`` edited there resumed silently into another run, and an edited model size
        failed deep in ``load_state_dict``. A checkpoint without the record (saved before
        2026-12-07) or with one this version cannot read is not checked.

        Raises:
            ValueError: listing each key with the value the run was trained with and the
                value given.
        """
        try:
            before = RunConfig.model_validate(trained)
        except ValueError:  # pydantic's ValidationError included
            return
        if fixed := _fixed(config_changes(before, config)):
            raise ValueError(
                f"the config differs from the one the run in {self.path} was trained with, as "
                f"its last checkpoint records it ({changes_text(fixed)}); was {self.config} "
                f"edited? only {', '.join(RESUME_MAY_CHANGE)} may change on --resume: restore "
                f"those values, or pass {_OVERWRITE} to start over"
            )

    def fixed_changes(self, config: RunConfig) -> list[tuple[str, object, object]]:
        """The :meth:`config_changes` in keys that may not change on ``--resume``."""
        return _fixed(self.config_changes(config))

    def save_config(self, config: RunConfig) -> None:
        """Write ``config`` as ``config.yaml``, atomically."""
        atomic_write_bytes(self.config, config.to_yaml().encode("utf-8"))

    def record_precision(
        self, step: int, fields: dict[str, str], warn: Callable[[str], None] | None = None
    ) -> None:
        """Add the session starting at ``step`` to ``precision.json`` (sessions past ``step``,
        from a run resumed earlier, are dropped), atomically.

        ``fields`` are :meth:`attnkit.nmt.precision.Precision.record`'s. A file that
        cannot be read as sessions is moved aside to ``precision.json.damaged``, not
        lost, and ``warn`` gets one line saying so.
        """
        sessions = []
        if self.precision.exists():
            try:
                sessions = list(json.loads(self.precision.read_text(encoding="utf-8"))["sessions"])
            except (OSError, ValueError, KeyError, TypeError) as err:
                aside = self.damaged_precision
                os.replace(self.precision, aside)
                (warn or _ignore)(
                    f"warning: {self.precision} is unreadable ({type(err).__name__}: {err}); "
                    f"moved to {aside.name}, the record starts again at step {step}"
                )
        kept = [s for s in sessions if isinstance(s, dict) and s.get("step", 0) < step]
        text = json.dumps({"sessions": [*kept, {"step": step, **fields}]}, indent=2) + "\n"
        atomic_write_bytes(self.precision, text.encode("utf-8"))

    def read_history(
        self,
        up_to_step: float,
        *,
        known: dict | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> list[dict]:
        """Rows of ``metrics.jsonl`` with ``step <= up_to_step``, in file order.

        A damaged line (a row torn by a crash mid-write) is never dropped
        silently: ``warn`` gets one line naming the file and the line number,
        and the row keeps every field still readable in it (:func:`_salvage`),
        completed from ``known`` (the fields a checkpoint records for its step,
        e.g. ``{"step": 60, "epoch": 3, "valid_bleu": 12.5}``) when the row is
        that step's, or is the last line and no intact row has that step. Such
        a row gets ``"damaged": true``. A line from which no step can be
        recovered is dropped, with the warning saying so. A missing file reads
        as ``[]``.
        """
        if not self.metrics.is_file():
            return []
        lines = self.metrics.read_text(encoding="utf-8", errors="replace").splitlines()
        rows = [_row(line) for line in lines]
        intact = {row["step"] for row in rows if row is not None}
        history = []
        for number, (line, row) in enumerate(zip(lines, rows, strict=True), start=1):
            if row is None and line.strip():
                last = number == len(lines) and known is not None and known["step"] not in intact
                row = self._repair(line, number, known, last, warn or _ignore)
            if row is not None and row["step"] <= up_to_step:
                history.append(row)
        return history

    def _repair(
        self, line: str, number: int, known: dict | None, last: bool, warn: Callable[[str], None]
    ) -> dict | None:
        """The row of damaged line ``number``, as far as it and ``known`` tell; warns."""
        row = _salvage(line)
        if last and "step" not in row:
            row["step"] = known["step"]
        where = f"{self.metrics}: line {number} is damaged (cut short or garbled)"
        if not isinstance(row.get("step"), int):
            warn(f"warning: {where} and names no step; that row is dropped")
            return None
        lost = set()
        if known is not None and known["step"] == row["step"]:
            lost = {key for key in known if key not in row}
            row.update((key, known[key]) for key in known if key in lost)
        kept = ", ".join(key for key in row if key not in lost)
        rebuilt = f"; {', '.join(sorted(lost))} rebuilt from the checkpoint" if lost else ""
        warn(f"warning: {where}; kept {kept} of step {row['step']}{rebuilt}")
        return {**row, "damaged": True}

    def history_until(
        self,
        step: int,
        *,
        rewrite: bool,
        known: dict | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> list[dict]:
        """Rows up to ``step`` (a resumed checkpoint's, which records ``known`` of its row:
        :meth:`read_history`); ``rewrite`` drops the others from disk and stores the
        repaired rows."""
        rows = self.read_history(step, known=known, warn=warn)
        if rewrite:
            self.write_history(rows)
        return rows

    def write_history(self, rows: list[dict]) -> None:
        """Replace ``metrics.jsonl`` with ``rows``, atomically."""
        text = "".join(json.dumps(row) + "\n" for row in rows)
        atomic_write_bytes(self.metrics, text.encode("utf-8"))

    def append_history(self, row: dict) -> None:
        """Append one row to ``metrics.jsonl``.

        Raises:
            WriteError: the row could not be written (e.g. the disk is full).
        """
        with writing(self.metrics), open(self.metrics, "a", encoding="utf-8") as log:
            log.write(json.dumps(row) + "\n")


# One complete ``"key": value`` pair of a flat JSON row (a number, string, boolean or null).
_VALUE = r'-?[0-9.eE+-]+|"[^"\\]*"|true|false|null'
_FIELD = re.compile(rf'"([A-Za-z_][A-Za-z0-9_]*)"\s*:\s*({_VALUE})\s*[,}}]')


def _row(line: str) -> dict | None:
    """The row on ``line``: a JSON object with an integer ``step``, else None."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    ok = isinstance(row, dict) and isinstance(row.get("step"), int)
    return row if ok else None


def _salvage(line: str) -> dict:
    """Every complete ``"key": value`` pair still readable on a damaged row's line."""
    row = {}
    for key, text in _FIELD.findall(line):
        try:
            row[key] = json.loads(text)
        except ValueError:
            continue
    return row


def checkpoint_step(state: object) -> int | None:
    """The step of a checkpoint's training ``state``: ``progress.step`` for ``best`` and
    ``last``, ``step`` for ``averaged`` (its newest snapshot's); None if it has none."""
    if not isinstance(state, dict):
        return None
    progress = state.get("progress")
    step = progress.get("step") if isinstance(progress, dict) else state.get("step")
    return step if isinstance(step, int) else None


def _progress(record: Path) -> dict:
    """The training progress a ``best`` or ``last`` record holds; ``{}`` when unreadable (or
    a device or a pipe, never read: :func:`.checkpoint.read_regular_file`)."""
    try:
        progress = json.loads(read_regular_file(record))["state"]["progress"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return progress if isinstance(progress, dict) else {}


def _averaged_state(record: Path) -> dict:
    """The state the ``averaged`` record holds (its steps and scores); ``{}`` when there is
    none or it cannot be read."""
    try:
        state = json.loads(read_regular_file(record))["state"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return state if isinstance(state, dict) else {}


def _ignore(_line: str) -> None:
    pass


def changes_text(changes: list[tuple[str, object, object]]) -> str:
    """``model.hidden_size: 64 in the run, 128 given; ...``."""
    return "; ".join(
        f"{key}: {json.dumps(before)} in the run, {json.dumps(after)} given"
        for key, before, after in changes
    )


def _fixed(changes: list[tuple[str, object, object]]) -> list[tuple[str, object, object]]:
    """The ``changes`` in keys outside :data:`RESUME_MAY_CHANGE`."""
    return [change for change in changes if change[0] not in RESUME_MAY_CHANGE]
