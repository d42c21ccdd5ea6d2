"""Training loop: teacher forcing, label smoothing, Adam, clipping, lr schedule, early stop.

The objective is the per-token cross-entropy of the target given the source
(Bahdanau et al. 2015 sec. 3; Luong et al. 2015 sec. 3, eq. 4) with label
smoothing (Szegedy et al. 2016 sec. 7), PAD positions ignored. After each
epoch (or every ``valid_every`` steps) the model is validated: loss and
perplexity without smoothing, and greedy sacreBLEU. The learning rate follows
``train.lr_schedule`` (:mod:`.schedule`: halving when validation BLEU
plateaus, or the Transformer's inverse-square-root warm-up) and training stops
after ``early_stopping`` validations without a new best, or when the step or
time budget runs out.

A run folder holds ``config.yaml`` (the resolved config), the tokenizer
files, ``best.json``/``last.json`` checkpoints (+ their safetensors, and
``last.prev.json``, the checkpoint before ``last``), the metrics log
``metrics.jsonl`` and ``learning_curve.png``. One training at a time writes
it: :func:`train` holds the folder's lock (:mod:`.runlock`) throughout.

Reliability: ``last`` holds everything a resumed run needs (model, optimizer,
scheduler, data order, RNG state, the training loss since the last
validation), so a run stopped after any checkpoint and resumed gives the same
losses and weights as one that never stopped (same machine, seed and thread
count). SIGINT/SIGTERM ask the loop to stop after the current step and save
``last``; a second SIGINT aborts at once. If ``last`` is damaged, resuming
falls back to ``last.prev.json`` and says so. A step with a non-finite loss
or gradient is skipped with a warning; ``train.max_nonfinite`` of them in a
row raise :class:`TrainingError`, keeping the last good checkpoint.

Started by ``torchrun``, :func:`train` trains data-parallel on all its
processes (:mod:`.distributed`: ``train.batch_size`` is the global batch,
rank 0 validates and writes, stops are agreed after each step); the loop
below talks to a :class:`~.distributed.Group`, a no-op for one process.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ...plot import learning_curve
from ..analysis.metrics import perplexity, sacre_bleu
from ..config import RunConfig, TrainConfig
from ..data.batching import (
    Batch,
    Examples,
    bucket_batches,
    encode_examples,
    make_batch,
    sorted_batches,
)
from ..data.corpus import load_split
from ..data.tokenizer import load_tokenizers, save_tokenizers, train_tokenizers
from ..decoding.search import decode_examples
from ..device import resolve_device
from ..models.registry import build_translator
from ..models.translator import Translator
from ..runs.checkpoint import (
    Checkpoint,
    checkpoint_exists,
    load_latest,
    save_checkpoint,
)
from ..runs.run_folder import prepare_folder, read_history, write_history
from ..runs.runlock import run_lock
from ..vocab_ids import PAD
from .distributed import Group, join
from .interrupt import StopRequest
from .schedule import Schedule
from .threads import ThreadGovernor

__all__ = ["Progress", "TrainSummary", "TrainingError", "resolve_device", "train"]


@dataclass
class Progress:
    """Where training stands; saved in each checkpoint for resuming."""

    epoch: int = 0  # epochs started
    step: int = 0  # optimizer steps taken
    epoch_batches_done: int = 0  # batches of the current epoch already trained
    best_bleu: float = -1.0
    best_step: int = 0
    bad_validations: int = 0
    elapsed_s: float = 0.0
    finished: bool = False
    stop_reason: str = ""
    pending_loss: float = 0.0  # summed training loss since the last validation
    pending_tokens: int = 0  # target tokens behind pending_loss
    nonfinite_streak: int = 0  # skipped steps in a row
    skipped_steps: int = 0  # all steps skipped for a non-finite loss or gradient


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss stays non-finite); the last checkpoint is kept."""


@dataclass
class TrainSummary:
    """What a call to :func:`train` did."""

    run_dir: Path
    progress: Progress
    reused: bool = False
    history: list[dict] = field(default_factory=list)
    interrupted: bool = False
    main: bool = True  # False on the other ranks of a torchrun job (they report nothing)


