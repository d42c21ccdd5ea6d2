"""Training loop: teacher forcing, label smoothing, Adam, clipping, lr schedule, early stop.

The data comes from :mod:`.prepare`; each step minimises the label-smoothed
cross-entropy of :mod:`.objective`. After each epoch (or every ``valid_every``
steps) the model is validated (:func:`.objective.validate`: loss, perplexity,
greedy sacreBLEU). The learning rate follows ``train.lr_schedule``
(:mod:`.schedule`: halving when validation BLEU plateaus, the
Transformer's inverse-square-root warm-up, or a straight line to the step
budget, which ``max_steps: auto`` sizes to the time cap: :mod:`.step_budget`),
and :mod:`.stopping` decides when training ends (early stopping, budgets,
stop requests, non-finite steps).

The run folder (:class:`~attnkit.nmt.runs.run_folder.RunFolder`) gets the
resolved config, the tokenizers, the ``best``/``last`` checkpoints, the
metrics log and the learning curve. With ``train.average_last N`` it also keeps
the model weights of the last N validations (``snapshots/``) and, when
training ends, their mean as the ``averaged`` checkpoint (:mod:`.averaged`);
then it records which checkpoint ``--checkpoint auto`` takes
(:mod:`.checkpoint_choice`).
One training at a time writes it: :func:`train` holds the folder's lock
(:mod:`~attnkit.nmt.runs.runlock`) throughout.

Reliability: ``last`` holds everything a resumed run needs (model, optimizer,
scheduler, data order, RNG state, the training loss since the last
validation), so a run stopped after any checkpoint and resumed gives the same
losses and weights as one that never stopped (same machine, seed and thread
count; dropout generators per rank in :mod:`.rng`), in bf16 as in fp32
(``train.precision``, :mod:`attnkit.nmt.precision`: forward passes under
autocast, fp32 weights and optimizer state). SIGINT/SIGTERM ask the
loop to stop after the current step and save ``last``; a second SIGINT aborts
at once, as the first does while the data is prepared, before the first step,
and after the last one, while the run is averaged and its checkpoint chosen
(:mod:`.run_end`; resuming the finished run does that).
If ``last`` is damaged, resuming falls back to ``last.prev`` and says so. A
step with a non-finite loss or gradient is skipped with a warning;
``train.max_nonfinite`` of them in a row raise :class:`TrainingError`, keeping
the last good checkpoint.

Started by ``torchrun``, :func:`train` trains data-parallel on all its
processes (:mod:`.distributed`: ``train.batch_size`` is the global batch,
rank 0 validates and writes, stops are agreed after each step); the loop
below talks to a :class:`~.distributed.Group`, a no-op for one process.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch

from ...atomic import WriteError, writing
from ..config import RunConfig
from ..data.batching import Batch, Examples, make_batch
from ..device import resolve_device
from ..models.registry import build_translator
from ..precision import resolve_precision
from ..runs.checkpoint import Checkpoint, checkpoint_row, load_latest, save_checkpoint
from ..runs.run_folder import RunFolder
from ..runs.runlock import run_lock
from . import guided_alignment, messages, objective
from .distributed import Group, join, report_replicas
from .interrupt import StopRequest
from .optimizer import adam
from .prepare import EpochOrder, TrainingData, prepare_data, sampled_epoch
from .progress import Progress, TrainingError, TrainSummary
from .rng import restore_rng, rng_states, seed_dropout
from .run_end import finish_cut_short, finish_run
from .schedule import Schedule
from .step_budget import StepBudget
from .stopping import StopRules, budget_left, cut_short_note
from .threads import ThreadGovernor

__all__ = ["Progress", "TrainSummary", "TrainingError", "resolve_device", "train"]

_SCORES = ("valid_loss", "valid_ppl", "valid_bleu")


class _Trainer:
    """State and steps of one training run (kept small: :func:`train` is the entry point)."""

    def __init__(
        self, config: RunConfig, folder: RunFolder, echo, progress_bar: bool, group: Group
    ):
        self.config, self.folder, self.echo, self.bar = config, folder, echo, progress_bar
        self.group, self.device = group, group.device
        self.progress = Progress()
        self.history: list[dict] = []
        self.started = time.monotonic()
        self.order = EpochOrder(config.train.seed)
        self.request = StopRequest(announce=group.is_main)
        self.stop = StopRules(config.train, group, self.request, self.elapsed, folder.last)
        self.threads = ThreadGovernor(config.train.threads, group.local_world_size)
        self.precision = resolve_precision(config.train.precision, self.device)
        self.budget = StepBudget(config.train)
        self.epoch_steps = 0  # batches in the current epoch
        self.sampled: tuple[int, Examples] | None = None  # (epoch, pairs): subword sampling

    def setup(self, data: TrainingData) -> None:
        cfg, self.data = self.config.train, data
        torch.manual_seed(cfg.seed)
        vocab = (data.src_tok.vocab_size, data.tgt_tok.vocab_size)
        self.model = build_translator(self.config.model, *vocab).to(self.device)
        self.forward = self.group.wrap(self.model)  # training passes; DDP averages gradients
        seed_dropout(cfg.seed, self.group)
        self.optimizer = adam(self.model.parameters(), cfg)
        self.scheduler = Schedule(self.optimizer, cfg)

    def resume(self, ckpt: Checkpoint) -> None:
        """Restore everything ``save("last")`` wrote; metrics after that step are dropped."""
        try:
            self.model.load_state_dict(ckpt.model)
            self.optimizer.load_state_dict(ckpt.optimizer)
            self.scheduler.load_state_dict(ckpt.state["scheduler"])
            self.progress = Progress(**ckpt.state["progress"])
            self.order.state = ckpt.extra["epoch_generator"]
            world = ckpt.state.get("world_size", 1)
            restore_rng(ckpt.extra, world, self.group, self.device, self.echo)
        except (KeyError, TypeError, RuntimeError, ValueError) as err:
            raise ValueError(
                f"{self.folder.last}: cannot resume from this checkpoint ({err})"
            ) from None
        self.history = self.folder.history_until(
            self.progress.step,
            rewrite=self.group.is_main,
            known=checkpoint_row(ckpt),
            warn=self.echo,
        )
        if self.group.is_main:
            self.folder.drop_averaging_after(self.progress.step)
        self.started -= self.progress.elapsed_s
        self._keep_budget()
        then = ckpt.state.get("training_data")  # absent from checkpoints before 2026-12-07
        note = None if then is None else messages.data_changed(then, asdict(self.data.counts))
        if note and self.group.is_main:
            self.echo(note)

    def _keep_budget(self) -> None:
        """A resumed ``max_steps: auto`` run keeps the budget it chose."""
        p, cfg = self.progress, self.config.train
        if cfg.max_steps != "auto":
            return
        if p.step_budget:
            self.scheduler.set_total(p.step_budget)
        elif p.step >= cfg.warmup_steps - 1:
            raise ValueError(
                f"train.max_steps auto is chosen when warm-up ends, and this run is past it "
                f"(step {p.step}, warmup_steps {cfg.warmup_steps}): give max_steps a number"
            )

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def save(self, name: str) -> None:
        """Save a checkpoint (rank 0 writes it; every rank must call this: it gathers RNGs)."""
        p = self.progress
        p.elapsed_s = self.elapsed()
        self.stop.record(p)
        state = {
            "progress": asdict(p),
            "scheduler": self.scheduler.state_dict(),
            "world_size": self.group.world_size,
            "training_data": asdict(self.data.counts),
        }
        extra = {"epoch_generator": self.order.state, **rng_states(self.group, self.device)}
        if not self.group.is_main:
            return
        last = name == "last"
        optimizer = self.optimizer if last else None
        save_checkpoint(
            self.folder.path,
            name,
            self.model.state_dict(),
            state,
            optimizer=optimizer,
            extra=extra,
            keep_previous=last,
        )

    def run_validation(self, train_loss: float) -> None:
        """Rank 0 validates (the others wait for its scores); every rank applies them."""
        p, main = self.progress, self.group.is_main
        began = time.monotonic()
        scores = self._scores()
        self.budget.validated(time.monotonic() - began)
        self._revise_budget()
        improved = p.validated(scores["valid_bleu"])
        self.scheduler.after_validation(scores["valid_bleu"])
        row = {"epoch": p.epoch, "step": p.step, "train_loss": train_loss, **scores}
        if self.config.train.guided_alignment is not None:  # the part of train_loss it adds
            row["train_alignment_loss"] = p.pending_alignment / max(p.pending_tokens, 1)
        row.update(lr=self.optimizer.param_groups[0]["lr"], elapsed_s=round(self.elapsed(), 1))
        p.pending_loss, p.pending_alignment, p.pending_tokens = 0.0, 0.0, 0
        # The row goes first: resuming drops rows past the checkpoint's step and redoes them.
        self.history.append(row)
        if main:
            self.folder.append_history(row)
        if improved:
            self.save("best")
        self._snapshot(row)  # before last: a run resumed from an earlier last drops it
        self.save("last")
        if main and self.config.train.average_last:
            self.folder.snapshots.keep_last(self.config.train.average_last)
        if main:
            # matplotlib (about 35 MB a process) is loaded by rank 0 alone, which draws
            from ...plot import learning_curve

            with writing(self.folder.learning_curve):
                learning_curve(_plottable(self.history), path=self.folder.learning_curve)
        self.echo(messages.validation_line(row, improved))

    def _snapshot(self, row: dict) -> None:
        """Rank 0 keeps this validation's model weights for averaging (``train.average_last``)."""
        if self.group.is_main and self.config.train.average_last:
            state = {key: row[key] for key in ("epoch", *_SCORES)}
            self.folder.snapshots.add(row["step"], self.model.state_dict(), state)

    def _scores(self) -> dict[str, float]:
        """Rank 0's validation scores (:func:`.objective.validate`), on every rank."""
        d = self.data
        args = (d.valid, d.references, d.tgt_tok, self.config, self.device)
        mine = {}
        if self.group.is_main:
            with self.precision.autocast():
                mine = objective.validate(self.model, *args)
        return dict(zip(_SCORES, self.group.broadcast([mine.get(k) for k in _SCORES]), strict=True))

    def validate_pending(self) -> None:
        """Validate if any step was taken since the last validation."""
        p = self.progress
        if p.pending_tokens:
            self.run_validation(p.pending_loss / p.pending_tokens)

    def train_step(self, batch: Batch, total_tokens: int, counts: bool = True) -> float | None:
        """One optimizer step on this rank's share of a global batch of ``total_tokens``.

        The share's mean loss is weighted by ``W * share_tokens / total_tokens``
        (0 for a stand-in share that ``counts`` nothing), so the gradient DDP
        averages over the W ranks is that of the global batch's mean loss; with
        one process the weight is exactly 1. Returns the global batch's mean
        loss, or None when the step was skipped for a non-finite loss or gradient.
        The guided-alignment term, weighted alike, is counted on its own for the log.
        """
        cfg, p = self.config.train, self.progress
        with self.precision.autocast():  # the backward pass runs outside, as autocast wants
            loss, aligned = guided_alignment.training_loss(self.forward, self.model, batch, cfg)
        share = batch.num_target_tokens if counts else 0
        weight = share * self.group.world_size / total_tokens
        loss = loss * weight
        self.optimizer.zero_grad(set_to_none=True)
        p.epoch_batches_done += 1
        mine = 0.0 if aligned is None else float(aligned.detach()) * weight
        value, alignment = self.group.means(loss.item(), mine)
        if not math.isfinite(value):
            return self._skip(f"loss is {value}")
        loss.backward()
        norm = _grad_norm(self.model, cfg.clip)
        if not math.isfinite(norm):
            self.optimizer.zero_grad(set_to_none=True)
            return self._skip(f"gradient norm is {norm}")
        self.optimizer.step()
        self.scheduler.after_step()
        p.stepped(value, total_tokens, alignment)
        return value

    def _skip(self, why: str) -> None:
        """Count a skipped step (too many in a row stop training: :mod:`.stopping`)."""
        p = self.progress
        p.skipped()
        self.echo(
            f"warning: epoch {p.epoch} batch {p.epoch_batches_done}: {why}; step skipped "
            f"({p.nonfinite_streak} in a row, {self.config.train.max_nonfinite} stop training)"
        )

    def train_epoch(self) -> None:
        """Train (the rest of) the current epoch; validate at its end or every ``valid_every``."""
        cfg, p = self.config.train, self.progress
        examples = self.epoch_examples()
        batches = self.order.batches(examples, cfg)
        self.epoch_steps = len(batches)
        bar = messages.epoch_bar(len(batches), p, enabled=self.bar)
        tick, tokens = time.monotonic(), 0
        for indices in batches[p.epoch_batches_done :]:
            mine = self.group.share(indices)  # an idle rank joins the all-reduce with weight 0
            batch = make_batch(examples, mine or indices[:1]).to(self.device)
            total = objective.target_tokens(examples, indices)
            value = self.train_step(batch, total, counts=bool(mine))
            self.threads.tick()
            bar.update(1)
            if value is not None:
                tokens += total
                rate = f"{tokens / max(time.monotonic() - tick, 1e-9):.0f}"
                loss = f"{value:.3f}"
                bar.set_postfix(loss=loss, tok_s=rate, threads=self.threads.threads, refresh=False)
                self._after_step()
            if self.stop.reason_to_stop(p):
                break
        bar.close()
        if p.epoch_batches_done == len(batches):
            self.order.next_epoch()
            p.epoch_batches_done = 0
            if not cfg.valid_every:
                self.validate_pending()

    def epoch_examples(self) -> Examples:
        """The current epoch's training pairs: the store's, or a sampled segmentation of them."""
        if self.config.train.subword_sampling is None:
            return self.data.train
        if self.sampled is None or self.sampled[0] != self.progress.epoch:
            self.sampled = None  # the last epoch's pairs go before the next are encoded
            args = (self.config, self.folder, self.data, self.progress.epoch, self.group, self.echo)
            self.sampled = (self.progress.epoch, sampled_epoch(*args))
        return self.sampled[1]

    def _after_step(self) -> None:
        """Validate every ``valid_every`` steps, else save ``last`` every ``checkpoint_every``."""
        cfg, step = self.config.train, self.progress.step
        self.budget.stepped(step)
        if self.budget.due(self.progress):
            self._choose_budget()
        if cfg.valid_every and step % cfg.valid_every == 0:
            self.validate_pending()
        elif cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
            self.save("last")

    def _choose_budget(self) -> None:
        """``max_steps: auto``: rank 0 sizes the step budget, every rank draws the line to it."""
        self._use_budget(self.budget.choose(self.progress, self.elapsed(), self.epoch_steps))

    def _revise_budget(self) -> None:
        """``max_steps: auto``, at a validation: a lower budget where the steps got slower."""
        if self.budget.auto and self.progress.step_budget:  # the same on every rank
            self._use_budget(self.budget.revise(self.progress, self.elapsed(), self.epoch_steps))

    def _use_budget(self, decision: tuple[int, str] | None) -> None:
        """Rank 0's decision (None: keep the budget) on every rank: the line is redrawn."""
        mine, line = decision or (0, "")
        (steps,) = self.group.broadcast([mine])
        if not steps:
            return
        self.progress.step_budget = int(steps)
        self.scheduler.set_total(int(steps))
        self.echo(line)  # rank 0's, the one that echoes


