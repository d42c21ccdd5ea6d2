"""A run folder on the command line: the options that pick what is loaded from it
(``--checkpoint``, ``--device``, ``--precision``), loading it, and a missing folder named
with the command that makes it.

``attnkit translate runs/multi30k`` before training says which
``attnkit train configs/multi30k.yaml`` writes that folder, when the folder's
name matches a preset in ``configs/`` (the working directory's, or the
checkout's beside the installed package) or one shipped in the package.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from shlex import quote

from .errors import UsageError, warn

__all__ = [
    "CHECKPOINTS",
    "check_run_folder",
    "check_split",
    "checkpoint_option",
    "device_option",
    "load_batched_run",
    "load_run_folder",
    "pair_file_options",
    "prepared_only",
    "preset_for",
    "run_options",
    "warn_threads_over_cores",
]

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


def device_option(p: argparse.ArgumentParser) -> None:
    """Add ``--device`` (default ``cpu``), read by :func:`load_run_folder`."""
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto (default: cpu)")


def load_run_folder(args: argparse.Namespace, run_dir: str | None = None):
    """The run in ``run_dir`` (default ``args.run_dir``) at ``--checkpoint``, on ``--device``,
    in ``--precision``: a :class:`~attnkit.nmt.runs.loaded_run.LoadedRun`.

    Raises:
        UsageError: no trained run there (:func:`check_run_folder`).
        ValueError: a bad ``--device`` or ``--precision``, or an unreadable run (named).
    """
    from ..nmt.device import resolve_device
    from ..nmt.runs.loaded_run import load_run

    run_dir = args.run_dir if run_dir is None else run_dir
    check_run_folder(run_dir)
    apply_threads(getattr(args, "threads", None))
    device = resolve_device(args.device, "--device")
    return load_run(
        run_dir,
        checkpoint=args.checkpoint,
        device=str(device),
        precision=args.precision,
        option="--precision",
    )


def run_options(p: argparse.ArgumentParser) -> None:
    """RUN_DIR, ``--checkpoint``, ``--device``, ``--threads`` and ``--precision``: the
    options of the commands that run a model over a corpus (align, inspect)."""
    from .decoding import precision_option

    p.add_argument("run_dir", help="run folder written by 'attnkit train'")
    checkpoint_option(p)
    device_option(p)
    threads_option(p)
    precision_option(p)


def threads_option(p: argparse.ArgumentParser, what: str = "the model's work") -> None:
    """``--threads N``: the CPU threads of ``what``; :func:`load_run_folder` sets them."""
    p.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help=f"CPU threads of {what} (default: PyTorch's, the cores this process may "
        "use); 1 for figures that compare engines",
    )


def warn_threads_over_cores(threads: int | str, option: str, processes: int = 1) -> None:
    """One warning when ``option`` asks for more threads than this process's share of the
    cores: the count is per process, and the ``processes`` processes on this machine
    (torchrun's ``--nproc_per_node``) share its cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    share = max((cores or 1) // processes, 1)
    if not (isinstance(threads, int) and cores and threads > share):
        return
    asked = f"{option} {threads} is more than the {cores} CPU core(s) this process may use"
    if processes > 1:
        asked = (
            f"{option} {threads} is per process: the {processes} processes on this machine "
            f"ask for {threads * processes} threads, more than the {cores} CPU core(s) they share"
        )
    default = "leave it out" if option.startswith("--") else "'auto'"
    warn(
        f"{asked}; threads beyond the cores wait for each other and slow the work down "
        f"(use {share}, or {default})"
    )


def apply_threads(threads: int | None) -> None:
    """``--threads`` put in force (None: PyTorch's own choice).

    Raises:
        UsageError: a count below 1.
    """
    if threads is None:
        return
    if threads < 1:
        raise UsageError(f"--threads must be >= 1, got {threads}")
    warn_threads_over_cores(threads, "--threads")
    import torch

    torch.set_num_threads(threads)


def pair_file_options(
    p: argparse._ActionsContainer, tgt_help: str, src_help: str = "source sentences, one per line"
) -> None:
    """Add ``--src FILE`` and ``--tgt FILE`` (also spelt ``--ref``): a corpus of one's own,
    the two sides line by line, instead of a split of the run's data."""
    p.add_argument("--src", metavar="FILE", help=src_help)
    p.add_argument(
        "--tgt", "--ref", dest="tgt", metavar="FILE", help=f"{tgt_help} (--ref is the same option)"
    )


def load_batched_run(args: argparse.Namespace, run_dir: str | None = None):
    """:func:`load_run_folder` after checking ``--batch-size`` (align's sentences per batch)."""
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    return load_run_folder(args, run_dir)


def preset_for(name: str) -> str | None:
    """The CONFIG argument that trains the preset NAME: ``configs/NAME.yaml`` when the
    working directory has it, else the shipped preset's bare name, else the checkout's
    ``configs/NAME.yaml`` (the presets that read corpora beside the checkout)."""
    from ..nmt.config.presets import preset_path

    here, checkout = Path("configs") / f"{name}.yaml", _CHECKOUT_CONFIGS / f"{name}.yaml"
    if here.is_file():
        return str(here)
    if preset_path(name) is not None:
        return name
    return str(checkout) if checkout.is_file() else None


def prepared_only(folder: Path, lacking: str) -> str | None:
    """What to say of a folder ``attnkit prepare`` made, where training has not begun
    (``lacking``: what the command looked for), or None for any other folder."""
    from ..nmt.runs.run_folder import RunFolder
    from ..nmt.training.prepare import prepared_config_name

    run = RunFolder(folder)
    if run.config.is_file() or not run.prepared.is_file():
        return None
    name = prepared_config_name(run)
    config = (preset_for(name) if name else None) or "CONFIG.yaml"
    of = f" of config {name}" if name else ""
    return (
        f"{folder} holds prepared data (attnkit prepare{of}) but {lacking}; "
        f"start training in it with: attnkit train {quote(config)} --out {quote(str(folder))}"
    )


def check_run_folder(run_dir: str) -> None:
    """Raise a :class:`UsageError` naming the way out when ``run_dir`` holds no trained run.

    Raises:
        UsageError: ``run_dir`` or its ``config.yaml`` does not exist.
    """
    folder = Path(run_dir)
    if (folder / "config.yaml").is_file():
        return
    prepared = prepared_only(folder, "no trained run")
    if prepared:
        raise UsageError(prepared)
    what = (
        f"{run_dir} has no config.yaml (not a training run folder)"
        if folder.is_dir()
        else f"run folder {run_dir} not found"
    )
    preset = preset_for(folder.name)
    if preset is None:
        raise UsageError(f"{what}; 'attnkit train CONFIG.yaml --out {quote(run_dir)}' makes one")
    default = Path("runs") / folder.name
    out = "" if folder == default else f" --out {quote(run_dir)}"
    raise UsageError(f"{what}; 'attnkit train {quote(preset)}{out}' makes it")


def check_split(run, split: str) -> None:
    """``split`` of ``run``'s data exists; a user corpus without ``data.test`` (only the
    test split may be left out) is told what to score instead.

    Raises:
        UsageError: the run's config has no such split.
    """
    data = run.config.data
    if split == "test" and data.train is not None and data.test is None:
        raise UsageError(
            f"{run.folder} has no test split (data.test): score your own files with "
            "--src FILE --tgt FILE, or the validation split with --split valid"
        )
