"""Checkpoints: tensors in safetensors, everything else in JSON, written atomically.

A checkpoint named ``best`` is two files in one folder:

- ``best.json``, the commit record: training state (epoch, step, scores),
  the optimizer's non-tensor state, the name of the weights file and its
  SHA-256;
- ``best.<tag>.safetensors``: model weights (``model.*``), optimizer tensors
  (``optim.<param>.<key>``) and any extra tensors (RNG states, ``extra.*``).

Saving writes a fresh weights file, then atomically replaces the JSON record
(temporary file in the same folder, fsync, ``os.replace``), then deletes the
weights no record names any more. A crash at any point leaves the previous
checkpoint loadable, and a reader loading while a training saves gets
the old checkpoint or the new one, whole. With ``keep_previous`` the record being replaced is kept
as ``<name>.prev.json`` (with its weights), a fallback for when the newest
checkpoint is damaged later (:func:`load_latest`). Nothing is pickled and
``torch.load`` is never called.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor

from ...atomic import atomic_write_bytes

__all__ = [
    "Checkpoint",
    "checkpoint_exists",
    "checkpoint_row",
    "delete_checkpoint",
    "latest_good",
    "load_checkpoint",
    "load_latest",
    "optimizer_from_parts",
    "optimizer_to_parts",
    "read_regular_file",
    "record_path",
    "save_checkpoint",
]

FORMAT = "attnkit-checkpoint"
VERSION = 1
_READ_ATTEMPTS = 5  # records re-read when a concurrent save replaces one under a reader


def optimizer_to_parts(optimizer: torch.optim.Optimizer) -> tuple[dict[str, Tensor], dict]:
    """Split ``optimizer.state_dict()`` into tensors (``optim.<param>.<key>``) and JSON."""
    state = optimizer.state_dict()
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for param_id, entries in state["state"].items():
        for key, value in entries.items():
            if isinstance(value, Tensor):
                tensors[f"optim.{param_id}.{key}"] = value
            else:
                scalars.setdefault(str(param_id), {})[key] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def optimizer_from_parts(tensors: dict[str, Tensor], info: dict) -> dict:
    """Inverse of :func:`optimizer_to_parts`: a dict for ``optimizer.load_state_dict``."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        _, param_id, key = name.split(".", 2)
        state.setdefault(int(param_id), {})[key] = value
    for param_id, entries in info["scalars"].items():
        state.setdefault(int(param_id), {}).update(entries)
    return {"state": state, "param_groups": info["param_groups"]}


@dataclass
class Checkpoint:
    """A loaded checkpoint: model weights, training state, optional optimizer state, and the
    SHA-256 of its weights file (as its record gives it and loading checked it)."""

    model: dict[str, Tensor]
    state: dict[str, Any]
    optimizer: dict | None = None
    extra: dict[str, Tensor] = field(default_factory=dict)
    sha256: str = ""


def record_path(folder: str | Path, name: str) -> Path:
    """The JSON record of checkpoint ``name`` in ``folder``: ``folder/NAME.json``."""
    return Path(folder) / f"{name}.json"


