"""Validated run configurations (pydantic v2) for training and translating.

A run config is YAML with five sections — ``data``, ``tokenizer``, ``model``
(:data:`attnkit.nmt.models.registry.ModelConfig`), ``train``, ``decode`` — plus an
optional ``name``. Every section forbids unknown keys. :meth:`RunConfig.load`
turns any validation failure into one ``ValueError`` whose lines read
``section.key: what is allowed, got VALUE``, and applies dotted overrides
(``model.hidden_size=128``) through the same validation.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .models.registry import ARCHITECTURES, ModelConfig, default_model_config

__all__ = [
    "DataConfig",
    "DecodeConfig",
    "RunConfig",
    "SplitFiles",
    "TokenizerConfig",
    "ToyConfig",
    "TrainConfig",
    "apply_overrides",
    "config_changes",
    "format_validation_error",
    "leaf_keys",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SplitFiles(_Section):
    """One split of a user corpus: two line-aligned files, or one TSV.

    Paths may be gzipped; relative paths are relative to the config file.
    """

    src: str | None = None
    tgt: str | None = None
    tsv: str | None = None
    src_column: int = Field(0, ge=0)
    tgt_column: int = Field(1, ge=0)

    @model_validator(mode="after")
    def _one_layout(self) -> SplitFiles:
        pair = self.src is not None and self.tgt is not None
        if pair == (self.tsv is not None) or (self.src is None) != (self.tgt is None):
            raise ValueError("give either both 'src' and 'tgt' files or one 'tsv' file")
        if self.tsv is not None and self.src_column == self.tgt_column:
            raise ValueError(f"src_column and tgt_column must differ, both are {self.src_column}")
        return self


class ToyConfig(_Section):
    """A synthetic task (see :mod:`attnkit.nmt.data.toy`): copy or reverse a symbol sequence."""

    task: Literal["copy", "reverse"]
    num_symbols: int = Field(20, gt=0, le=10000)
    min_len: int = Field(3, gt=0)
    max_len: int = Field(12, gt=0)
    train_size: int = Field(5000, gt=0)
    valid_size: int = Field(200, gt=0)
    test_size: int = Field(200, gt=0)
    seed: int = 0

    @model_validator(mode="after")
    def _lengths(self) -> ToyConfig:
        if self.min_len > self.max_len:
            raise ValueError(f"min_len ({self.min_len}) must be <= max_len ({self.max_len})")
        return self


class DataConfig(_Section):
    """Where the parallel text comes from and which direction to translate.

    Exactly one of ``bundled`` (Multi30k Task 1), ``toy`` or user files
    (``train`` + ``valid``, optional ``test``; ``valid``/``test`` beside
    ``bundled`` or ``toy`` are an error, not silently ignored). ``src_lang -> tgt_lang`` is the
    direction; for the bundled data they pick the files (``de`` or ``en``).
    Training pairs longer than ``max_src_len`` / ``max_tgt_len`` tokens are
    dropped; ``max_train_pairs`` keeps only the first N training pairs.
    ``valid_holdout: N`` (user files without ``valid``) takes N training pairs,
    evenly spread (every ``len(train) // N``-th pair), out of training as the
    validation split: for a corpus that comes as one file, such as Tatoeba.
    """

    bundled: Literal["multi30k"] | None = None
    toy: ToyConfig | None = None
    train: SplitFiles | None = None
    valid: SplitFiles | None = None
    test: SplitFiles | None = None
    src_lang: str = "de"
    tgt_lang: str = "en"
    max_src_len: int | None = Field(50, gt=0)
    max_tgt_len: int | None = Field(50, gt=0)
    max_train_pairs: int | None = Field(None, gt=0)
    valid_holdout: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _one_source(self) -> DataConfig:
        chosen = [f"data.{k}" for k in ("bundled", "toy", "train") if getattr(self, k) is not None]
        if not chosen:
            raise ValueError("no data source: set data.bundled, data.toy or data.train")
        if len(chosen) > 1:
            raise ValueError(f"got both {' and '.join(chosen)} (set only one data source)")
        if self.valid_holdout is not None and (self.train is None or self.valid is not None):
            raise ValueError("valid_holdout needs 'train' files and no 'valid' files")
        if self.train is not None and self.valid is None and self.valid_holdout is None:
            raise ValueError("'valid' files (or valid_holdout) are required with 'train' files")
        for split in ("valid", "test"):  # they belong to data.train; elsewhere never read
            if self.train is None and getattr(self, split) is not None:
                raise ValueError(
                    f"got both {chosen[0]} and data.{split} (data.{split} files go with "
                    f"data.train; {chosen[0]} has its own {split} split)"
                )
        if self.bundled == "multi30k" and {self.src_lang, self.tgt_lang} != {"de", "en"}:
            raise ValueError(
                f"multi30k has languages de and en, got src_lang={self.src_lang!r} "
                f"tgt_lang={self.tgt_lang!r}"
            )
        return self


class TokenizerConfig(_Section):
    """Subword (sentencepiece) or word-level tokenization, trained on the training split.

    ``joint: true`` trains one model on source + target text; ``false`` one per side.
    """

    kind: Literal["sentencepiece", "word"] = "sentencepiece"
    vocab_size: int = Field(8000, ge=8)
    joint: bool = True
    model_type: Literal["unigram", "bpe"] = "unigram"
    character_coverage: float = Field(1.0, gt=0, le=1)


class TrainConfig(_Section):
    """Optimisation: Adam, clipping, label smoothing, lr schedule, early stopping, budgets.

    ``lr_schedule: plateau`` multiplies the learning rate by ``lr_decay`` when
    validation BLEU has not improved for ``lr_patience`` validations;
    ``inverse_sqrt`` (Vaswani et al. 2017, eq. 3, with the peak set by ``lr``)
    raises it linearly to ``lr`` over ``warmup_steps`` steps, then decays it as
    ``lr * sqrt(warmup_steps / step)``.

    ``checkpoint_every`` also saves the resumable ``last`` checkpoint every N
    steps between validations. A step whose loss or gradient is not finite is
    skipped with a warning; ``max_nonfinite`` such steps in a row stop training.

    ``threads`` is the number of CPU threads torch uses (intra-op). 0 means:
    ``OMP_NUM_THREADS`` when it is set, else the CPUs this process may use
    (shared among the ``torchrun`` processes on the machine), never more than
    torch's own setting. The default ``auto`` starts there and, every 2 s,
    gives back the cores other processes are using (a busy core costs a team
    of spin-waiting threads far more than its share; see
    :mod:`attnkit.nmt.training.threads`). Set a number (e.g. 1) for runs that repeat
    bit for bit.

    Budgets and bookkeeping (``epochs``, ``max_steps``, ``max_minutes``,
    ``early_stopping``, ``valid_every``, ``checkpoint_every``,
    ``valid_bleu_sentences``) may change when a run is resumed; a finished run
    whose budget is raised trains on. ``max_minutes`` counts the whole run's
    training time, earlier sessions included.
    """

    batch_size: int = Field(64, gt=0)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    epochs: int = Field(20, gt=0)
    clip: float | None = Field(1.0, gt=0)
    label_smoothing: float = Field(0.1, ge=0, lt=1)
    teacher_forcing: float = Field(1.0, ge=0, le=1)
    adam_betas: tuple[float, float] = (0.9, 0.999)
    lr_schedule: Literal["plateau", "inverse_sqrt"] = "plateau"
    warmup_steps: int = Field(4000, gt=0)
    lr_decay: float = Field(0.5, gt=0, lt=1)
    lr_patience: int = Field(1, ge=0)
    min_lr: float = Field(1e-5, ge=0)
    early_stopping: int | None = Field(3, gt=0)
    valid_every: int | None = Field(None, gt=0)
    checkpoint_every: int | None = Field(None, gt=0)
    max_nonfinite: int = Field(5, gt=0)
    valid_bleu_sentences: int | None = Field(None, gt=0)
    max_steps: int | None = Field(None, gt=0)
    max_minutes: float | None = Field(None, gt=0)
    pool_batches: int = Field(50, gt=0)
    seed: int = 1
    threads: Annotated[int, Field(ge=0)] | Literal["auto"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "auto"


class DecodeConfig(_Section):
    """Search settings for validation BLEU (always greedy) and translate/evaluate.

    Inputs longer than ``max_input_len`` tokens are truncated with a warning;
    ``None`` means the training limit ``data.max_src_len``, or 256 tokens.
    ``length_penalty`` (alpha) and ``coverage_penalty`` (beta) are GNMT's
    (Wu et al. 2016, eq. 14), for beam search; ``no_repeat_ngram: n`` forbids
    repeating any n-gram of the output (0 = off).
    """

    beam_size: int = Field(5, gt=0)
    length_penalty: float = Field(1.0, ge=0)
    max_len_a: float = Field(1.5, ge=0)
    max_len_b: int = Field(10, ge=0)
    coverage_penalty: float = Field(0.0, ge=0)
    no_repeat_ngram: int = Field(0, ge=0)
    batch_size: int = Field(64, gt=0)
    max_input_len: int | None = Field(None, gt=0)


class RunConfig(_Section):
    """A complete run: data, tokenizer, model, training and decoding settings."""

    name: str | None = None
    data: DataConfig
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    model: ModelConfig = Field(default_factory=default_model_config)
    train: TrainConfig = Field(default_factory=TrainConfig)
    decode: DecodeConfig = Field(default_factory=DecodeConfig)

    @model_validator(mode="after")
    def _shared_vocabulary(self) -> RunConfig:
        if getattr(self.model, "share_embeddings", False) and not self.tokenizer.joint:
            raise ValueError(
                "model.share_embeddings: true needs one joint vocabulary; set "
                "tokenizer.joint: true or model.share_embeddings: false"
            )
        return self

    @classmethod
    def from_dict(
        cls, raw: Any, overrides: Sequence[str] = (), source: str = "config"
    ) -> RunConfig:
        """Validate a plain dict (after applying ``key.path=value`` overrides).

        Raises:
            ValueError: one line per problem, ``key.path: what is allowed, got VALUE``.
        """
        if not isinstance(raw, dict):
            raise ValueError(f"{source}: the top level must be a mapping of sections, got {raw!r}")
        try:
            raw = apply_overrides(raw, overrides)
            return cls.model_validate(raw)
        except ValidationError as err:
            blamed = _blamed_overrides(err, overrides)
            where = f"override {' '.join(blamed)}" if blamed else source
            raise ValueError(f"invalid {where}:\n{format_validation_error(err)}") from None
        except RecursionError:
            raise ValueError(f"{source}: a value refers to itself (a YAML alias loop)") from None

    @classmethod
    def load(cls, path: str | Path, overrides: Sequence[str] = ()) -> RunConfig:
        """Read and validate a YAML config; relative data paths are resolved against its folder.

        Raises:
            FileNotFoundError: ``path`` does not exist.
            ValueError: bad YAML or an invalid value (the message names the key).
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"config file not found: {path}")
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as err:
            raise ValueError(f"{path}: not UTF-8 text (byte {err.start}: {err.reason})") from None
        except yaml.YAMLError as err:
            raise ValueError(f"{path}: not valid YAML ({err})") from None
        config = cls.from_dict(raw or {}, overrides, source=str(path))
        if config.name is None:
            config.name = path.stem
        config.resolve_paths(path.parent)
        return config

    def resolve_paths(self, base: Path) -> None:
        """Make the user corpus paths absolute, relative to ``base``."""
        for split in (self.data.train, self.data.valid, self.data.test):
            if split is None:
                continue
            for key in ("src", "tgt", "tsv"):
                value = getattr(split, key)
                if value is not None:
                    setattr(split, key, str((base / Path(value).expanduser()).resolve()))

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


