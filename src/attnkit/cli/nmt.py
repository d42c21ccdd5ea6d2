"""CLI commands: train, translate, evaluate (registered by attnkit.cli.build_parser).

``attnkit train CONFIG.yaml [--out DIR] [--set key=value ...] [--section.key VALUE ...]``
``attnkit train --resume RUN_DIR`` (continue a run from its own saved config)
``attnkit translate RUN_DIR [SENTENCE ...] [--beam K] [--show-attention] [--plot DIR]
[--layer L] [--head H|all]``
``attnkit evaluate RUN_DIR [--split test | --src FILE --ref FILE] [--beam K] [--output FILE]``
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
        usage="%(prog)s [-h] CONFIG.yaml|RUN_DIR [--out DIR] [--set KEY=VALUE] "
        "[--SECTION.KEY VALUE] [--resume | --overwrite] [--no-progress]",
        description=(
            "Train a translator with attention (model.arch: rnn or transformer). Writes a run "
            "folder: config.yaml, "
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
    p.add_argument(
        "sentences",
        nargs="*",
        default=[],  # optional: without a default, Python 3.11 lists it as required
        help="sentences to translate (default: read stdin)",
    )
    _decoding_options(p)
    p.add_argument(
        "--show-attention",
        action="store_true",
        help="after each translation, print each target token's most attended source token "
        "and its weight (indented lines)",
    )
    p.add_argument(
        "--plot",
        metavar="DIR",
        help="write attention heatmaps per sentence: NNN.png (cross-attention) and, for a "
        "Transformer, NNN.encoder.png and NNN.decoder.png (self-attention)",
    )
    p.add_argument(
        "--layer",
        type=int,
        metavar="L",
        help="show this layer's attention (0-based, negative from the last; default: the last)",
    )
    p.add_argument(
        "--head",
        metavar="H",
        help="show this head (0-based) instead of the head average; 'all' draws every head "
        "of the layer side by side (--plot)",
    )
    # sentences may also follow the options (see attnkit.cli.main)
    p.set_defaults(func=run_translate, trailing_positionals="sentences")


def _register_evaluate(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "evaluate",
        help="score a trained run on a test set (sacreBLEU, chrF)",
        description="Translate every line of a split of the run's data, or of your own "
        "--src file, and print sacreBLEU (with its signature), chrF and lowercased tokenized "
        "BLEU against the references. An empty source line gets an empty translation and "
        "still counts.",
    )
    p.add_argument("run_dir", help="run folder written by 'attnkit train'")
    p.add_argument(
        "--split",
        choices=("test", "valid", "train"),
        help="split of the run's data (default: test)",
    )
    own = p.add_argument_group(
        "your own test set", "instead of --split; UTF-8, one sentence per line, plain or gzipped"
    )
    own.add_argument("--src", metavar="FILE", help="source sentences")
    own.add_argument("--ref", metavar="FILE", help="their references, line by line")
    _decoding_options(p)
    p.add_argument(
        "--output",
        metavar="FILE",
        help="also write the translations to FILE, one line per line of the test set",
    )
    p.set_defaults(func=run_evaluate)


def _decoding_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--beam", type=int, metavar="K", help="beam size (1 = greedy; default: config)")
    search_options(p)
    p.add_argument("--checkpoint", default="best", choices=("best", "last"))
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto (default: cpu)")


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
    from ..nmt.distributed import MainFailed, PeerLost
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
    except (TrainingError, PeerLost, MainFailed) as err:
        _stderr(f"attnkit train: error: {err}")
        return 1
    if summary.interrupted:
        return 130
    if not summary.main:  # another rank of a torchrun job: rank 0 reports
        return 0
    p = summary.progress
    print(f"run folder: {out}  best valid BLEU {p.best_bleu:.2f} (step {p.best_step})")
    return 0


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _warn(line: str) -> None:
    _stderr(f"attnkit: warning: {line}")


def _load(args: argparse.Namespace):
    from ..nmt.device import resolve_device
    from ..nmt.translate import load_run

    if args.beam is not None and args.beam < 1:
        raise UsageError(f"--beam must be >= 1, got {args.beam}")
    device = resolve_device(args.device, "--device")
    run = load_run(args.run_dir, checkpoint=args.checkpoint, device=str(device))
    apply_search_options(args, run)
    return run


def run_translate(args: argparse.Namespace) -> int:
    from ..nmt.translate import alignment_text, translate_lines

    head = _head(args.head)
    run = _load(args)
    _check_view(run, args.layer, head)
    lines = args.sentences or _stdin_lines()
    if hasattr(sys.stdout, "reconfigure"):  # a terminal that cannot show a character gets "?"
        sys.stdout.reconfigure(errors="replace")
    translations = translate_lines(run, lines, beam_size=args.beam, warn=_warn)
    chosen = args.layer is not None or head is not None
    for t in translations:
        print(t.text)
        if args.show_attention and t.weights is not None:
            weights = _chosen_cross(run, t, args.layer, head) if chosen else None
            print(alignment_text(t, weights))
    if args.plot:
        _plot(run, translations, Path(args.plot), args.layer, head)
    return 0


def _head(value: str | None) -> int | str | None:
    """``--head``: an int, ``all``, or None."""
    if value is None or value == "all":
        return value
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"--head must be a head number or 'all', got {value!r}") from None


def _check_view(run, layer: int | None, head) -> None:
    """Fail before translating when ``--layer``/``--head`` do not exist in this model."""
    from ..nmt.views import attention_views, pick
    from ..nmt.vocab_ids import EOS, NUM_SPECIAL

    views = attention_views(run.model, [NUM_SPECIAL], [EOS], run.device)  # one-token probe
    for weights in (views.cross, views.encoder, views.decoder):
        if weights is not None:
            pick(weights, layer, None if head == "all" else head)


def _chosen_cross(run, translation, layer: int | None, head):
    """Cross-attention of ``--layer``/``--head`` (head average for ``all``), (T, S)."""
    from ..nmt.views import attention_views, pick

    views = attention_views(run.model, translation.src_ids, translation.output_ids, run.device)
    return pick(views.cross, layer, None if head == "all" else head)


def _stdin_lines() -> list[str]:
    """Lines of stdin, split at "\\n" only; bad UTF-8 is replaced (with a warning), not fatal."""
    from ..nmt.translate import split_input

    binary = getattr(sys.stdin, "buffer", None)
    data = binary.read() if binary is not None else sys.stdin.read().encode("utf-8", "replace")
    return split_input(data, warn=_warn)


def _plot(run, translations, folder: Path, layer: int | None, head) -> None:
    from ..nmt.views import attention_views, write_heatmaps

    folder.mkdir(parents=True, exist_ok=True)
    for number, t in enumerate(translations, start=1):
        if t.weights is None:
            continue
        views = attention_views(run.model, t.src_ids, t.output_ids, run.device)
        own = t.weights if layer is None and head is None else None
        stem = folder / f"sentence_{number:03d}"
        # plot.heatmap escapes the labels and shortens the title itself
        for path in write_heatmaps(
            views,
            t.src_pieces,
            t.tgt_pieces,
            stem,
            layer=layer,
            head=head,
            title=t.source,
            cross=own,
        ):
            print(f"heatmap: {path}", file=sys.stderr)


def run_evaluate(args: argparse.Namespace) -> int:
    from ..nmt.checkpoint import atomic_write_bytes
    from ..nmt.translate import evaluate_corpus, evaluate_run

    corpus = _own_test_set(args)  # read before the model loads: file errors come first
    run = _load(args)
    beam = run.config.decode.beam_size if args.beam is None else args.beam
    if corpus is None:
        label = args.split or "test"
        result = evaluate_run(run, label, beam_size=beam, warn=_warn)
    else:
        label = args.src
        result = evaluate_corpus(run, corpus, args.src, beam_size=beam, warn=_warn)
    print(f"{label}: {len(result.hypotheses)} sentences, beam {beam}{_empty_lines(result)}")
    for score in (result.bleu, result.chrf, result.tokenized_bleu):
        print(score)
    if args.output:
        text = "".join(f"{h}\n" for h in result.hypotheses)
        atomic_write_bytes(Path(args.output), text.encode("utf-8"))
    return 0


def _own_test_set(args: argparse.Namespace):
    """The ``--src``/``--ref`` pair as a corpus that keeps every line; None without them."""
    from ..nmt.corpus import read_parallel

    if args.src is None and args.ref is None:
        return None
    if args.src is None or args.ref is None:
        raise UsageError("--src and --ref go together: give the source file and its references")
    if args.split is not None:
        raise UsageError("give either --split or --src/--ref, not both")
    return read_parallel(args.src, args.ref, keep_empty=True)


def _empty_lines(result) -> str:
    """`` (N with an empty source, ...)`` for the summary line; ``""`` when none is empty."""
    notes = []
    if result.empty_sources:
        notes.append(f"{result.empty_sources} with an empty source, given an empty translation")
    if result.empty_references:
        notes.append(f"{result.empty_references} with an empty reference")
    return f" ({'; '.join(notes)}; all scored)" if notes else ""