def _plottable(history: list[dict]) -> list[dict]:
    """The rows with NaN for what a damaged row lost (the curve shows a gap there)."""
    keys = ("train_loss", "valid_loss", "valid_bleu")
    return [{**{k: math.nan for k in keys}, **row} for row in history]


def _grad_norm(model: torch.nn.Module, clip: float | None) -> float:
    """The gradients' total 2-norm, clipped to ``clip`` in place when given (the norm before)."""
    params = [q for q in model.parameters() if q.grad is not None]
    if clip is not None:
        return float(torch.nn.utils.clip_grad_norm_(params, clip))
    return float(torch.nn.utils.get_total_norm([q.grad for q in params]))


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

    Under ``torchrun`` every process calls this and trains its share of each
    batch (:mod:`.distributed`); rank 0 alone echoes, writes ``run_dir`` and
    returns a summary with ``main`` True.

    Raises:
        RunInUse: another training holds ``run_dir``'s lock (:mod:`~attnkit.nmt.runs.runlock`).
        ValueError: ``run_dir`` holds another run, or the data/config is unusable.
        TrainingError: ``train.max_nonfinite`` steps in a row were not finite.
        WriteError: a file of the run could not be written (e.g. the disk is full);
            the message names the file, the last good checkpoint and its step, and
            the command that resumes the run.
    """
    folder = RunFolder(Path(run_dir))
    if config.name is None:  # saved configs always carry a name
        config = config.model_copy(update={"name": folder.name})
    device = resolve_device(config.train.device)
    resolve_precision(config.train.precision, device)  # a bad setting fails before run_dir exists
    with join(device) as group:  # torchrun's job, or just us
        if not group.is_main:  # rank 0 alone logs, shows progress and writes
            echo, progress_bar = _silent, False
        # the lock comes before anything in run_dir is written
        lock = run_lock(folder.path, warn=echo) if group.is_main else contextlib.nullcontext()
        with lock:
            trainer = _Trainer(config, folder, echo, progress_bar, group)
            try:
                return _train_locked(trainer, resume, overwrite)
            except WriteError as err:
                raise err.with_note(messages.after_write_failure(folder, err)) from err
            finally:
                del trainer  # its DDP reducer holds the process group join() destroys next


def _silent(_line: str) -> None:
    pass


def _train_locked(trainer: _Trainer, resume: bool, overwrite: bool) -> TrainSummary:
    config, folder, echo, group = trainer.config, trainer.folder, trainer.echo, trainer.group
    with group.main_first():  # rank 0 prepares the folder, then the others read it
        if group.is_main:
            resuming = folder.prepare(config, resume=resume, overwrite=overwrite, echo=echo)
        else:
            resuming = _shared_run_exists(folder)
    ckpt = load_latest(folder.last, warn=echo) if resuming else None
    if ckpt is not None and ckpt.state.get("progress", {}).get("finished"):
        progress = Progress(**ckpt.state["progress"])
        if not budget_left(config.train, progress):
            echo(
                f"{folder.path} holds a finished run with this config; reusing it (--overwrite "
                "retrains; a larger train.epochs/max_steps/max_minutes/early_stopping goes on)"
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
        summary = _run(trainer, ckpt, data)
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


def _run(trainer: _Trainer, ckpt: Checkpoint | None, data: TrainingData) -> TrainSummary:
    """Train until :meth:`.StopRules.reason_to_stop` gives a reason; save and report."""
    config, folder, echo, group = trainer.config, trainer.folder, trainer.echo, trainer.group
    trainer.setup(data)
    if ckpt is not None:
        trainer.resume(ckpt)
        echo(f"resumed at epoch {trainer.progress.epoch}, step {trainer.progress.step}")
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
            f"checkpoint saved; continue with: attnkit train --resume {folder.path}"
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
