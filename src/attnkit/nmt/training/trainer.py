"""One training run's state and steps: teacher forcing, Adam, clipping, validation, checkpoints.

Each step minimises the label-smoothed cross-entropy of :mod:`.objective`
(plus the guided-alignment term of :mod:`.guided_alignment` where set) under
``train.precision``'s autocast (:mod:`attnkit.nmt.precision`: fp32 weights
and optimizer state). After each epoch, or every ``valid_every`` steps, the
model is validated (:func:`.objective.validate`: loss, perplexity, greedy
sacreBLEU). The learning rate follows ``train.lr_schedule``
(:mod:`.schedule`: halving when validation BLEU plateaus, the Transformer's
inverse-square-root warm-up, or a straight line to the step budget, which
``max_steps: auto`` sizes to the time cap: :mod:`.step_budget`).

Each validation writes to the run folder
(:class:`~attnkit.nmt.runs.run_folder.RunFolder`): a metrics row, the
``best`` and ``last`` checkpoints, the learning curve and, with
``train.average_last N``, the model weights of the last N validations
(``snapshots/``) for :mod:`.averaged`.

``last`` holds everything a resumed run needs (model, optimizer, scheduler,
data order, RNG state, the training loss since the last validation), so a
run stopped after any checkpoint and resumed gives the same losses and
weights as one that never stopped (same machine, seed and thread count;
dropout generators per rank in :mod:`.rng`), in bf16 as in fp32. A step
with a non-finite loss or gradient is skipped with a warning (too many in a
row stop training: :mod:`.stopping`).

Under ``torchrun`` the trainer talks to a :class:`~.distributed.Group`
(a no-op for one process): each rank steps on its share of a global batch,
rank 0 validates and writes.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict

import torch

from ...atomic import writing
from ..config import RunConfig
from ..data.batching import Batch, Examples, make_batch
from ..models.registry import build_translator
from ..precision import resolve_precision
from ..runs.checkpoint import Checkpoint, checkpoint_row, save_checkpoint
from ..runs.run_folder import RunFolder
from . import guided_alignment, messages, objective
from .distributed import Group
from .init_from import Parent, load_weights
from .interrupt import StopRequest
from .optimizer import adam
from .prepare import EpochOrder, TrainingData, sampled_epoch
from .progress import Progress
from .rng import restore_rng, rng_states, seed_dropout
from .schedule import Schedule
from .step_budget import StepBudget
from .stopping import StopRules
from .threads import ThreadGovernor

__all__ = ["Trainer"]

_SCORES = ("valid_loss", "valid_ppl", "valid_bleu")


class Trainer:
    """State and steps of one training run (:func:`.loop.train` drives it)."""

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

    def setup(self, data: TrainingData, parent: Parent | None = None) -> None:
        """Build the model (from ``parent``'s weights for a fine-tuning run: :mod:`.init_from`,
        loaded before DDP wraps it), a fresh optimizer and schedule.

        Raises:
            ValueError: ``parent``'s weights do not fit the model.
        """
        cfg, self.data = self.config.train, data
        torch.manual_seed(cfg.seed)
        vocab = (data.src_tok.vocab_size, data.tgt_tok.vocab_size)
        self.model = build_translator(self.config.model, *vocab)
        if parent is not None:
            load_weights(self.model, parent)
        self.model.to(self.device)
        self.forward = self.group.wrap(self.model)  # training passes; DDP averages gradients
        seed_dropout(cfg.seed, self.group)
        self.optimizer = adam(self.model.parameters(), cfg)
        self.scheduler = Schedule(self.optimizer, cfg)
        self.started = time.monotonic()  # training time (max_minutes): not the data's preparation

    def resume(self, ckpt: Checkpoint) -> None:
        """Restore everything ``save("last")`` wrote; the metrics rows and snapshots of the
        validations it does not count are dropped (those after its step, and its step's own
        when it was saved before that validation: ``checkpoint_every``, a stop request)."""
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
        p = self.progress
        counted = p.step - 1 if p.pending_tokens else p.step  # its last validation's step, or later
        self.history = self.folder.history_until(
            counted, rewrite=self.group.is_main, known=checkpoint_row(ckpt), warn=self.echo
        )
        if self.group.is_main:
            self._resume_snapshots(counted)
            if self.history:  # the curve of the rows kept (one drawn after the save may lack one)
                self._draw_curve()
        self.started -= self.progress.elapsed_s
        self._keep_budget()
        self.scheduler.resync()  # a budget raised on resume: its line from the first step
        then = ckpt.state.get("training_data")  # absent from checkpoints before 2026-12-07
        note = None if then is None else messages.data_changed(then, asdict(self.data.counts))
        if note and self.group.is_main:
            self.echo(note)

    def _resume_snapshots(self, counted: int) -> None:
        """Drop the snapshots past step ``counted`` (the validations resuming redoes), and
        those beyond the newest ``average_last``: a run killed between its last validation's
        save and that trim had kept one more, which no later validation removed and
        ``attnkit average`` took into its mean."""
        self.folder.drop_averaging_after(counted)
        if self.config.train.average_last:
            self.folder.snapshots.keep_last(self.config.train.average_last)

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
            "config": self.config.model_dump(mode="json"),  # what --resume compares with
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
            self._draw_curve()
        self.echo(messages.validation_line(row, improved))

    def _draw_curve(self) -> None:
        """Draw ``learning_curve.png`` from the history (rank 0 alone calls this)."""
        # matplotlib (about 35 MB a process) is loaded by rank 0 alone, which draws
        from ...plot import learning_curve

        with writing(self.folder.learning_curve):
            learning_curve(_plottable(self.history), path=self.folder.learning_curve)

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

        The share's cross-entropy is weighted by ``W * share_tokens / total_tokens``
        and its guided-alignment term by ``W * share_rows / total_rows``
        (:func:`.guided_alignment.global_batch_loss`; 0 for a stand-in share that
        ``counts`` nothing), so the gradient DDP averages over the W ranks is that
        of the global batch's loss; with one process the weights are exactly 1.
        Returns the global batch's loss, or None when the step was skipped for a
        non-finite loss or gradient. The guided-alignment term is counted on its
        own for the log.
        """
        cfg, p = self.config.train, self.progress
        with self.precision.autocast():  # the backward pass runs outside, as autocast wants
            terms = guided_alignment.training_terms(self.forward, self.model, batch, cfg)
        share = batch.num_target_tokens if counts else 0
        loss, value, alignment = guided_alignment.global_batch_loss(
            terms, share, total_tokens, self.group
        )
        self.optimizer.zero_grad(set_to_none=True)
        p.epoch_batches_done += 1
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
