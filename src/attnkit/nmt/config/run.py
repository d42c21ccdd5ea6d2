"""RunConfig: a whole run's settings, read from YAML and validated in one go."""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from ..models.registry import ModelConfig, default_model_config
from .data import DataConfig, TokenizerConfig
from .decode import DecodeConfig
from .errors import format_validation_error
from .overrides import (
    _blamed_overrides,
    anchor_paths,
    apply_overrides,
    override_list,
    switch_architecture,
)
from .section import _Section, shown
from .train import TrainConfig
from .yaml_text import dump_yaml, load_yaml


class RunConfig(_Section):
    """A complete run: data, tokenizer, model, training and decoding settings."""

    name: str | None = None
    data: DataConfig
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    model: ModelConfig = Field(default_factory=default_model_config)
    train: TrainConfig = Field(default_factory=TrainConfig)
    decode: DecodeConfig = Field(default_factory=DecodeConfig)

    @model_validator(mode="before")
    @classmethod
    def _empty_sections(cls, raw: Any) -> Any:
        """A section left empty (``train:`` with every key under it commented out) is
        YAML's null: it means the section's defaults, as leaving it out does."""
        if not isinstance(raw, dict):
            return raw
        sections = ("data", "tokenizer", "model", "train", "decode")
        return {k: {} if v is None and k in sections else v for k, v in raw.items()}

    @model_validator(mode="after")
    def _shared_vocabulary(self) -> RunConfig:
        if getattr(self.model, "share_embeddings", False) and not self.tokenizer.joint:
            raise ValueError(
                "model.share_embeddings: true needs one joint vocabulary; set "
                "tokenizer.joint: true or model.share_embeddings: false"
            )
        return self

    @model_validator(mode="after")
    def _sampling_needs_subwords(self) -> RunConfig:
        if self.train.subword_sampling is not None and self.tokenizer.kind != "sentencepiece":
            raise ValueError(
                "train.subword_sampling samples sentencepiece segmentations: it needs "
                f"tokenizer.kind: sentencepiece, got {self.tokenizer.kind}"
            )
        return self

    @model_validator(mode="after")
    def _full_context_needs_self_attention(self) -> RunConfig:
        guided = self.train.guided_alignment
        if guided is not None and guided.full_context and self.model.arch != "transformer":
            raise ValueError(
                "train.guided_alignment.full_context: true needs model.arch: transformer "
                f"(decoder self-attention to unmask); got model.arch: {self.model.arch}"
            )
        return self

    @model_validator(mode="after")
    def _guided_alignment_fits_the_model(self) -> RunConfig:
        """The supervised layer and heads exist in the model: a typo is a config error at
        once, not after the tokenizers and the token store are made."""
        guided = self.train.guided_alignment
        if guided is None:
            return self
        layers, heads = _cross_attention_layout(self.model)
        guided.decoder_layer(layers)  # each names the setting and the model's count
        guided.head_indices(heads)
        return self

    @model_validator(mode="after")
    def _lengths_fit_positions(self) -> RunConfig:
        """Training pairs fit a position table (a Transformer's ``max_positions``, which
        ``</s>`` or ``<s>`` shares): a longer limit, or none, becomes the table's, so that
        a long pair is left out of training instead of ending the run at its first batch.
        Lowered, not refused: a run folder saved with a longer limit still loads."""
        positions = getattr(self.model, "max_positions", None)
        if positions is None:
            return self
        for side in ("max_src_len", "max_tgt_len"):
            limit = getattr(self.data, side)
            if limit is None or limit >= positions:
                setattr(self.data, side, positions - 1)
        return self

    @classmethod
    def from_dict(
        cls,
        raw: Any,
        overrides: Sequence[str] = (),
        source: str = "config",
        notes: list[str] | None = None,
    ) -> RunConfig:
        """Validate a plain dict (after applying ``key.path=value`` overrides).

        An override of ``model.arch`` drops the file's keys of the other
        architecture (:func:`~.overrides.switch_architecture`); the one-line
        note saying so is appended to ``notes`` when given.

        Raises:
            ValueError: one line per problem, ``key.path: what is allowed, got VALUE``.
            TypeError: ``overrides`` is one string (not a list of them) or holds a non-string.
        """
        overrides = override_list(overrides)
        if not isinstance(raw, dict):
            raise ValueError(
                f"{source}: the top level must be a mapping of sections, got {shown(raw)}"
            )
        try:
            result = apply_overrides(raw, overrides, cls)
            switched = switch_architecture(raw, result, overrides)
            config = cls.model_validate(result)
            if notes is not None:
                notes.extend(switched)
            return config
        except ValidationError as err:
            blamed = _blamed_overrides(err, overrides)
            where = f"override {' '.join(map(_escaped, blamed))}" if blamed else source
            raise ValueError(f"invalid {where}:\n{format_validation_error(err, cls)}") from None
        except RecursionError:
            raise ValueError(f"{source}: a value refers to itself (a YAML alias loop)") from None

    @classmethod
    def load(
        cls, path: str | Path, overrides: Sequence[str] = (), notes: list[str] | None = None
    ) -> RunConfig:
        """Read and validate a YAML config; relative data paths are resolved against its folder,
        those given in ``overrides`` against the current folder (:func:`~.overrides.anchor_paths`).
        A file that only names another config, as a checkout without symbolic links writes
        ``configs/quick.yaml``, is read as that config, as the link would be
        (:func:`~.presets.linked_config`).

        ``notes`` collects what the overrides changed beyond their own keys (see
        :meth:`from_dict`).

        Raises:
            FileNotFoundError: ``path`` does not exist.
            ValueError: bad YAML (a key given twice in one section included) or an invalid
                value (the message names the key).
            TypeError: ``overrides`` is one string (not a list of them) or holds a non-string.
        """
        from .presets import linked_config, missing_config_message

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(missing_config_message(path))
        try:  # a symbolic link written as text (no links in the checkout) reads its target
            raw = load_yaml((linked_config(path) or path).read_text(encoding="utf-8"))
        except UnicodeDecodeError as err:
            utf16 = err.start == 0 and err.object[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
            hint = "; it starts with a UTF-16 byte order mark: save it as UTF-8" if utf16 else ""
            raise ValueError(
                f"{path}: not UTF-8 text (byte {err.start}: {err.reason}){hint}"
            ) from None
        except yaml.YAMLError as err:
            raise ValueError(f"{path}: not valid YAML ({err})") from None
        overrides = anchor_paths(overrides, Path.cwd(), cls)
        config = cls.from_dict(raw or {}, overrides, source=str(path), notes=notes)
        if config.name is None:
            config.name = path.stem
        config.resolve_paths(path.parent)
        return config

    @classmethod
    def preset(cls, name: str, overrides: Sequence[str] = ()) -> RunConfig:
        """A preset shipped with attnkit (``quick``, ``multi30k``, ``transformer``, the toy
        tasks: :func:`~.presets.preset_names`), with dotted ``overrides`` as in :meth:`load`.

        Raises:
            ValueError: no preset of that name (the message lists them), or a bad override.
            TypeError: as :meth:`load`.
        """
        from .presets import preset_names, preset_path

        path = preset_path(name)
        if path is None:
            raise ValueError(f"no preset {name!r}; the presets: {', '.join(preset_names())}")
        return cls.load(path, overrides)

    def resolve_paths(self, base: Path) -> None:
        """Make the user corpus paths (and ``train.init_from``'s run folder) absolute,
        relative to ``base``."""
        for split in (self.data.train, self.data.valid, self.data.test):
            if split is None:
                continue
            for key in ("src", "tgt", "tsv"):
                value = getattr(split, key)
                if value is not None:
                    setattr(split, key, _absolute(base, value))
        guided = self.train.guided_alignment
        if guided is not None:
            guided.file = _absolute(base, guided.file)
        if self.train.init_from is not None:
            self.train.init_from = _absolute(base, self.train.init_from)

    def to_yaml(self) -> str:
        """The config as YAML text that :meth:`load` reads back as it is."""
        return dump_yaml(self.model_dump(mode="json"))


def _cross_attention_layout(model: ModelConfig) -> tuple[int, int]:
    """The decoder's attention layers and heads per layer, as ``model.attention_layout`` gives
    them once built: a Transformer's ``decoder_layers`` x ``heads``; the RNN's one attention."""
    if model.arch == "transformer":
        return model.decoder_layers, model.heads
    return 1, 1


def _absolute(base: Path, value: str) -> str:
    """``value`` made absolute against ``base``, its links resolved, unless resolving loses
    the file: a pipe such as ``<(zcat train.de.gz)`` is ``/dev/fd/N``, which resolves to
    ``/proc/PID/fd/pipe:[INODE]``, a name that does not exist; it stays ``/dev/fd/N``, so
    that reading it says it is a pipe rather than that no such file exists."""
    path = base / Path(value).expanduser()
    resolved = path.resolve()
    return str(path.absolute() if path.exists() and not resolved.exists() else resolved)


def _escaped(text: str) -> str:
    """``text`` with its unprintable characters (a newline in an override's value) escaped,
    so that an error message keeps its first line whole."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