def save_checkpoint(
    folder: str | Path,
    name: str,
    model_state: dict[str, Tensor],
    state: dict[str, Any],
    *,
    optimizer: torch.optim.Optimizer | None = None,
    extra: dict[str, Tensor] | None = None,
    keep_previous: bool = False,
) -> Path:
    """Save a checkpoint as ``folder/name.json`` + a weights file; returns the JSON path.

    Args:
        folder: the run folder.
        name: checkpoint name, e.g. ``"best"`` or ``"last"``.
        model_state: ``model.state_dict()``.
        state: JSON-serialisable training state (epoch, step, metrics...).
        optimizer: whose state to include, for resuming.
        extra: more tensors to keep (e.g. RNG states), stored as ``extra.<key>``.
        keep_previous: keep the checkpoint being replaced as ``name.prev.json``, when it
            is whole (a damaged one, such as a resume fell back from, leaves the kept
            previous version as it is).
    """
    folder = Path(folder)
    path = record_path(folder, name)
    # Clone: safetensors refuses tensors that share storage (tied embeddings).
    tensors = {f"model.{k}": v.detach().cpu().clone().contiguous() for k, v in model_state.items()}
    record: dict[str, Any] = {"format": FORMAT, "version": VERSION, "state": state}
    if optimizer is not None:
        optim_tensors, record["optimizer"] = optimizer_to_parts(optimizer)
        tensors.update({k: v.detach().cpu().clone() for k, v in optim_tensors.items()})
    for key, value in (extra or {}).items():
        tensors[f"extra.{key}"] = value.detach().cpu().clone().contiguous()
    data = st_save(tensors, metadata={"format": FORMAT})
    weights_name = f"{name}.{secrets.token_hex(4)}.safetensors"
    atomic_write_bytes(folder / weights_name, data)
    record["weights"] = weights_name
    record["sha256"] = hashlib.sha256(data).hexdigest()
    previous = _previous_path(path)
    if keep_previous and _is_whole(path):  # a damaged one never replaces a good fallback
        atomic_write_bytes(previous, path.read_bytes())
    atomic_write_bytes(path, json.dumps(record, indent=2).encode("utf-8"))
    _remove_unnamed_weights(folder, name, (path, previous))
    return path


def _is_whole(record: Path) -> bool:
    """Whether ``record`` and its weights are whole (their checksum matches)."""
    try:
        _verified(record)
    except (FileNotFoundError, ValueError):
        return False
    return True


def _previous_path(record: Path) -> Path:
    return record.with_name(f"{record.stem}.prev.json")


def _remove_unnamed_weights(folder: Path, name: str, records: tuple[Path, ...]) -> None:
    """Delete ``name.*.safetensors`` files no record names (old ones, crash leftovers)."""
    named = {_weights_named_by(path) for path in records}
    for path in folder.glob(f"{name}.*.safetensors"):
        if path.name not in named and path.name.count(".") == 2:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def delete_checkpoint(folder: str | Path, name: str) -> None:
    """Delete checkpoint ``name`` in ``folder``: its record first (so no reader finds a record
    without weights for long), then every ``name.*.safetensors`` weights file; a missing
    checkpoint is no error. A ``name.prev.json`` kept beside it stays."""
    folder = Path(folder)
    record_path(folder, name).unlink(missing_ok=True)
    _remove_unnamed_weights(folder, name, (_previous_path(record_path(folder, name)),))


def checkpoint_exists(path: str | Path) -> bool:
    """Whether ``path`` (``run/last.json``) or its kept previous version exists."""
    path = Path(path)
    return path.is_file() or _previous_path(path).is_file()


def load_latest(path: str | Path, warn=None) -> Checkpoint:
    """Load ``path``, or, if it is missing or damaged, the previous version kept beside it.

    Args:
        path: the newest record, e.g. ``run/last.json``.
        warn: called with a one-line message when falling back.

    Raises:
        FileNotFoundError: neither checkpoint exists.
        ValueError: both are damaged (the message names both files and why).
    """
    path = Path(path)
    try:
        return load_checkpoint(path)
    except (ValueError, FileNotFoundError) as err:
        previous = _previous_path(path)
        if not previous.is_file():
            raise
        try:
            ckpt = load_checkpoint(previous)
        except (ValueError, FileNotFoundError) as err2:
            raise ValueError(f"no usable checkpoint: {err}; and the previous one: {err2}") from None
        if warn is not None:
            warn(f"warning: {err}; falling back to the previous checkpoint {previous}")
        return ckpt


def read_regular_file(path: Path) -> bytes:
    """The bytes of ``path``, a regular file or a link to one: a file of a run folder,
    which may have come from elsewhere.

    Raises:
        FileNotFoundError: there is no such file.
        IsADirectoryError: it is a folder.
        ValueError: it is a device, a pipe or a socket, which is never read (a
            weights file linked to ``/dev/zero`` would be read until memory runs out, a
            named pipe wait for a writer for ever).
    """
    mode = path.stat().st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise ValueError(f"{path} is not a regular file (a device, a pipe or a socket)")
    return path.read_bytes()


def _weights_named_by(record: Path) -> str | None:
    try:
        return json.loads(record.read_text(encoding="utf-8")).get("weights")
    except (OSError, ValueError):
        return None