def _budget_left(cfg: TrainConfig, p: Progress) -> bool:
    """Whether a finished run may train on under ``cfg`` (its budget was raised on resume)."""
    return (
        (p.epoch < cfg.epochs or p.epoch_batches_done > 0)
        and (cfg.max_steps is None or p.step < cfg.max_steps)
        and (cfg.max_minutes is None or p.elapsed_s < cfg.max_minutes * 60)
        and (cfg.early_stopping is None or p.bad_validations < cfg.early_stopping)
    )


def _tokenize(
    config: RunConfig, run_dir: Path, resuming: bool, echo: Callable[[str], None], group: Group
):
    train_corpus = load_split(config.data, "train")
    valid_corpus = load_split(config.data, "valid")
    for split, corpus in (("train", train_corpus), ("valid", valid_corpus)):
        if not len(corpus):
            files = getattr(config.data, split) if config.data.train is not None else None
            where = "" if files is None else f" in {files.tsv or f'{files.src} / {files.tgt}'}"
            raise ValueError(
                f"no {split} sentence pairs{where} ({corpus.skipped} skipped for an empty side)"
            )
    with group.main_first():  # rank 0 trains the tokenizer once; the others then load it
        if resuming or not group.is_main:
            src_tok, tgt_tok = load_tokenizers(run_dir)
        else:
            tok = config.tokenizer
            src_tok, tgt_tok = train_tokenizers(
                train_corpus.src,
                train_corpus.tgt,
                kind=tok.kind,
                vocab_size=tok.vocab_size,
                joint=tok.joint,
                model_type=tok.model_type,
                character_coverage=tok.character_coverage,
                threads=torch.get_num_threads(),
            )
            save_tokenizers(run_dir, src_tok, tgt_tok)
    data = config.data
    train_ex, dropped = encode_examples(
        train_corpus.src,
        train_corpus.tgt,
        src_tok,
        tgt_tok,
        max_src_len=data.max_src_len,
        max_tgt_len=data.max_tgt_len,
    )
    valid_ex, _ = encode_examples(valid_corpus.src, valid_corpus.tgt, src_tok, tgt_tok)
    echo(
        f"data: {len(train_ex)} training pairs ({dropped} longer than the length limits dropped, "
        f"{train_corpus.skipped} with an empty side skipped), {len(valid_ex)} validation pairs; "
        f"vocabulary {src_tok.vocab_size} source / {tgt_tok.vocab_size} target"
    )
    if not len(train_ex):
        raise ValueError(
            "no training pairs left after filtering; raise data.max_src_len/max_tgt_len"
        )
    return src_tok, tgt_tok, train_ex, valid_ex, valid_corpus.tgt


def _loss(
    model: Translator,
    batch: Batch,
    smoothing: float,
    teacher_forcing: float,
    reduction: str = "mean",
) -> torch.Tensor:
    """Label-smoothed cross-entropy of ``batch.tgt_out`` (PAD ignored), a scalar."""
    logits, _ = model(
        batch.src,
        batch.src_lengths,
        batch.tgt_in,
        teacher_forcing=teacher_forcing,
        need_weights=False,
    )  # (B, T, V)
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),  # (B*T, V)
        batch.tgt_out.reshape(-1),  # (B*T,)
        ignore_index=PAD,
        label_smoothing=smoothing,
        reduction=reduction,
    )


def _target_tokens(examples: Examples, indices: list[int]) -> int:
    """Target tokens the loss counts in the batch of ``indices`` (EOS included, as in Batch)."""
    return sum(len(examples.tgt[i]) + 1 for i in indices)


