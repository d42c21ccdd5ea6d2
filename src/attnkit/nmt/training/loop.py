"""Training a run: :func:`train`, from an empty or resumed run folder to its chosen checkpoint.

:func:`train` holds the run folder's lock (:mod:`~attnkit.nmt.runs.runlock`)
throughout, so one training at a time writes it; for a new run with
``train.init_from``, loads the trained run it starts from (:mod:`.init_from`);
prepares the folder (a new run, a resumed one, or a finished one reused as it
is); prepares the data (:mod:`.prepare`: tokenizers and token store); then lets a
:class:`~.trainer.Trainer` train epoch after epoch until :mod:`.stopping`
gives a reason (early stopping, budgets, stop requests, non-finite steps).
When training ends, :mod:`.run_end` averages the last snapshots (with
``train.average_last``) and records which checkpoint ``--checkpoint auto``
takes (:mod:`.checkpoint_choice`).

SIGINT/SIGTERM ask the loop to stop after the current step and save
``last``; a second SIGINT aborts at once, as the first (or a SIGTERM) does while
the data is prepared, before the first step, and after the last one, while the
run is averaged and its checkpoint chosen (resuming the finished run does that).
If ``last`` is damaged, resuming falls back to ``last.prev`` and says so;
``train.max_nonfinite`` non-finite steps in a row raise
:class:`TrainingError`, keeping the last good checkpoint.

Started by ``torchrun``, :func:`train` trains data-parallel on all its
processes (:mod:`.distributed`: ``train.batch_size`` is the global batch,
rank 0 validates and writes, stops are agreed after each step).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from pathlib import Path

from ...atomic import WriteError
from ..config import RunConfig
from ..device import resolve_device
from ..precision import resolve_precision
from ..runs.checkpoint import Checkpoint, checkpoint_row, load_latest
from ..runs.run_folder import RunFolder
from ..runs.runlock import run_lock
from . import messages
from .distributed import join, report_replicas
from .init_from import Parent, record_parent, starting_point
from .interrupt import terminate_as_ctrl_c
from .prepare import TrainingData, prepare_data
from .progress import Progress, TrainingError, TrainSummary
from .run_end import finish_cut_short, finish_run
from .stopping import cut_short_note, spent_budget
from .threads import threads_restored
from .trainer import Trainer

__all__ = ["Progress", "TrainSummary", "TrainingError", "resolve_device", "train"]


def train(
    config: RunConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress_bar: bool = True,
    echo: Callable[[str], None] = print,
) -> TrainSummary:
    """Train ``config`` into ``run_dir``.

    Args:
        config: the validated run config.
        run_dir: the run folder (created if needed).
        resume: continue the run in ``run_dir`` from its ``last`` checkpoint, or
            reuse it as-is when it has finished (same config required, but for
            :data:`~attnkit.nmt.runs.run_folder.RESUME_MAY_CHANGE`).
        overwrite: delete a previous run's files in ``run_dir`` first.
        progress_bar: show a tqdm bar (loss, tokens/s, ETA).
        echo: where one-line progress messages go.

    It trains on ``train.threads`` CPU threads and gives torch's thread count
    back as it found it when it returns or raises. A large corpus is encoded by
    worker processes that import the main module: a script that calls this keeps
    its top-level code under ``if __name__ == "__main__":``.

    Under ``torchrun``, or in a process group the caller initialised (e.g. under
    ``torch.multiprocessing.spawn``), every process calls this and trains its share
    of each batch (:mod:`.distributed`); rank 0 alone echoes, writes ``run_dir`` and
    returns a summary with ``main`` True.

    Raises:
        RunInUse: another training holds ``run_dir``'s lock (:mod:`~attnkit.nmt.runs.runlock`).
        ValueError: ``resume`` and ``overwrite`` both True, ``run_dir`` holds another
            run, or the data/config is unusable.
        ValueError, FileNotFoundError: ``train.init_from`` names no usable run for a new
            run, or one whose model differs (:func:`.init_from.load_parent`).
        TrainingError: ``train.max_nonfinite`` steps in a row were not finite.
        WriteError: a file of the run could not be written (e.g. the disk is full);
            the message names the file, the last good checkpoint and its step, and
            the command that resumes the run.
    """
    if resume and overwrite:  # overwrite would delete the run resume was asked to continue
        raise ValueError(
            "resume=True continues the run in run_dir and overwrite=True deletes it first; "
            "pass one of them"
        )
    folder = RunFolder(Path(run_dir))
    if config.name is None:  # saved configs always carry a name
        config = config.model_copy(update={"name": folder.name})
    device = resolve_device(config.train.device)
    resolve_precision(config.train.precision, device)  # a bad setting fails before run_dir exists
    # SIGTERM stops at once where Ctrl-C does (the loop turns both into a stop request)
    with terminate_as_ctrl_c(), threads_restored(), join(device) as group:
        if not group.is_main:  # rank 0 alone logs, shows progress and writes
            echo, progress_bar = _silent, False
        # the lock comes before anything in run_dir is written
        lock = run_lock(folder.path, warn=echo) if group.is_main else contextlib.nullcontext()
        with lock:
            new_run = overwrite or not folder.has_run()  # the same on every rank
            config, parent = starting_point(config, folder, new_run=new_run, echo=echo)
            trainer = Trainer(config, folder, echo, progress_bar, group)
            try:
                return _train_locked(trainer, parent, resume, overwrite)
            except WriteError as err:
                raise err.with_note(messages.after_write_failure(folder, err)) from err
            finally:
                del trainer  # its DDP reducer holds the process group join() destroys next


def _silent(_line: str) -> None:
    pass


def _train_locked(
    trainer: Trainer, parent: Parent | None, resume: bool, overwrite: bool
) -> TrainSummary:
    config, folder, echo, group = trainer.config, trainer.folder, trainer.echo, trainer.group
    with group.main_first():  # rank 0 prepares the folder, then the others read it
        if group.is_main:
            resuming = folder.prepare(config, resume=resume, overwrite=overwrite, echo=echo)
            if parent is not None:
                record_parent(folder, parent)
        else:
            resuming = _shared_run_exists(folder)
    ckpt = load_latest(folder.last, warn=echo) if resuming else None
    if ckpt is not None:  # config.yaml, which prepare() compared with, may have been edited
        folder.refuse_changes_since(ckpt.state.get("config"), config)
    if ckpt is not None and ckpt.state.get("progress", {}).get("finished"):
        progress = Progress(**ckpt.state["progress"])
        spent = spent_budget(config.train, progress)
        if spent:
            reasons, keys = zip(*spent, strict=True)
            echo(
                f"{folder.path} holds a finished run with this config; reusing it "
                f"({', '.join(reasons)}: raise {' and '.join(keys)} to train on; "
                "--overwrite retrains)"
            )
            if group.is_main and not folder.choice.is_file():
                finish_cut_short(folder, config, trainer.device, trainer.precision, echo)
            history = folder.read_history(math.inf, known=checkpoint_row(ckpt), warn=echo)
            return TrainSummary(folder.path, progress, True, history, main=group.is_main)
        echo(f"{folder.path} finished ({progress.stop_reason}); the new budget lets it go on")
    if resuming and group.is_main:  # it trains again: with the changes --resume allowed
        folder.save_config(config)
        folder.choice.unlink(missing_ok=True)  # chosen when it ended before; chosen again
    adapts = (
        " (auto: fewer while other processes load the CPUs)" if trainer.threads.adaptive else ""
    )
    echo(
        f"training {config.name} on {trainer.device}{group.describe()} with "
        f"{trainer.threads.threads} thread(s){adapts} into {folder.path}"
        f"{messages.batch_note(config, group)}"
    )
    echo(f"precision {trainer.precision.reason}")
    # Before the first step Ctrl-C stops at once (KeyboardInterrupt): the tokenizer
    # training and the store build leave nothing half-made, and there is no step to save.
    data = prepare_data(
        config, folder, resuming=ckpt is not None, group=group, echo=echo, progress_bar=trainer.bar
    )
    with trainer.request:
        summary = _run(trainer, ckpt, data, parent)
    if group.is_main and not summary.interrupted:
        finish_run(folder, config, data.validation, trainer.device, trainer.precision, echo)
    return summary


def _shared_run_exists(folder: RunFolder) -> bool:
    """On a rank other than 0: whether rank 0's run folder holds a checkpoint."""
    if not folder.config.is_file():
        raise ValueError(
            f"{folder.config}, written by rank 0, is not visible here: the run folder "
            "must be on a file system all machines share (see docs/distributed.md)"
        )
    return folder.has_run()


