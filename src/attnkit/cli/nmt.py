"""CLI commands: train, prepare, translate, evaluate (registered by attnkit.cli.build_parser).

``attnkit train CONFIG.yaml [--out DIR] [--set key=value ...] [--section.key VALUE ...]``
``attnkit train --resume RUN_DIR`` (continue a run from its own saved config)
``attnkit prepare CONFIG.yaml [--out DIR] [...]`` (tokenizers + training token store only)
``attnkit translate RUN_DIR [SENTENCE ...] [--beam K] [--buffer-size N] [--progress]
[--show-attention [--attention-out FILE]] [--attention-json FILE [--n-best N]] [--plot DIR]
[--layer L] [--head H|all]``
``attnkit evaluate RUN_DIR [--split test | --src FILE --tgt FILE] [--beam K] [--output FILE]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .decoding import (
    check_search_options,
    head_selection,
    search_options,
    search_settings,
    view_options,
)
from .errors import UsageError
from .run_hint import check_run_folder

OVERRIDE_PREFIX = "override:"
DEFAULT_BUFFER_LINES = 256


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the train, prepare, translate and evaluate commands."""
    _register_train(subparsers)
    _register_prepare(subparsers)
    _register_translate(subparsers)
    _register_evaluate(subparsers)


def _register_train(subparsers: argparse._SubParsersAction) -> None:

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
    _config_options(p)
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


def _config_options(p: argparse.ArgumentParser) -> None:
    """CONFIG, --out, --set and one --SECTION.KEY option per config value."""
    from ..nmt.config import leaf_keys

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
    keys = p.add_argument_group(
        "config keys", "any config value as an option, validated like --set (e.g. --train.lr 3e-4)"
    )
    for key in leaf_keys():
        keys.add_argument(
            f"--{key}", dest=OVERRIDE_PREFIX + key, metavar="V", default=argparse.SUPPRESS
        )


def _register_prepare(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "prepare",
        help="train the tokenizers and build the training token store, without training",
        usage="%(prog)s [-h] CONFIG.yaml [--out DIR] [--set KEY=VALUE] [--SECTION.KEY VALUE] "
        "[--no-progress]",
        description=(
            "Read the training split once, train the tokenizers on a sample "
            "(tokenizer.sample_sentences pairs) and encode the split into a memory-mapped "
            "token store in the run folder (store/train/), as 'attnkit train' does before "
            "its first step. 'attnkit train' with the same config and folder then starts "
            "from them: useful before a long or a torchrun job."
        ),
    )
    _config_options(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_prepare, resume=False)


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
        help="for each translation, write 'line N: TRANSLATION' and then each target token's "
        "most attended source token and its weight (indented lines) to stderr, or to "
        "--attention-out; stdout keeps one line per input line",
    )
    p.add_argument(
        "--attention-out",
        metavar="FILE",
        help="write the --show-attention lines to FILE instead of stderr",
    )
    p.add_argument(
        "--html",
        metavar="FILE",
        help="also write one self-contained HTML page (no server, no network) with the "
        "translations and their attention, as 'attnkit serve' shows them",
    )
    p.add_argument(
        "--attention-json",
        metavar="FILE",
        help="write JSON Lines to FILE, one object per input line: source, translation, "
        "score, src_tokens, tgt_tokens, weights (rows = target tokens); "
        "'attnkit plot weights FILE --index N' draws line N",
    )
    p.add_argument(
        "--n-best",
        type=int,
        metavar="N",
        help="with --attention-json: add the N best beam hypotheses of each line "
        "(tokens, weights, score)",
    )
    p.add_argument(
        "--plot",
        metavar="DIR",
        help="write attention heatmaps per sentence: sentence_NNN.png (cross-attention) and, "
        "for a Transformer, sentence_NNN.encoder.png and sentence_NNN.decoder.png "
        "(self-attention); sentence_*.png left in DIR by an earlier run are deleted first",
    )
    p.add_argument(
        "--buffer-size",
        type=int,
        default=DEFAULT_BUFFER_LINES,
        metavar="N",
        help="translate stdin N lines at a time, writing each buffer's translations as soon "
        f"as they are done (default {DEFAULT_BUFFER_LINES}; fewer when a pipe or terminal "
        "has nothing more ready)",
    )
    p.add_argument(
        "--progress",
        action="store_true",
        help="show lines done and lines/s on stderr (default: only when stdin is a file)",
    )
    view_options(p, all_heads=True)
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
    own.add_argument(
        "--tgt",
        "--ref",
        dest="tgt",
        metavar="FILE",
        help="their references, line by line (--ref is the same option)",
    )
    _decoding_options(p)
    p.add_argument(
        "--output",
        metavar="FILE",
        help="also write the translations to FILE, one line per line of the test set",
    )
    p.set_defaults(func=run_evaluate)