@torch.no_grad()
def validate(model, examples: Examples, references, tgt_tok, config: RunConfig, device) -> dict:
    """Validation loss/perplexity (no smoothing) and greedy sacreBLEU on detokenized output."""
    model.eval()
    total, tokens = 0.0, 0
    for indices in sorted_batches(examples, config.decode.batch_size):
        batch = make_batch(examples, indices).to(device)
        total += float(_loss(model, batch, 0.0, 1.0, reduction="sum"))
        tokens += batch.num_target_tokens
    limit = config.train.valid_bleu_sentences or len(examples)
    subset = Examples(examples.src[:limit], examples.tgt[:limit])
    hyps = decode_examples(
        model,
        subset,
        beam_size=1,
        max_len_a=config.decode.max_len_a,
        max_len_b=config.decode.max_len_b,
        batch_size=config.decode.batch_size,
        device=device,
    )
    bleu = sacre_bleu([tgt_tok.decode(h.tokens) for h in hyps], references[:limit])
    model.train()
    loss = total / max(tokens, 1)
    return {"valid_loss": loss, "valid_ppl": perplexity(loss), "valid_bleu": bleu.score}


class _Trainer:
    """State and steps of one training run (kept small: :func:`train` is the entry point)."""

    def __init__(self, config: RunConfig, run_dir: Path, echo, progress_bar: bool, group: Group):
        self.config, self.run_dir, self.echo, self.bar = config, run_dir, echo, progress_bar
        self.group, self.device = group, group.device
        self.progress = Progress()
        self.history: list[dict] = []
        self.started = time.monotonic()
        self.generator = torch.Generator().manual_seed(config.train.seed)
        self.epoch_state = self.generator.get_state()
        self.stop = StopRequest(announce=group.is_main)
        self.halt = ""  # the stop request all ranks agreed on (see poll)
        self.threads = ThreadGovernor(config.train.threads, group.local_world_size)

    def setup(self, src_vocab: int, tgt_vocab: int) -> None:
        cfg = self.config.train
        torch.manual_seed(cfg.seed)
        self.model = build_translator(self.config.model, src_vocab, tgt_vocab).to(self.device)
        self.forward = self.group.wrap(self.model)  # training passes; DDP averages gradients
        if self.group.rank:  # each rank draws its own dropout; rank 0 keeps the 1-process stream
            torch.manual_seed(cfg.seed + self.group.rank)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=cfg.lr, betas=cfg.adam_betas, weight_decay=cfg.weight_decay
        )
        self.scheduler = Schedule(self.optimizer, cfg)

    def resume(self, ckpt: Checkpoint) -> None:
        """Restore everything ``save("last")`` wrote; metrics after that step are dropped."""
        where = self.run_dir / "last.json"
        try:
            self.model.load_state_dict(ckpt.model)
            self.optimizer.load_state_dict(ckpt.optimizer)
            self.scheduler.load_state_dict(ckpt.state["scheduler"])
            self.progress = Progress(**ckpt.state["progress"])
            # a finished run gets here only when its budget was raised: it goes on
            self.progress.finished, self.progress.stop_reason = False, ""
            self.epoch_state = ckpt.extra["epoch_generator"]
            self._restore_rng(ckpt.extra, ckpt.state.get("world_size", 1))
        except (KeyError, TypeError, RuntimeError, ValueError) as err:
            raise ValueError(f"{where}: cannot resume from this checkpoint ({err})") from None
        metrics = self.run_dir / "metrics.jsonl"
        self.history = read_history(metrics, self.progress.step)
        if self.group.is_main:
            write_history(metrics, self.history)
        self.started -= self.progress.elapsed_s

    def _restore_rng(self, extra: dict, saved_world: int) -> None:
        """This rank's dropout generator(s) as saved; a new world size keeps fresh ones."""
        world = self.group.world_size
        if saved_world != world:
            self.echo(
                f"warning: this run was saved by {saved_world} process(es) and resumes on "
                f"{world}: the batches stay the same (train.batch_size is global) but dropout "
                f"draws and rounding change, so it will not repeat a {saved_world}-process run"
            )
        names = ["torch_rng", *(["cuda_rng"] if self.device.type == "cuda" else [])]
        for name in names:
            key = _rank_key(name, self.group.rank)
            if key not in extra:
                continue
            if name == "torch_rng":
                torch.set_rng_state(extra[key])
            else:
                torch.cuda.set_rng_state(extra[key], self.device)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def out_of_budget(self) -> str:
        cfg = self.config.train
        if cfg.max_steps is not None and self.progress.step >= cfg.max_steps:
            return f"max_steps={cfg.max_steps} reached"
        if cfg.max_minutes is not None and self.elapsed() >= cfg.max_minutes * 60:
            return f"max_minutes={cfg.max_minutes} reached"
        return ""

    def save(self, name: str) -> None:
        """Save a checkpoint (rank 0 writes it; every rank must call this: it gathers RNGs)."""
        self.progress.elapsed_s = self.elapsed()
        state = {
            "progress": asdict(self.progress),
            "scheduler": self.scheduler.state_dict(),
            "world_size": self.group.world_size,
        }
        extra = {"epoch_generator": self.epoch_state, **self._rng_states("torch_rng")}
        if self.device.type == "cuda":  # dropout on the GPU draws from its own generator
            extra.update(self._rng_states("cuda_rng"))
        if not self.group.is_main:
            return
        last = name == "last"
        save_checkpoint(
            self.run_dir,
            name,
            self.model.state_dict(),
            state,
            optimizer=self.optimizer if last else None,
            extra=extra,
            keep_previous=last,
        )

    def _rng_states(self, name: str) -> dict[str, torch.Tensor]:
        """Every rank's generator state, keyed ``name`` (rank 0) and ``name.R``."""
        if name == "torch_rng":
            state = torch.get_rng_state()
        else:
            state = torch.cuda.get_rng_state(self.device)
        return {_rank_key(name, r): s for r, s in enumerate(self.group.gather(state))}

    def run_validation(self, train_loss: float, data) -> None:
        """Rank 0 validates (the others wait for its scores); every rank applies them."""
        keys = ("valid_loss", "valid_ppl", "valid_bleu")
        mine = validate(self.model, *data, self.config, self.device) if self.group.is_main else {}
        scores = dict(zip(keys, self.group.broadcast([mine.get(k) for k in keys]), strict=True))
        p = self.progress
        improved = scores["valid_bleu"] > p.best_bleu
        if improved:
            p.best_bleu, p.best_step, p.bad_validations = scores["valid_bleu"], p.step, 0
        else:
            p.bad_validations += 1
        self.scheduler.after_validation(scores["valid_bleu"])
        row = {
            "epoch": p.epoch,
            "step": p.step,
            "train_loss": train_loss,
            **scores,
            "lr": self.optimizer.param_groups[0]["lr"],
            "elapsed_s": round(self.elapsed(), 1),
        }
        patience = self.config.train.early_stopping
        if patience is not None and p.bad_validations >= patience:
            p.finished, p.stop_reason = True, f"no BLEU gain in {patience} validations"
        p.pending_loss, p.pending_tokens = 0.0, 0
        # The row goes first: resuming drops rows past the checkpoint's step and redoes them.
        self.history.append(row)
        if self.group.is_main:
            with open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8") as log:
                log.write(json.dumps(row) + "\n")
        if improved:
            self.save("best")
        self.save("last")
        if self.group.is_main:
            learning_curve(self.history, path=self.run_dir / "learning_curve.png")
        self.echo(
            f"epoch {p.epoch} step {p.step}: train loss {train_loss:.3f}, valid loss "
            f"{scores['valid_loss']:.3f}, ppl {scores['valid_ppl']:.2f}, BLEU "
            f"{scores['valid_bleu']:.2f}{' (best)' if improved else ''}, lr {row['lr']:.2g}"
        )

    def train_step(self, batch: Batch, total_tokens: int, counts: bool = True) -> float | None:
        """One optimizer step on this rank's share of a global batch of ``total_tokens``.

        The share's mean loss is weighted by ``W * share_tokens / total_tokens``
        (0 for a stand-in share that ``counts`` nothing), so the gradient DDP
        averages over the W ranks is that of the global batch's mean loss; with
        one process the weight is exactly 1. Returns the global batch's mean
        loss, or None when the step was skipped for a non-finite loss or gradient.
        """
        cfg, p = self.config.train, self.progress
        loss = _loss(self.forward, batch, cfg.label_smoothing, cfg.teacher_forcing)
        share = batch.num_target_tokens if counts else 0
        loss = loss * (share * self.group.world_size / total_tokens)
        self.optimizer.zero_grad(set_to_none=True)
        p.epoch_batches_done += 1
        value = self.group.mean(loss.item())
        if math.isfinite(value):
            loss.backward()
            norm = self._grad_norm(cfg.clip)
            if not math.isfinite(norm):
                self.optimizer.zero_grad(set_to_none=True)
                return self._skip(f"gradient norm is {norm}")
        else:
            return self._skip(f"loss is {value}")
        self.optimizer.step()
        self.scheduler.after_step()
        p.step += 1
        p.nonfinite_streak = 0
        p.pending_loss += value * total_tokens
        p.pending_tokens += total_tokens
        return value

    def _grad_norm(self, clip: float | None) -> float:
        params = [q for q in self.model.parameters() if q.grad is not None]
        if clip is not None:
            return float(torch.nn.utils.clip_grad_norm_(params, clip))
        return float(torch.nn.utils.get_total_norm([q.grad for q in params]))

    def _skip(self, why: str) -> None:
        p, limit = self.progress, self.config.train.max_nonfinite
        p.nonfinite_streak += 1
        p.skipped_steps += 1
        self.echo(
            f"warning: epoch {p.epoch} batch {p.epoch_batches_done}: {why}; step skipped "
            f"({p.nonfinite_streak} in a row, {limit} stop training)"
        )
        if p.nonfinite_streak >= limit:
            raise TrainingError(
                f"{limit} non-finite losses/gradients in a row at step {p.step}: training "
                f"stopped. The last good checkpoint is kept in {self.run_dir / 'last.json'}; "
                "lower train.lr, set train.clip, or check the data"
            )
        return None

    def poll(self) -> str:
        """Why training must stop now ('' = go on), agreed by all ranks; sets :attr:`halt`.

        Every rank calls this at the same points (before an epoch, after each
        step), so a signal that reached some ranks, or a clock that ran out on
        one, stops all of them at the same step.
        """
        reason = self.out_of_budget()
        budget, signalled = self.group.any(bool(reason), bool(self.stop.requested))
        if signalled and not self.halt:
            self.halt = self.stop.requested or "a stop request to another process"
        if budget and not reason:  # only the clock differs between ranks
            reason = f"max_minutes={self.config.train.max_minutes} reached"
        return reason

    def check_replicas(self) -> None:
        """Say whether every rank holds the same weights (DDP keeps them in step)."""
        if self.group.distributed:
            world = self.group.world_size
            if self.group.same_everywhere(self.model):
                self.echo(f"weights identical on all {world} processes")
            else:
                self.echo(f"warning: the weights differ between the {world} processes")

    def validate_pending(self, valid_data) -> None:
        """Validate if any step was taken since the last validation."""
        p = self.progress
        if p.pending_tokens:
            self.run_validation(p.pending_loss / p.pending_tokens, valid_data)

    def train_epoch(self, train_ex: Examples, valid_data) -> None:
        """Train (the rest of) the current epoch; validate at its end or every ``valid_every``."""
        cfg, p = self.config.train, self.progress
        self.generator.set_state(self.epoch_state)
        batches = bucket_batches(
            train_ex, cfg.batch_size, generator=self.generator, pool_batches=cfg.pool_batches
        )
        bar = tqdm(
            total=len(batches),
            initial=p.epoch_batches_done,
            desc=f"epoch {p.epoch}",
            unit="batch",
            disable=not self.bar,
            dynamic_ncols=True,
            mininterval=0.5,
        )
        tick, tokens = time.monotonic(), 0
        for indices in batches[p.epoch_batches_done :]:
            if p.stop_reason or p.finished or self.halt:
                break
            mine = self.group.share(indices)  # an idle rank joins the all-reduce with weight 0
            batch = make_batch(train_ex, mine or indices[:1]).to(self.device)
            total = _target_tokens(train_ex, indices)
            value = self.train_step(batch, total, counts=bool(mine))
            self.threads.tick()
            bar.update(1)
            if value is not None:
                tokens += total
                rate = tokens / max(time.monotonic() - tick, 1e-9)
                bar.set_postfix(
                    loss=f"{value:.3f}",
                    tok_s=f"{rate:.0f}",
                    threads=self.threads.threads,
                    refresh=False,
                )
                if cfg.valid_every and p.step % cfg.valid_every == 0:
                    self.validate_pending(valid_data)
                elif cfg.checkpoint_every and p.step % cfg.checkpoint_every == 0:
                    self.save("last")
            p.stop_reason = p.stop_reason or self.poll()
        bar.close()
        if p.epoch_batches_done == len(batches):
            self.epoch_state = self.generator.get_state()
            p.epoch_batches_done = 0
            if not cfg.valid_every:
                self.validate_pending(valid_data)


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
        resume: continue the run in ``run_dir`` from ``last.json``, or reuse it
            as-is when it has finished (same config required).
        overwrite: delete a previous run's files in ``run_dir`` first.
        progress_bar: show a tqdm bar (loss, tokens/s, ETA).
        echo: where one-line progress messages go.

    Under ``torchrun`` every process calls this and trains its share of each
    batch (:mod:`.distributed`); rank 0 alone echoes, writes ``run_dir`` and
    returns a summary with ``main`` True.

    Raises:
        RunInUse: another training holds ``run_dir``'s lock (:mod:`.runlock`).
        ValueError: ``run_dir`` holds another run, or the data/config is unusable.
    """
    run_dir = Path(run_dir)
    if config.name is None:  # saved configs always carry a name
        config = config.model_copy(update={"name": run_dir.name})
    with join(resolve_device(config.train.device)) as group:  # torchrun's job, or just us
        if not group.is_main:  # rank 0 alone logs, shows progress and writes
            echo, progress_bar = _silent, False
        # the lock comes before anything in run_dir is written
        lock = run_lock(run_dir, warn=echo) if group.is_main else contextlib.nullcontext()
        with lock:
            trainer = _Trainer(config, run_dir, echo, progress_bar, group)
            return _train_locked(trainer, resume, overwrite)


def _silent(_line: str) -> None:
    pass


def _train_locked(trainer: _Trainer, resume: bool, overwrite: bool) -> TrainSummary:
    config, run_dir, echo, group = trainer.config, trainer.run_dir, trainer.echo, trainer.group
    with group.main_first():  # rank 0 prepares the folder, then the others read it
        if group.is_main:
            resuming = prepare_folder(
                run_dir, config, resume=resume, overwrite=overwrite, echo=echo
            )
            if not resuming:  # rows of a run killed before saving
                (run_dir / "metrics.jsonl").unlink(missing_ok=True)
        else:
            resuming = _shared_checkpoint_exists(run_dir)
    ckpt = load_latest(run_dir / "last.json", warn=echo) if resuming else None
    if ckpt is not None and ckpt.state.get("progress", {}).get("finished"):
        progress = Progress(**ckpt.state["progress"])
        if not _budget_left(config.train, progress):
            echo(
                f"{run_dir} holds a finished run with this config; reusing it (--overwrite "
                "retrains; a larger train.epochs/max_steps/max_minutes/early_stopping goes on)"
            )
            history = read_history(run_dir / "metrics.jsonl", math.inf)
            return TrainSummary(run_dir, progress, True, history, main=group.is_main)
        echo(f"{run_dir} finished ({progress.stop_reason}); the new budget lets it go on")
    adapts = (
        " (auto: fewer while other processes load the CPUs)" if trainer.threads.adaptive else ""
    )
    echo(
        f"training {config.name} on {trainer.device}{group.describe()} with "
        f"{trainer.threads.threads} thread(s){adapts} into {run_dir}{_batch_note(config, group)}"
    )
    with trainer.stop:
        return _run(trainer, ckpt)


def _shared_checkpoint_exists(run_dir: Path) -> bool:
    """On a rank other than 0: whether rank 0's run folder holds a checkpoint."""
    if not (run_dir / "config.yaml").is_file():
        raise ValueError(
            f"{run_dir}/config.yaml, written by rank 0, is not visible here: the run folder "
            "must be on a file system all machines share (see docs/distributed.md)"
        )
    return checkpoint_exists(run_dir / "last.json")


