"""The ``train`` section: optimisation, schedule, budgets, threads, device and precision."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from .guided_alignment import GuidedAlignmentConfig
from .section import Seed, _Section, shown
from .subword_sampling import SubwordSamplingConfig

_Beta = Annotated[float, Field(ge=0, lt=1)]  # an Adam beta (Kingma & Ba 2015, alg. 1)

# the settings each lr_schedule reads besides lr (:mod:`attnkit.nmt.training.schedule`)
SCHEDULE_KEYS: dict[str, tuple[str, ...]] = {
    "plateau": ("lr_decay", "lr_patience", "min_lr"),
    "inverse_sqrt": ("warmup_steps",),
    "linear": ("warmup_steps", "min_lr"),
}


class TrainConfig(_Section):
    """Optimisation: Adam, clipping, label smoothing, lr schedule, early stopping, budgets.

    ``lr_schedule: plateau`` multiplies the learning rate by ``lr_decay`` when
    validation BLEU has not improved for more than ``lr_patience`` validations
    in a row (any new best counts, as for early stopping);
    ``inverse_sqrt`` (Vaswani et al. 2017, eq. 3, with the peak set by ``lr``)
    raises it linearly to ``lr`` over ``warmup_steps`` steps, then decays it as
    ``lr * sqrt(warmup_steps / step)``; ``linear`` has the same warm-up, then
    falls in a straight line to ``min_lr`` at ``max_steps`` (which it needs), so
    a fixed step budget ends on a low rate (:mod:`attnkit.nmt.training.schedule`; a run
    that ``epochs`` ends first ends with a note saying so);
    a budget raised on resume redraws the line to the new ``max_steps``, so
    the rate rises again to where that line stands. A schedule setting the chosen
    schedule does not read (:data:`SCHEDULE_KEYS`), such as ``warmup_steps`` with
    ``plateau``, is warned about by ``attnkit train``. ``max_steps: auto``
    (linear only, with ``max_minutes``) sizes the budget to the machine: the
    warm-up is timed and ``max_steps`` set to the steps that fill 95% of
    ``max_minutes`` (:mod:`attnkit.nmt.training.step_budget`); the number is
    printed and kept in the checkpoints, and lowered at a validation where
    the steps since have been slower.

    ``checkpoint_every`` also saves the resumable ``last`` checkpoint every N
    steps between validations. A step whose loss or gradient is not finite is
    skipped with a warning; ``max_nonfinite`` such steps in a row stop training.

    ``average_last: N`` (0, the default, is off) keeps the model weights of the
    last N validations as snapshots (``RUN/snapshots/``) and, when training
    ends, writes the ``averaged`` checkpoint: their element-wise mean
    (:mod:`attnkit.nmt.runs.averaging`), validated and compared with ``best``.

    ``threads`` is the number of CPU threads torch uses (intra-op). 0 means:
    ``OMP_NUM_THREADS`` when it is set, else the CPUs this process may use
    (shared among the ``torchrun`` processes on the machine), never more than
    torch's own setting. The default ``auto`` starts there and, every 2 s,
    gives back the cores other processes are using (a busy core costs a team
    of spin-waiting threads far more than its share; see
    :mod:`attnkit.nmt.training.threads`). Set a number (e.g. 1) for runs that repeat
    bit for bit.

    ``precision`` is the arithmetic of the forward pass (:mod:`attnkit.nmt.precision`):
    ``bf16`` runs matrix products under ``torch.autocast`` in bfloat16 with
    float32 weights, optimizer state, loss and softmax; ``fp32`` is plain
    float32; ``auto`` is bf16 where the device makes it faster (a CPU with
    ``avx512_bf16``/``amx_bf16``, a CUDA GPU with bf16), else fp32.
    Checkpoints are float32 either way.

    ``init_from`` fine-tunes: a new run whose model weights start from a trained
    run folder's checkpoint (``init_checkpoint``: ``auto``, the default, as
    ``attnkit translate`` takes it, or ``best``, ``last``, ``averaged``), on this
    config's data, with a fresh optimizer, schedule, counters and early stopping
    (:mod:`attnkit.nmt.training.init_from`). The run takes that run's tokenizers
    and needs its model section but for dropout. A relative path is relative to
    the config file (on the command line, to the current folder). Neither may
    change on ``--resume``, which continues the run from its own checkpoint.

    ``subword_sampling`` trains each epoch on a new sampled segmentation of the
    training pairs (subword regularization, Kudo 2018;
    :mod:`attnkit.nmt.config.subword_sampling`); off by default.

    Budgets and bookkeeping (``epochs``, ``max_steps``, ``max_minutes``,
    ``early_stopping``, ``valid_every``, ``checkpoint_every``,
    ``valid_bleu_sentences``, ``average_last``) may change when a run is resumed, and so may
    ``threads``, ``device`` and ``precision`` (the machine's, not the model's:
    the run goes on, but no longer repeats bit for bit); a finished run
    whose budget is raised trains on. ``max_minutes`` counts the whole run's
    training time, earlier sessions included (not the tokenizers' training or
    the token store's build before the first step).
    """

    batch_size: int = Field(64, gt=0)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    epochs: int = Field(20, gt=0)
    clip: float | None = Field(1.0, gt=0)
    label_smoothing: float = Field(0.1, ge=0, lt=1)
    teacher_forcing: float = Field(1.0, ge=0, le=1)
    adam_betas: tuple[_Beta, _Beta] = (0.9, 0.999)
    lr_schedule: Literal["plateau", "inverse_sqrt", "linear"] = "plateau"
    warmup_steps: int = Field(4000, gt=0)
    lr_decay: float = Field(0.5, gt=0, lt=1)
    lr_patience: int = Field(1, ge=0)
    min_lr: float = Field(1e-5, ge=0)
    early_stopping: int | None = Field(3, gt=0)
    valid_every: int | None = Field(None, gt=0)
    checkpoint_every: int | None = Field(None, gt=0)
    average_last: int = Field(0, ge=0)
    max_nonfinite: int = Field(5, gt=0)
    valid_bleu_sentences: int | None = Field(None, gt=0)
    max_steps: Annotated[int, Field(gt=0)] | Literal["auto"] | None = None
    max_minutes: float | None = Field(None, gt=0)
    pool_batches: int = Field(50, gt=0)
    seed: Seed = 1
    threads: Annotated[int, Field(ge=0)] | Literal["auto"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    init_from: str | None = None
    init_checkpoint: Literal["auto", "best", "last", "averaged"] = "auto"
    guided_alignment: GuidedAlignmentConfig | None = None
    subword_sampling: SubwordSamplingConfig | None = None

    def unused_schedule_keys(self) -> list[str]:
        """The schedule settings this section sets off their defaults (in the file or an
        override) that its ``lr_schedule`` does not read (:data:`SCHEDULE_KEYS`):
        ``warmup_steps`` with ``plateau``, which has no warm-up; ``lr_decay``,
        ``lr_patience`` and, for ``inverse_sqrt``, ``min_lr`` with the per-step schedules."""
        used = SCHEDULE_KEYS[self.lr_schedule]
        every = dict.fromkeys(key for keys in SCHEDULE_KEYS.values() for key in keys)
        return [key for key in every if key not in used and self._set_off_default(key)]

    def _set_off_default(self, key: str) -> bool:
        """``key`` is given and not its default (a whole saved config.yaml, copied to start
        a new run, gives every key: only a value someone chose is worth a warning)."""
        default = type(self).model_fields[key].default
        return key in self.model_fields_set and getattr(self, key) != default

    @field_validator("adam_betas", mode="before")
    @classmethod
    def _two_betas(cls, value: object) -> object:
        """Two numbers, said with the form to write them in: pydantic's own messages were
        "must be a valid tuple" for ``0.9,0.98`` and "adam_betas.1: required key is
        missing" for ``[0.9]``."""
        if not isinstance(value, list | tuple) or len(value) != 2:
            raise ValueError(
                "must be two numbers [beta1, beta2] in [0, 1), e.g. [0.9, 0.98] "
                f"(--train.adam_betas '[0.9, 0.98]'), got {shown(value)}"
            )
        return value

    @model_validator(mode="after")
    def _linear_needs_a_step_budget(self) -> TrainConfig:
        if self.lr_schedule != "linear":
            return self
        if self.max_steps is None:
            raise ValueError(
                "train.lr_schedule linear decays to min_lr at train.max_steps: set max_steps"
            )
        if self.max_steps == "auto":
            return self._auto_budget_is_possible()
        if self.warmup_steps >= self.max_steps:
            raise ValueError(
                f"train.warmup_steps ({self.warmup_steps}) must be below train.max_steps "
                f"({self.max_steps}) for lr_schedule linear"
            )
        return self

    def _auto_budget_is_possible(self) -> TrainConfig:
        if self.max_minutes is None:
            raise ValueError(
                "train.max_steps auto fits the step budget to train.max_minutes: set max_minutes"
            )
        if self.warmup_steps < 20:
            raise ValueError(
                f"train.max_steps auto times the warm-up to size the budget: train.warmup_steps "
                f"must be 20 or more, got {self.warmup_steps}"
            )
        return self

    @model_validator(mode="after")
    def _auto_budget_needs_linear(self) -> TrainConfig:
        if self.max_steps == "auto" and self.lr_schedule != "linear":
            raise ValueError(
                "train.max_steps auto sizes the linear schedule to train.max_minutes; with "
                f"lr_schedule {self.lr_schedule} set max_minutes alone"
            )
        return self

    @model_validator(mode="after")
    def _guided_needs_teacher_forcing(self) -> TrainConfig:
        if self.guided_alignment is not None and self.teacher_forcing != 1.0:
            raise ValueError(
                "train.guided_alignment supervises the teacher-forced attention: it needs "
                f"train.teacher_forcing 1.0, got {self.teacher_forcing}"
            )
        return self

    @model_validator(mode="after")
    def _guided_keeps_one_segmentation(self) -> TrainConfig:
        if self.guided_alignment is not None and self.subword_sampling is not None:
            raise ValueError(
                "train.subword_sampling re-segments the training text each epoch, but "
                "train.guided_alignment's links are mapped onto one segmentation: use one of them"
            )
        return self