def config_changes(before: RunConfig, after: RunConfig) -> list[tuple[str, Any, Any]]:
    """``(dotted key, value before, value after)`` for each value that differs, in key order."""
    old, new = _flat(before.model_dump(mode="json")), _flat(after.model_dump(mode="json"))
    return [(k, old.get(k), new.get(k)) for k in sorted({*old, *new}) if old.get(k) != new.get(k)]


def _flat(raw: Any, prefix: str = "") -> dict[str, Any]:
    """Nested sections as ``{"model.hidden_size": 64, ...}``."""
    if not isinstance(raw, dict):
        return {prefix.removesuffix("."): raw}
    return {
        k: v for name, value in raw.items() for k, v in _flat(value, f"{prefix}{name}.").items()
    }


def apply_overrides(raw: dict, overrides: Sequence[str]) -> dict:
    """Return a copy of ``raw`` with each ``a.b.c=value`` set (value parsed as YAML).

    Raises:
        ValueError: an override lacks ``=`` or walks through a non-section value.
    """
    result = _deep_copy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override must look like section.key=value, got {item!r}")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        node = result
        parts = key.split(".")
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise ValueError(f"override {key}: {where} is a value ({child!r}), not a section")
            node = child
        node[parts[-1]] = value
    return result


def _blamed_overrides(err: ValidationError, overrides: Sequence[str]) -> list[str]:
    """The overrides behind every error of ``err``; empty when some error is the file's own.

    An override ``a.b=v`` is behind an error at ``a.b``, below it (``a.b.c``) or
    above it (``a``, a whole section rejected for the value it set).
    """
    keys = {item.partition("=")[0]: item for item in overrides}
    blamed: list[str] = []
    for error in err.errors():
        where = ".".join(str(part) for part in _shown_loc(error["loc"]))
        found = [
            item
            for key, item in keys.items()
            if where and (f"{where}.".startswith(f"{key}.") or f"{key}.".startswith(f"{where}."))
        ]
        if not found:
            return []
        blamed += [item for item in found if item not in blamed]
    return blamed