def _read_record(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a valid checkpoint record ({err})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ValueError(f"{path}: not an attnkit checkpoint (format field missing or wrong)")
    weights = record.get("weights")
    if not isinstance(weights, str) or Path(weights).name != weights or not weights:
        raise ValueError(f"{path}: the 'weights' field must name a file beside it, got {weights!r}")
    if not isinstance(record.get("state"), dict) or not isinstance(record.get("sha256"), str):
        raise ValueError(f"{path}: the record lacks its 'state' or 'sha256' field")
    return record


def _record_and_weights(path: Path) -> tuple[dict, bytes]:
    """The record at ``path`` and the bytes of the weights file it names.

    A training saving into the same folder replaces the record and then
    deletes the weights the old record named; a reader caught between the two
    finds the weights gone and reads the new record instead.
    """
    record = _read_record(path)
    for _ in range(_READ_ATTEMPTS):
        weights_path = path.parent / record["weights"]
        try:
            return record, read_regular_file(weights_path)
        except (FileNotFoundError, IsADirectoryError):
            newer = _read_record(path)
            if newer == record:
                break
            record = newer
    raise FileNotFoundError(f"weights file {weights_path} named by {path} not found")


def _verified(path: Path) -> tuple[dict, bytes]:
    """The record at ``path`` and its weights' bytes, checked against the record's SHA-256.

    Raises:
        FileNotFoundError: the record or its weights file is missing.
        ValueError: the record is damaged or the weights do not match their checksum.
    """
    record, data = _record_and_weights(path)
    if hashlib.sha256(data).hexdigest() != record.get("sha256"):
        raise ValueError(
            f"{path.parent / record['weights']}: checksum mismatch ({len(data)} bytes); the "
            "file is truncated or corrupt"
        )
    return record, data


def latest_good(path: str | Path) -> tuple[Path, dict] | None:
    """The newest whole checkpoint of ``path`` and its kept previous version: its record's
    path and its training ``state`` (the weights are checked, not loaded); None when
    neither is whole."""
    path = Path(path)
    for candidate in (path, _previous_path(path)):
        try:
            record, _ = _verified(candidate)
        except (FileNotFoundError, ValueError):
            continue
        return candidate, record["state"]
    return None


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Load a checkpoint from its JSON record (``run/best.json``).

    Raises:
        FileNotFoundError: the record or its weights file is missing.
        ValueError: the record is not valid JSON, or the weights file is
            truncated/corrupt (the message names the file).
    """
    path = Path(path)
    record, data = _verified(path)
    weights_path = path.parent / record["weights"]
    try:
        tensors = st_load(data)
    except Exception as err:  # safetensors raises its own error type
        raise ValueError(f"{weights_path}: not a readable safetensors file ({err})") from None
    groups: dict[str, dict[str, Tensor]] = {"model": {}, "optim": {}, "extra": {}}
    for key, value in tensors.items():
        prefix, _, rest = key.partition(".")
        if prefix not in groups or not rest:
            raise ValueError(f"{weights_path}: unexpected tensor name {key!r}")
        groups[prefix][rest if prefix != "optim" else key] = value
    optimizer = None
    if "optimizer" in record:
        try:
            optimizer = optimizer_from_parts(groups["optim"], record["optimizer"])
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"{path}: malformed optimizer state ({err!r})") from None
    return Checkpoint(
        groups["model"], record["state"], optimizer, groups["extra"], record["sha256"]
    )


def checkpoint_row(ckpt: Checkpoint) -> dict | None:
    """What ``ckpt`` records of the ``metrics.jsonl`` row of its step (epoch, step, lr, and
    valid_bleu when that step was the best), to rebuild a damaged row; None unless it was
    saved right after a validation (no training loss pending)."""
    p = ckpt.state.get("progress", {})
    if not p.get("step") or p.get("pending_tokens"):
        return None
    row = {"epoch": p["epoch"], "step": p["step"]}
    if p.get("best_step") == p["step"]:
        row["valid_bleu"] = p["best_bleu"]
    groups = (ckpt.optimizer or {}).get("param_groups")
    if groups:
        row["lr"] = groups[0]["lr"]
    return row