def _batch_note(config: RunConfig, group: Group) -> str:
    if not group.distributed:
        return ""
    size = config.train.batch_size
    return f"; train.batch_size {size} sentences per step in all, ~{size / group.world_size:g} each"


def _run(trainer: _Trainer, ckpt: Checkpoint | None) -> TrainSummary:
    config, run_dir, echo = trainer.config, trainer.run_dir, trainer.echo
    src_tok, tgt_tok, train_ex, valid_ex, valid_refs = _tokenize(
        config, run_dir, ckpt is not None, echo, trainer.group
    )
    trainer.setup(src_tok.vocab_size, tgt_tok.vocab_size)
    if ckpt is not None:
        trainer.resume(ckpt)
        echo(f"resumed at epoch {trainer.progress.epoch}, step {trainer.progress.step}")
    p = trainer.progress
    valid_data = (valid_ex, valid_refs, tgt_tok)
    while not (p.finished or p.stop_reason or trainer.halt):
        p.stop_reason = trainer.poll()
        if trainer.halt:
            break
        if p.epoch_batches_done == 0 and not p.stop_reason:
            if p.epoch >= config.train.epochs:
                p.stop_reason = f"epochs={config.train.epochs} done"
                break
            p.epoch += 1
        if not p.stop_reason:
            trainer.train_epoch(train_ex, valid_data)
    trainer.check_replicas()
    main = trainer.group.is_main
    if trainer.halt and not p.finished:
        p.stop_reason = ""  # the run goes on when resumed
        trainer.save("last")
        echo(
            f"interrupted ({trainer.halt}) at epoch {p.epoch}, step {p.step}; "
            f"checkpoint saved; continue with: attnkit train --resume {run_dir}"
        )
        return TrainSummary(run_dir, p, False, trainer.history, interrupted=True, main=main)
    trainer.validate_pending(valid_data)
    p.finished = True
    trainer.save("last")
    skipped = f"; {p.skipped_steps} step(s) skipped as non-finite" if p.skipped_steps else ""
    echo(
        f"stopped: {p.stop_reason}; best valid BLEU {p.best_bleu:.2f} at step {p.best_step} "
        f"({trainer.elapsed() / 60:.1f} min){skipped}"
    )
    cut_short = _cut_short(config.train, p, run_dir)
    if cut_short:
        echo(cut_short)
    return TrainSummary(run_dir, p, False, trainer.history, main=main)


def _cut_short(cfg: TrainConfig, p: Progress, run_dir: Path) -> str:
    """A plain warning when the time cap, not the step budget, ended a run that has both."""
    if (
        cfg.max_steps is None
        or p.step >= cfg.max_steps
        or not p.stop_reason.startswith("max_minutes")
    ):
        return ""
    return (
        f"note: the time cap (train.max_minutes={cfg.max_minutes:g}) stopped training at step "
        f"{p.step} of train.max_steps={cfg.max_steps}: this machine was slower or busier than "
        "the config assumes, so the result will fall short of the one recorded for it; "
        f"`attnkit train --resume {run_dir} --train.max_minutes N` with a larger N "
        "finishes the budget"
    )


def _rank_key(name: str, rank: int) -> str:
    """Checkpoint key of a rank's generator state: ``name`` for rank 0, ``name.R`` for others."""
    return name if rank == 0 else f"{name}.{rank}"