def _decoding_options(p: argparse.ArgumentParser) -> None:
    search_options(p)
    p.add_argument("--checkpoint", default="best", choices=("best", "last"))
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto (default: cpu)")
    p.add_argument(
        "--engine",
        choices=("attnkit", "ctranslate2"),
        default="attnkit",
        help="who searches: attnkit's own search (default) or the run's CTranslate2 export "
        "(written by 'attnkit export RUN_DIR'; pip install 'attnkit[export]')",
    )
    p.add_argument(
        "--export-dir",
        metavar="DIR",
        help="with --engine ctranslate2: the export to use (default: RUN_DIR/ctranslate2)",
    )


def _overrides(args: argparse.Namespace) -> list[str]:
    dotted = [
        f"{name.removeprefix(OVERRIDE_PREFIX)}={value}"
        for name, value in vars(args).items()
        if name.startswith(OVERRIDE_PREFIX)
    ]
    return [*args.overrides, *dotted]


def _config_and_folder(args: argparse.Namespace):
    """The config to train and its RunFolder: from CONFIG (+ --out), or from a RUN_DIR."""
    from ..nmt.runs.run_folder import RunFolder

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
        folder = RunFolder(source)
        if not folder.config.is_file():
            raise UsageError(f"{folder.config} not found; is {source} a training run folder?")
        return _load_config(folder.config, args), folder
    config = _load_config(source, args)
    if args.out:
        return config, RunFolder(Path(args.out))
    return config, RunFolder.default(config.name or source.stem)


def _load_config(path: Path, args: argparse.Namespace):
    """The config at ``path`` with the command line's overrides; their notes go to stderr.

    Switching ``model.arch`` on a preset names the keys it dropped and, when
    the preset has a sibling for that architecture (``reverse.yaml`` ->
    ``reverse_transformer.yaml``), points to it.
    """
    from ..nmt.config import RunConfig

    notes: list[str] = []
    config = RunConfig.load(path, _overrides(args), notes=notes)
    for note in notes:
        sibling = path.with_name(f"{path.stem}_{config.model.arch}{path.suffix}")
        tuned = f"; a preset tuned for it: {sibling}" if sibling.is_file() else ""
        _stderr(f"attnkit {args.command}: note: {note}{tuned}")
    return config


