"""CLI commands: train, prepare (registered by attnkit.cli.build_parser).

``attnkit train CONFIG.yaml|PRESET [--out DIR] [--set key=value ...] [--section.key VALUE ...]``
``attnkit train --resume RUN_DIR`` (continue a run from its own saved config)
``attnkit prepare CONFIG.yaml [--out DIR] [...]`` (tokenizers + training token store only)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from shlex import quote

from .errors import UsageError, stderr, warn
from .run_dir import prepared_only, warn_threads_over_cores


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the train and prepare commands."""
    _register_train(subparsers)
    _register_prepare(subparsers)


def _register_train(subparsers: argparse._SubParsersAction) -> None:

    p = subparsers.add_parser(
        "train",
        help="train a translator from a YAML config",
        usage="%(prog)s [-h] CONFIG.yaml|PRESET|RUN_DIR [--out DIR] [--set KEY=VALUE] "
        "[--SECTION.KEY VALUE] [--resume | --overwrite] [--no-progress]",
        description=(
            "Train a translator with attention (model.arch: rnn or transformer). Writes a run "
            "folder: config.yaml, "
            "tokenizer files, best/last checkpoints, metrics.jsonl, learning_curve.png."
        ),
    )
    _config_options(
        p,
        "YAML run config, e.g. configs/quick.yaml, or the name of a shipped preset (quick, "
        "multi30k, transformer, copy, reverse, ...); with --resume, a run folder instead "
        "(its saved config.yaml is used)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out (or the RUN_DIR given instead of CONFIG) from its last "
        "checkpoint, with the same results as an uninterrupted run; reuse it if finished",
    )
    mode.add_argument(
        "--overwrite", action="store_true", help="delete a previous run in --out and start over"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_train)


def _config_options(p: argparse.ArgumentParser, config_help: str) -> None:
    """CONFIG (described by ``config_help``), --out, --set and one --SECTION.KEY option per
    config value."""
    from ..nmt.config import leaf_keys

    p.add_argument("config", nargs="?", help=config_help)
    p.add_argument("--out", help="run folder (default: runs/<config name>)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        dest="overrides",
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set model.hidden_size=128 (repeatable)",
    )
    keys = p.add_argument_group(
        "config keys", "any config value as an option, validated like --set (e.g. --train.lr 3e-4)"
    )
    for key in leaf_keys():
        keys.add_argument(
            f"--{key}",
            action=_KeyOverride,
            dest="overrides",
            const=key,
            metavar="V",
            default=argparse.SUPPRESS,
        )