def _run(
    trainer: Trainer, ckpt: Checkpoint | None, data: TrainingData, parent: Parent | None
) -> TrainSummary:
    """Train until :meth:`.StopRules.reason_to_stop` gives a reason; save and report."""
    config, folder, echo, group = trainer.config, trainer.folder, trainer.echo, trainer.group
    trainer.setup(data, parent)
    if ckpt is not None:
        trainer.resume(ckpt)
        echo(f"resumed at epoch {trainer.progress.epoch}, step {trainer.progress.step}")
    elif parent is not None:
        echo(parent.line())
    if group.is_main:
        folder.record_precision(trainer.progress.step, trainer.precision.record(), warn=echo)
    p, stop = trainer.progress, trainer.stop
    trainer.budget.begin(p.step)
    while not stop.reason_to_stop(p):
        if p.epoch_batches_done == 0:
            p.epoch += 1
        trainer.train_epoch()
    report_replicas(group, trainer.model, echo)
    if stop.interrupted:  # the run goes on when resumed
        trainer.save("last")
        echo(
            f"interrupted ({stop.reason}) at epoch {p.epoch}, step {p.step}; "
            f"checkpoint saved; continue with: {messages.resume_command(folder.path)}"
        )
        return TrainSummary(folder.path, p, False, trainer.history, True, main=group.is_main)
    trainer.validate_pending()
    reason = stop.close(p)
    trainer.save("last")
    skipped = f"; {p.skipped_steps} step(s) skipped as non-finite" if p.skipped_steps else ""
    echo(
        f"stopped: {reason}; best valid BLEU {p.best_bleu:.2f} at step {p.best_step} "
        f"({trainer.elapsed() / 60:.1f} min){skipped}"
    )
    note = cut_short_note(config.train, p, folder.path)
    if note:
        echo(note)
    return TrainSummary(folder.path, p, False, trainer.history, main=group.is_main)