def _deep_copy(raw: Any) -> Any:
    if isinstance(raw, dict):
        return {k: _deep_copy(v) for k, v in raw.items()}
    return raw


def _section_models(annotation: Any) -> list[type[BaseModel]]:
    """The BaseModels inside ``annotation``: ``Model``, ``Model | None``, a tagged union."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _section_models(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _section_models(arg)]
    return []


def _arch_tag(loc: Sequence[Any]) -> bool:
    """Whether ``loc`` starts ``model.<arch tag>`` (pydantic names the union member chosen)."""
    return len(loc) > 1 and loc[0] == "model" and loc[1] in ARCHITECTURES


def _shown_loc(loc: Sequence[Any]) -> Sequence[Any]:
    """An error location as the user writes the key: ``model.<arch tag>.x`` -> ``model.x``."""
    return loc[:1] + loc[2:] if _arch_tag(loc) else loc


def _model_at(loc: Sequence[Any]) -> type[BaseModel] | None:
    """The section model at an error location (architecture tags resolved)."""
    if _arch_tag(loc):
        return _model_at(loc[2:]) if len(loc) > 2 else ARCHITECTURES[loc[1]][0]
    models: list[type[BaseModel]] = [RunConfig]
    for part in loc:
        field = models[0].model_fields.get(str(part)) if len(models) == 1 else None
        models = _section_models(field.annotation) if field else []
    return models[0] if len(models) == 1 else None


def leaf_keys(model: type[BaseModel] = RunConfig, prefix: str = "") -> Iterator[str]:
    """Dotted names of every settable value, e.g. ``model.hidden_size``.

    A section that is a union (``model``: one config per architecture) lists
    the keys of every member once.
    """
    seen: set[str] = set()
    for name, field in model.model_fields.items():
        nested = _section_models(field.annotation)
        keys = (
            [f"{prefix}{name}"]
            if not nested
            else [k for member in nested for k in leaf_keys(member, f"{prefix}{name}.")]
        )
        for key in keys:
            if key not in seen:
                seen.add(key)
                yield key


_COMPARISONS = (
    ("greater than or equal to", ">="),
    ("less than or equal to", "<="),
    ("greater than", ">"),
    ("less than", "<"),
)


def _key_text(part: Any) -> str:
    """A key as written in a message: quoted when empty or holding odd characters."""
    if isinstance(part, int) or (isinstance(part, str) and part.isprintable() and part.strip()):
        return str(part)
    return repr(part)


def format_validation_error(err: ValidationError) -> str:
    """One line per error: ``key.path: what is allowed, got VALUE``."""
    lines = []
    for item in err.errors():
        loc = ".".join(_key_text(p) for p in _shown_loc(item["loc"])) or "(top level)"
        kind, message = item["type"], item["msg"]
        if kind in ("union_tag_invalid", "union_tag_not_found"):
            tag = item["input"].get("arch") if isinstance(item["input"], dict) else None
            allowed = " | ".join(ARCHITECTURES)
            lines.append(f"{loc}.arch: must be {allowed}, got {tag!r}")
        elif kind == "extra_forbidden":
            parent = _model_at(item["loc"][:-1])
            allowed = ", ".join(parent.model_fields) if parent else "?"
            lines.append(f"{loc}: unknown key (allowed here: {allowed}), got {item.get('input')!r}")
        elif kind == "missing":
            lines.append(f"{loc}: required key is missing")
        elif kind == "value_error":
            lines.append(f"{loc}: {message.removeprefix('Value error, ')}")
        else:
            message = message.replace("Input should be", "must be")
            for words, sign in _COMPARISONS:
                message = message.replace(words, sign)
            lines.append(f"{loc}: {message}, got {item.get('input')!r}")
    return "\n".join(f"  {line}" for line in lines)