class _KeyOverride(argparse.Action):
    """``--SECTION.KEY V`` added to ``--set``'s list as ``SECTION.KEY=V``, where it was typed:
    the overrides apply in command-line order, so the last one given wins (the options were
    applied after every ``--set``, so ``--train.lr 2e-3 --set train.lr=1e-3`` trained at 2e-3)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        typed = list(getattr(namespace, self.dest, None) or [])
        setattr(namespace, self.dest, [*typed, f"{self.const}={values}"])


def _register_prepare(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "prepare",
        help="train the tokenizers and build the training token store, without training",
        usage="%(prog)s [-h] CONFIG.yaml|PRESET [--out DIR] [--set KEY=VALUE] "
        "[--SECTION.KEY VALUE] [--no-progress]",
        description=(
            "Read the training split once, train the tokenizers on a sample "
            "(tokenizer.sample_sentences pairs) and encode the split into a memory-mapped "
            "token store in the run folder (store/train/), as 'attnkit train' does before "
            "its first step. 'attnkit train' with the same config and folder then starts "
            "from them: useful before a long or a torchrun job."
        ),
    )
    _config_options(p, "YAML run config, e.g. configs/quick.yaml, or a shipped preset's name")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_prepare, resume=False)


def _config_and_folder(args: argparse.Namespace):
    """The config to train and its RunFolder: from CONFIG (+ --out), or from a RUN_DIR."""
    from ..nmt.config.presets import config_path, preset_path
    from ..nmt.runs.run_folder import RunFolder

    if args.config is None:
        if not (args.resume and args.out):
            raise UsageError("give a CONFIG.yaml, or --resume RUN_DIR to continue a run")
        args.config = args.out
    source = Path(args.config)
    if (
        args.resume
        and not source.exists()
        and source.suffix not in (".yaml", ".yml")
        and preset_path(args.config) is None
    ):
        raise UsageError(
            f"no run folder {source} to resume; give a run folder 'attnkit train' wrote"
        )
    source = config_path(args.config)
    if source.is_dir():
        if args.command == "prepare":
            raise UsageError(
                f"{source} is a folder; prepare takes a CONFIG.yaml (and --out {source} to "
                "prepare that folder)"
            )
        if not args.resume:
            raise UsageError(f"{source} is a folder; to continue that run pass --resume")
        if args.out and Path(args.out).resolve() != source.resolve():
            raise UsageError(f"--out {args.out} differs from the run folder {source}")
        folder = RunFolder(source)
        if not folder.config.is_file() and folder.has_run():
            raise UsageError(
                f"{source} holds a run's checkpoints but not its {folder.config.name}; restore "
                "it, or resume with the run's config: attnkit train CONFIG.yaml --out "
                f"{quote(str(source))} --resume"
            )
        prepared = prepared_only(source, "no run to resume")
        if prepared:
            raise UsageError(prepared)
        if not folder.config.is_file():
            raise UsageError(f"{folder.config} not found; is {source} a training run folder?")
        return _load_config(folder.config, args), folder
    config = _load_config(source, args)
    if args.out:
        if Path(args.out).exists() and not Path(args.out).is_dir():
            raise UsageError(f"--out {args.out} is a file, not a run folder")
        return config, RunFolder(Path(args.out))
    return config, RunFolder.default(config.name or source.stem)


def _load_config(path: Path, args: argparse.Namespace):
    """The config at ``path`` with the command line's overrides; their notes go to stderr.

    Switching ``model.arch`` on a preset names the keys it dropped and, when
    the preset has a sibling for that architecture (``reverse.yaml`` <->
    ``reverse_transformer.yaml``), points to it.
    """
    from ..nmt.config import RunConfig
    from ..nmt.config.presets import PRESETS

    notes: list[str] = []
    config = RunConfig.load(path, args.overrides, notes=notes)
    for note in notes:
        base = path.stem.removesuffix("_transformer")  # the RNN's is the bare name
        arch = "" if config.model.arch == "rnn" else f"_{config.model.arch}"
        sibling = path.with_name(f"{base}{arch}{path.suffix}")
        named = sibling.stem if path.parent == PRESETS else sibling  # as the user named it
        tuned = f"; a preset tuned for it: {named}" if sibling.is_file() else ""
        stderr(f"attnkit {args.command}: note: {note}{tuned}")
    return config


def run_train(args: argparse.Namespace) -> int:
    from ..nmt.training.distributed import launch

    placed = launch()
    try:
        return _train(args, placed)
    except (UsageError, ValueError, FileNotFoundError) as err:
        if placed.world_size <= 1:
            raise
        raise UsageError(_on_rank(placed, str(err))) from None


def _on_rank(placed, message: str) -> str:
    """``message`` as one rank of a torchrun job says it (``rank 1 of 2: ...``), so the
    interleaved lines of its processes tell which one failed; unchanged for one process."""
    if placed.world_size <= 1 or message.startswith("rank "):
        return message
    return f"rank {placed.rank} of {placed.world_size}: {message}"


def _train(args: argparse.Namespace, placed) -> int:
    from ..nmt.training.distributed import MainFailed, PeerLost
    from ..nmt.training.loop import TrainingError, train

    with _said_by_rank_0(placed.is_main):  # torchrun: one copy of each note, not one a rank
        config, folder = _config_and_folder(args)
        warn_threads_over_cores(config.train.threads, "train.threads", placed.local_world_size)
        _warn_budget_inside_warmup(config.train)
        _warn_rate_never_falls(config.train)
        _warn_tsv_columns_differ(config.data)
        if not args.resume:  # a run folder's config.yaml gives every key; said when it began
            _warn_unused_schedule_keys(config.train)
            _warn_unused_tokenizer_keys(config.tokenizer)
    try:
        summary = train(
            config,
            folder.path,
            resume=args.resume,
            overwrite=args.overwrite,
            progress_bar=not args.no_progress,
            echo=stderr,
        )
    except (TrainingError, PeerLost, MainFailed) as err:
        stderr(f"attnkit train: error: {_on_rank(placed, str(err))}")
        return 1
    if summary.interrupted:
        return 130
    if not summary.main:  # another rank of a torchrun job: rank 0 reports
        return 0
    p = summary.progress
    print(f"run folder: {folder.path}  best valid BLEU {p.best_bleu:.2f} (step {p.best_step})")
    return 0


def _said_by_rank_0(main: bool):
    """A block whose notes and warnings (on stderr) only rank 0 of a torchrun job prints;
    an error raised in it is still reported by every rank."""
    import contextlib
    import io

    return contextlib.nullcontext() if main else contextlib.redirect_stderr(io.StringIO())


def _warn_budget_inside_warmup(train) -> None:
    """One warning when an inverse-square-root schedule's step budget ends before its
    warm-up does, so the rate never reaches ``train.lr`` (the linear schedule refuses it)."""
    steps, warmup = train.max_steps, train.warmup_steps
    if train.lr_schedule == "inverse_sqrt" and isinstance(steps, int) and steps < warmup:
        warn(
            f"train.max_steps {steps} ends inside the warm-up of train.warmup_steps {warmup}: "
            f"the learning rate climbs to {_percent(steps / warmup)} of train.lr and no further "
            f"(lower warmup_steps, e.g. --train.warmup_steps {max(1, steps // 10)})"
        )


def _warn_rate_never_falls(train) -> None:
    """One warning when ``train.min_lr`` is not below ``train.lr``: the linear schedule's
    line and the plateau schedule's decay stop at ``min_lr``, so the rate stays at ``lr``
    (a fine-tuning rate of 5e-6 on the quick preset, whose min_lr is the default 1e-5)."""
    if train.lr_schedule != "inverse_sqrt" and train.min_lr >= train.lr:
        warn(
            f"train.min_lr {train.min_lr:g} is not below train.lr {train.lr:g}: the "
            f"{train.lr_schedule} schedule never lowers the rate (lower min_lr, e.g. "
            f"--train.min_lr {train.lr / 100:g})"
        )


def _warn_tsv_columns_differ(data) -> None:
    """One warning when the TSV splits read source and target from different columns:
    flipping only ``data.train``'s (``--set data.train.src_column=1``) trains one
    direction and validates the other, silently, with a BLEU near 0."""
    splits = {
        name: (files.src_column, files.tgt_column)
        for name in ("train", "valid", "test")
        if (files := getattr(data, name)) is not None and files.tsv is not None
    }
    if len(set(splits.values())) > 1:
        listed = ", ".join(f"data.{name} {s}/{t}" for name, (s, t) in splits.items())
        warn(
            f"the TSV splits read source/target from different columns ({listed}): unless "
            "their files differ in layout, set the same src_column and tgt_column in each, "
            "or validation scores the other direction"
        )


def _warn_unused_schedule_keys(train) -> None:
    """One warning naming the schedule settings the config gives that its ``lr_schedule``
    ignores (``warmup_steps: 1000`` with ``plateau`` trained with no warm-up, silently)."""
    _warn_unused(
        "train",
        train,
        train.unused_schedule_keys(),
        f"not used by train.lr_schedule {train.lr_schedule} (plateau reads lr_decay, "
        "lr_patience and min_lr; inverse_sqrt warmup_steps; linear warmup_steps and min_lr)",
    )


def _warn_unused_tokenizer_keys(tokenizer) -> None:
    """One warning naming the sentencepiece settings given with ``tokenizer.kind: word``
    (``model_type: bpe`` trained whitespace words, silently)."""
    _warn_unused(
        "tokenizer",
        tokenizer,
        tokenizer.unused_keys(),
        "not used by tokenizer.kind word, which splits at whitespace (sentencepiece "
        "settings: set tokenizer.kind sentencepiece to use them)",
    )


def _warn_unused(name: str, section, keys: list[str], why: str) -> None:
    """``SECTION.KEY VALUE, ...: WHY`` as one warning, when ``keys`` is not empty."""
    if keys:
        given = ", ".join(f"{name}.{key} {getattr(section, key)}" for key in keys)
        warn(f"{given}: {why}")


def _percent(share: float) -> str:
    """``share`` as a percentage with a digit that is not 0: ``50%``, ``0.25%``."""
    return f"{share:.0%}" if share >= 0.01 else f"{share * 100:.2g}%"


def run_prepare(args: argparse.Namespace) -> int:
    from ..nmt.training.prepare import prepare_run

    config, folder = _config_and_folder(args)
    warn_threads_over_cores(config.train.threads, "train.threads")
    _warn_tsv_columns_differ(config.data)
    _warn_unused_tokenizer_keys(config.tokenizer)
    prepare_run(config, folder, progress_bar=not args.no_progress, echo=stderr)
    print(f"prepared: {folder.path}")
    return 0