def run_train(args: argparse.Namespace) -> int:
    from ..nmt.training.distributed import MainFailed, PeerLost
    from ..nmt.training.loop import TrainingError, train

    config, folder = _config_and_folder(args)
    _warn_threads_over_cores(config.train.threads)
    try:
        summary = train(
            config,
            folder.path,
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
    print(f"run folder: {folder.path}  best valid BLEU {p.best_bleu:.2f} (step {p.best_step})")
    return 0


def _warn_threads_over_cores(threads) -> None:
    """One warning when train.threads asks for more threads than this process has cores."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if isinstance(threads, int) and cores and threads > cores:
        _warn(
            f"train.threads {threads} is more than the {cores} CPU core(s) this process may use; "
            "threads beyond the cores wait for each other and slow training down "
            f"(use {cores}, or 'auto')"
        )


def run_prepare(args: argparse.Namespace) -> int:
    from ..nmt.training.prepare import prepare_run

    config, folder = _config_and_folder(args)
    prepare_run(config, folder, progress_bar=not args.no_progress, echo=_stderr)
    print(f"prepared: {folder.path}")
    return 0


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _warn(line: str) -> None:
    _stderr(f"attnkit: warning: {line}")


def _load(args: argparse.Namespace):
    """The run and its search settings with the command line's options."""
    from ..nmt.device import resolve_device
    from ..nmt.runs.loaded_run import load_run

    check_search_options(args)
    check_run_folder(args.run_dir)
    device = resolve_device(args.device, "--device")
    run = load_run(args.run_dir, checkpoint=args.checkpoint, device=str(device))
    return run, search_settings(args, run)


def _engine(args: argparse.Namespace, run):
    """The search engine ``--engine`` names (attnkit's own search, or the CTranslate2 export)."""
    if args.export_dir and args.engine != "ctranslate2":
        raise UsageError("--export-dir needs --engine ctranslate2")
    from ..nmt.export.ctranslate2 import EngineUnavailable
    from ..nmt.export.engine import open_engine

    try:
        return open_engine(args.engine, run, export_dir=args.export_dir, checkpoint=args.checkpoint)
    except EngineUnavailable as err:
        raise UsageError(str(err)) from None


def run_translate(args: argparse.Namespace) -> int:
    """Translate buffer by buffer; each buffer's outputs are written as soon as it is done."""
    from ..nmt.decoding.output import TranslationOutput
    from ..nmt.decoding.streaming import input_buffers, is_regular_file, translate_buffers
    from ..nmt.training.progress_lines import progress

    selection = head_selection(args, all_heads=True)
    _check_stream_options(args)
    _warn_unused_view_options(args)
    run, settings = _load(args)
    engine = _engine(args, run)
    sinks = _sinks(args, selection, settings, run)
    if hasattr(sys.stdout, "reconfigure"):  # a terminal that cannot show a character gets "?"
        sys.stdout.reconfigure(errors="replace")
    show = args.progress or (not args.sentences and is_regular_file(sys.stdin))
    with (
        TranslationOutput(run, sinks, echo=_stderr) as output,
        progress(show, unit=" lines", desc="translate", every_s=10.0, dynamic_ncols=True) as bar,
    ):
        buffers = input_buffers(args.sentences, sys.stdin, args.buffer_size, warn=_warn)
        for first, translations in translate_buffers(
            run, buffers, settings, n_best=sinks.search_n_best, warn=_warn, engine=engine
        ):
            output.write(first, translations)
            bar.update(len(translations))
        output.finish()
    return 0


def _sinks(args: argparse.Namespace, selection, settings, run):
    """Where translate writes, from its options."""
    from ..nmt.decoding.output import Sinks

    page = None
    if args.html:
        from ..serve import write_html

        data = run.config.data
        about = f"run {run.config.name} ({run.folder}), {data.src_lang} → {data.tgt_lang}"

        def page(records):
            return write_html(args.html, records, beam_size=settings.beam_size, about=about)

    return Sinks(
        show_attention=args.show_attention,
        attention_out=args.attention_out,
        json=args.attention_json,
        n_best=args.n_best or 0,
        plot=Path(args.plot) if args.plot else None,
        page=page,
        selection=selection,
    )


def _warn_unused_view_options(args: argparse.Namespace) -> None:
    """--layer/--head choose what the attention sinks show; without one they change nothing."""
    given = [o for o, v in (("--layer", args.layer), ("--head", args.head)) if v is not None]
    sinks = (args.plot, args.show_attention, args.attention_json, args.html)
    if given and not any(sinks):
        verb, it = ("chooses", "it changes") if len(given) == 1 else ("choose", "they change")
        _warn(
            f"{' and '.join(given)} {verb} the attention that --plot, --show-attention, "
            f"--attention-json and --html show; without one of them {it} nothing"
        )


def _check_stream_options(args: argparse.Namespace) -> None:
    if args.buffer_size < 1:
        raise UsageError(f"--buffer-size must be >= 1, got {args.buffer_size}")
    if args.n_best is not None and args.n_best < 1:
        raise UsageError(f"--n-best must be >= 1, got {args.n_best}")
    if args.n_best is not None and not args.attention_json:
        raise UsageError("--n-best needs --attention-json FILE (the hypotheses go there)")
    if args.attention_out and not args.show_attention:
        raise UsageError("--attention-out needs --show-attention")
    if args.html and not Path(args.html).resolve().parent.is_dir():
        raise UsageError(f"--html {args.html}: its folder does not exist")


def run_evaluate(args: argparse.Namespace) -> int:
    from ..atomic import atomic_write_bytes
    from ..nmt.analysis.evaluate import evaluate_corpus, evaluate_run

    corpus = _own_test_set(args)  # read before the model loads: file errors come first
    run, settings = _load(args)
    engine = _engine(args, run)
    if corpus is None:
        label = args.split or "test"
        result = evaluate_run(run, label, settings, warn=_warn, engine=engine)
    else:
        label = args.src
        result = evaluate_corpus(run, corpus, args.src, settings, warn=_warn, engine=engine)
    beam = settings.beam_size
    print(f"{label}: {len(result.hypotheses)} sentences, beam {beam}{_empty_lines(result)}")
    for score in (result.bleu, result.chrf, result.tokenized_bleu):
        print(score)
    if args.output:
        text = "".join(f"{h}\n" for h in result.hypotheses)
        atomic_write_bytes(Path(args.output), text.encode("utf-8"))
    return 0


def _own_test_set(args: argparse.Namespace):
    """The ``--src``/``--tgt`` pair as a corpus that keeps every line; None without them."""
    from ..nmt.data.corpus import read_parallel

    if args.src is None and args.tgt is None:
        return None
    if args.src is None or args.tgt is None:
        raise UsageError("--src and --tgt go together: give the source file and its references")
    if args.split is not None:
        raise UsageError("give either --split or --src/--tgt, not both")
    return read_parallel(args.src, args.tgt, keep_empty=True)


def _empty_lines(result) -> str:
    """`` (N with an empty source, ...)`` for the summary line; ``""`` when none is empty."""
    notes = []
    if result.empty_sources:
        notes.append(f"{result.empty_sources} with an empty source, given an empty translation")
    if result.empty_references:
        notes.append(f"{result.empty_references} with an empty reference")
    return f" ({'; '.join(notes)}; all scored)" if notes else ""
