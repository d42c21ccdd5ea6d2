"""CLI commands: train, translate, evaluate (registered by attnkit.cli.build_parser).

``attnkit train CONFIG.yaml [--out DIR] [--set key=value ...] [--section.key VALUE ...]``
``attnkit train --resume RUN_DIR`` (continue a run from its own saved config)
``attnkit translate RUN_DIR [SENTENCE ...] [--beam K] [--show-attention] [--plot DIR]``
``attnkit evaluate RUN_DIR [--split test] [--beam K]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import UsageError

OVERRIDE_PREFIX = "override:"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the train, translate and evaluate commands."""
    _register_train(subparsers)
    _register_translate(subparsers)
    _register_evaluate(subparsers)


def _register_train(subparsers: argparse._SubParsersAction) -> None:
    from ..nmt.config import leaf_keys

    p = subparsers.add_parser(
        "train",
        help="train a translator from a YAML config",
        description=(
            "Train an RNN encoder-decoder with attention. Writes a run folder: config.yaml, "
            "tokenizer files, best/last checkpoints, metrics.jsonl, learning_curve.png."
        ),
    )
    p.add_argument(
        "config",
        nargs="?",
        help="YAML run config, e.g. configs/quick.yaml; with --resume, a run folder instead "
        "(its saved config.yaml is used)",
    )
    p.add_argument("--out", help="run folder (default: runs/<config name>)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        dest="overrides",
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set model.hidden_size=128 (repeatable)",
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
    keys = p.add_argument_group(
        "config keys", "any config value as an option, validated like --set (e.g. --train.lr 3e-4)"
    )
    for key in leaf_keys():
        keys.add_argument(
            f"--{key}", dest=OVERRIDE_PREFIX + key, metavar="V", default=argparse.SUPPRESS
        )
    p.set_defaults(func=run_train)


def _register_translate(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "translate",
        help="translate sentences with a trained run",
        description=(
            "Translate the given sentences, or stdin lines, one output line per input line "
            "(an empty input line gives an empty output line)."
        ),
    )
    p.add_argument("run_dir", help="run folder written by 'attnkit train'")
    p.add_argument("sentences", nargs="*", help="sentences to translate (default: read stdin)")
    _decoding_options(p)
    p.add_argument(
        "--show-attention",
        action="store_true",
        help="after each translation, print each target token's most attended source token "
        "and its weight (indented lines)",
    )
    p.add_argument("--plot", metavar="DIR", help="write one attention heatmap PNG per sentence")
    # sentences may also follow the options (see attnkit.cli.main)
    p.set_defaults(func=run_translate, trailing_positionals="sentences")


def _register_evaluate(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "evaluate",
        help="score a trained run on a data split (sacreBLEU, chrF)",
        description="Translate a split of the run's data and print sacreBLEU (with its "
        "signature), chrF and lowercased tokenized BLEU.",
    )
    p.add_argument("run_dir", help="run folder written by 'attnkit train'")
    p.add_argument("--split", default="test", choices=("test", "valid", "train"))
    _decoding_options(p)
    p.add_argument("--output", metavar="FILE", help="also write the translations to FILE")
    p.set_defaults(func=run_evaluate)


def _decoding_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--beam", type=int, metavar="K", help="beam size (1 = greedy; default: config)")
    search_options(p)
    p.add_argument("--checkpoint", default="best", choices=("best", "last"))
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")


def search_options(p: argparse.ArgumentParser) -> None:
    """Add --coverage-penalty and --no-repeat-ngram (defaults: the run's decode section)."""
    p.add_argument(
        "--coverage-penalty",
        type=float,
        metavar="BETA",
        help="GNMT coverage penalty weight for beam search (0 = off; default: config)",
    )
    p.add_argument(
        "--no-repeat-ngram",
        type=int,
        metavar="N",
        help="never repeat an n-gram of the output (0 = off; default: config)",
    )


def apply_search_options(args: argparse.Namespace, run) -> None:
    """Put the search options given on the command line into ``run.config.decode``.

    Raises:
        UsageError: a negative value.
    """
    update = {}
    for option, key in (
        ("--coverage-penalty", "coverage_penalty"),
        ("--no-repeat-ngram", "no_repeat_ngram"),
    ):
        value = getattr(args, key)
        if value is not None and not value >= 0:
            raise UsageError(f"{option} must be >= 0, got {value}")
        if value is not None:
            update[key] = value
    run.config.decode = run.config.decode.model_copy(update=update)


def _overrides(args: argparse.Namespace) -> list[str]:
    dotted = [
        f"{name.removeprefix(OVERRIDE_PREFIX)}={value}"
        for name, value in vars(args).items()
        if name.startswith(OVERRIDE_PREFIX)
    ]
    return [*args.overrides, *dotted]


def _config_and_folder(args: argparse.Namespace):
    """The config to train and the run folder: from CONFIG (+ --out), or from a RUN_DIR."""
    from ..nmt.config import RunConfig

    if args.config is None:
        if not (args.resume and args.out):
            raise UsageError("give a CONFIG.yaml, or --resume RUN_DIR to continue a run")
        args.config = args.out
    source = Path(args.config)
    if source.is_dir():
        if not args.resume:
            raise UsageError(f"{source} is a folder; to continue that run pass --resume")
        if args.out and Path(args.out).resolve() != source.resolve():
            raise UsageError(f"--out {args.out} differs from the run folder {source}")
        saved = source / "config.yaml"
        if not saved.is_file():
            raise UsageError(f"{saved} not found; is {source} a training run folder?")
        return RunConfig.load(saved, _overrides(args)), source
    config = RunConfig.load(source, _overrides(args))
    out = Path(args.out) if args.out else Path("runs") / (config.name or source.stem)
    return config, out


def run_train(args: argparse.Namespace) -> int:
    from ..nmt.train import TrainingError, train

    config, out = _config_and_folder(args)
    try:
        summary = train(
            config,
            out,
            resume=args.resume,
            overwrite=args.overwrite,
            progress_bar=not args.no_progress,
            echo=_stderr,
        )
    except TrainingError as err:
        _stderr(f"attnkit train: error: {err}")
        return 1
    if summary.interrupted:
        return 130
    p = summary.progress
    print(f"run folder: {out}  best valid BLEU {p.best_bleu:.2f} (step {p.best_step})")
    return 0


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _warn(line: str) -> None:
    _stderr(f"attnkit: warning: {line}")


def _load(args: argparse.Namespace):
    from ..nmt.translate import load_run

    if args.beam is not None and args.beam < 1:
        raise UsageError(f"--beam must be >= 1, got {args.beam}")
    run = load_run(args.run_dir, checkpoint=args.checkpoint, device=args.device)
    apply_search_options(args, run)
    return run


def run_translate(args: argparse.Namespace) -> int:
    from ..nmt.translate import alignment_text, translate_lines

    run = _load(args)
    lines = args.sentences or _stdin_lines()
    if hasattr(sys.stdout, "reconfigure"):  # a terminal that cannot show a character gets "?"
        sys.stdout.reconfigure(errors="replace")
    translations = translate_lines(run, lines, beam_size=args.beam, warn=_warn)
    for t in translations:
        print(t.text)
        if args.show_attention and t.weights is not None:
            print(alignment_text(t))
    if args.plot:
        _plot(translations, Path(args.plot))
    return 0


def _stdin_lines() -> list[str]:
    """Lines of stdin, split at "\\n" only; bad UTF-8 is replaced (with a warning), not fatal."""
    from ..nmt.translate import split_input

    binary = getattr(sys.stdin, "buffer", None)
    data = binary.read() if binary is not None else sys.stdin.read().encode("utf-8", "replace")
    return split_input(data, warn=_warn)


def _plot(translations, folder: Path) -> None:
    from ..plot import heatmap

    folder.mkdir(parents=True, exist_ok=True)
    for number, t in enumerate(translations, start=1):
        if t.weights is None:
            continue
        path = folder / f"sentence_{number:03d}.png"
        # plot.heatmap escapes the labels and shortens the title itself
        heatmap(t.weights.numpy(), t.tgt_pieces, t.src_pieces, title=t.source, path=path)
        print(f"heatmap: {path}", file=sys.stderr)


def run_evaluate(args: argparse.Namespace) -> int:
    from ..nmt.checkpoint import atomic_write_bytes
    from ..nmt.translate import evaluate_run

    run = _load(args)
    beam = run.config.decode.beam_size if args.beam is None else args.beam
    result = evaluate_run(run, args.split, beam_size=beam, warn=_warn)
    print(f"{args.split}: {len(result.hypotheses)} sentences, beam {beam}")
    for score in (result.bleu, result.chrf, result.tokenized_bleu):
        print(score)
    if args.output:
        text = "".join(f"{h}\n" for h in result.hypotheses)
        atomic_write_bytes(Path(args.output), text.encode("utf-8"))
    return 0
