"""CLI commands: translate, evaluate (registered by attnkit.cli.build_parser).

``attnkit translate RUN_DIR [SENTENCE ...] [--beam K] [--buffer-size N] [--[no-]progress]
[--show-attention [--attention-out FILE]] [--attention-json FILE [--n-best N]] [--plot DIR]
[--layer L] [--head H|all]``
``attnkit evaluate RUN_DIR [--split test | --src FILE --tgt FILE] [--beam K] [--output FILE]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from shlex import quote

from .decoding import (
    check_search_options,
    decoding_precision,
    head_selection,
    precision_option,
    search_memory,
    search_options,
    search_settings,
    view_options,
)
from .errors import UsageError, stderr, warn
from .outputs import check_distinct_outputs, check_output
from .run_dir import (
    check_run_folder,
    check_split,
    checkpoint_option,
    device_option,
    load_run_folder,
    pair_file_options,
    threads_option,
)

DEFAULT_BUFFER_LINES = 256


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the translate and evaluate commands."""
    _register_translate(subparsers)
    _register_evaluate(subparsers)


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
        help="sentences to translate (default: read --src FILE, or stdin)",
    )
    p.add_argument(
        "--src",
        metavar="FILE",
        help="translate the lines of FILE (plain or gzipped) instead of stdin, as evaluate, "
        "inspect and align read --src",
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
        "(a 'hypotheses' list: translation, tgt_tokens, weights, score)",
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
        action=argparse.BooleanOptionalAction,
        help="show lines done and lines/s on stderr (--no-progress: never, as for train and "
        "prepare; default: only when stdin or --src is a file and stdout is no terminal)",
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
    pair_file_options(own, "their references, line by line", "source sentences")
    _decoding_options(p)
    p.add_argument(
        "--output",
        metavar="FILE",
        help="also write the translations to FILE, one line per line of the test set",
    )
    p.set_defaults(func=run_evaluate)


def _decoding_options(p: argparse.ArgumentParser) -> None:
    search_options(p)
    checkpoint_option(p)
    device_option(p)
    threads_option(p, "the search, attnkit's or CTranslate2's")
    precision_option(p)
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
    p.add_argument(
        "--ensemble",
        action="append",
        default=[],
        metavar="RUN_DIR",
        help="decode with this run's model too, the models' next-token probabilities "
        "averaged at every step (repeat for more; same tokenizers, any architecture; "
        "each loads the --checkpoint the first run does, auto choosing per run)",
    )


def _load(args: argparse.Namespace):
    """The run and its search settings with the command line's options."""
    check_search_options(args)
    run = load_run_folder(args)  # --threads set there
    return run, search_settings(args, run)


def _engine(args: argparse.Namespace, run):
    """The search engine ``--engine`` names (attnkit's own search, or the CTranslate2 export)."""
    if args.export_dir and args.engine != "ctranslate2":
        raise UsageError("--export-dir needs --engine ctranslate2")
    if args.ensemble and args.engine != "attnkit":
        raise UsageError(
            f"--ensemble decodes with attnkit's own search, not --engine {args.engine}"
        )
    _check_ensemble(args)
    if args.engine == "ctranslate2":
        _export_precision(run)
    from ..nmt.export.ctranslate2 import EngineUnavailable
    from ..nmt.export.engine import open_engine

    try:
        engine = open_engine(
            args.engine,
            run,
            export_dir=args.export_dir,
            checkpoint=args.checkpoint,
            threads=args.threads,
            ensemble=args.ensemble,
        )
    except EngineUnavailable as err:
        raise UsageError(str(err)) from None
    if args.ensemble:
        from ..nmt.runs.run_folder import RunFolder

        runs = [args.run_dir, *args.ensemble]
        loaded = [f"{r} ({RunFolder(Path(r)).resolve_checkpoint(args.checkpoint)})" for r in runs]
        stderr(f"ensemble of {len(runs)} runs: {', '.join(loaded)}")
    return engine


def _export_precision(run) -> None:
    """CTranslate2 decodes in the export's own compute type (bf16 is no CPU type of its):
    ``--precision bf16`` is refused, and an ``auto`` that chose bf16 becomes fp32, so
    nothing announces a bf16 that does not run."""
    if run.precision.name != "bf16":
        return
    if run.precision.setting == "bf16":
        raise UsageError(
            "--precision bf16 is for attnkit's own search; --engine ctranslate2 decodes in "
            "the export's compute type (see 'attnkit export --quantization'); use "
            "--precision auto or fp32"
        )
    from dataclasses import replace

    reason = "fp32: --engine ctranslate2 decodes in the export's compute type"
    run.precision = replace(run.precision, name="fp32", reason=reason)


def _check_ensemble(args: argparse.Namespace) -> None:
    """Each ``--ensemble`` folder holds a run (the error names the option); repeats warn."""
    seen = {Path(args.run_dir).resolve()}
    for folder in args.ensemble:
        try:
            check_run_folder(folder)
        except UsageError as err:
            raise UsageError(f"--ensemble {folder}: {err}") from None
        if Path(folder).resolve() in seen:
            warn(f"--ensemble {folder} is already in the ensemble: its model counts twice")
        seen.add(Path(folder).resolve())


def run_translate(args: argparse.Namespace) -> int:
    """Translate buffer by buffer; each buffer's outputs are written as soon as it is done."""
    from ..nmt.decoding.output import TranslationOutput
    from ..nmt.decoding.streaming import input_buffers, translate_buffers
    from ..nmt.training.progress_lines import progress

    selection = head_selection(args, all_heads=True)
    _check_stream_options(args)
    _warn_file_names(args)
    run, settings = _load(args)
    if args.n_best and args.n_best > settings.beam_size:
        warn(
            f"--n-best {args.n_best} is more than the beam ({settings.beam_size}): the search "
            f"keeps {settings.beam_size} hypotheses a line, so at most {settings.beam_size} "
            "are written"
        )
    engine = _engine(args, run)
    sinks = _sinks(args, selection, settings, run)
    lines = sys.stdin if args.src is None else _open_src(args.src)
    show = args.progress
    if show is None:
        show = _automatic_progress(args, lines)
    with (
        lines if args.src else contextlib.nullcontext(),
        search_memory(settings),
        decoding_precision(run),
        TranslationOutput(run, sinks, echo=stderr) as output,
        progress(show, unit=" lines", desc="translate", every_s=10.0, dynamic_ncols=True) as bar,
    ):
        _warn_unused_view_options(args)  # after the output has checked the layer and head
        buffers = input_buffers(args.sentences, lines, args.buffer_size, warn=warn)
        for first, translations in translate_buffers(
            run,
            buffers,
            settings,
            n_best=sinks.search_n_best,
            warn=warn,
            engine=engine,
            supervised=sinks.shows_attention,
        ):
            output.write(first, translations)
            bar.update(len(translations))
        output.finish()
    return 0


def _automatic_progress(args: argparse.Namespace, lines) -> bool:
    """Whether translate shows its progress unasked: for a file being read (not sentences
    or a pipe) whose translations do not go to a terminal. On a terminal the bar's redraws
    landed among the translations ('translate: 0 lines [00:00, ? lines/s]ein Mann'), and
    the lines scrolling by show the progress already."""
    from ..nmt.decoding.streaming import is_regular_file

    return not args.sentences and is_regular_file(lines) and not _is_terminal(sys.stdout)


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no such method, or closed
        return False


def _warn_file_names(args: argparse.Namespace) -> None:
    """A sentence argument that names a file is translated as text; say how to read the file
    (``--src FILE``, as evaluate, inspect and align take it)."""
    for sentence in args.sentences:
        if os.path.isfile(sentence):  # False, not OSError, for a sentence too long to be a name
            warn(
                f"{sentence} is a file; translating its name as a sentence (to translate "
                f"its lines: attnkit translate {quote(args.run_dir)} --src {quote(sentence)})"
            )


def _sinks(args: argparse.Namespace, selection, settings, run):
    """Where translate writes, from its options."""
    from ..nmt.decoding.output import Sinks

    page = None
    if args.html:
        from ..serve import write_html
        from ..serve.export import text_languages

        about = f"run {run.config.name} ({run.folder}), {run.config.data.direction}"
        languages = text_languages(run.config.data)

        def page(records):
            return write_html(
                args.html, records, beam_size=settings.beam_size, about=about, languages=languages
            )

    return Sinks(
        show_attention=args.show_attention,
        attention_out=args.attention_out,
        json=args.attention_json,
        n_best=min(args.n_best or 0, settings.beam_size),  # the warning's "at most K"
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
        warn(
            f"{' and '.join(given)} {verb} the attention that --plot, --show-attention, "
            f"--attention-json and --html show; without one of them {it} nothing"
        )


def _check_src(path: str) -> None:
    """``--src`` names something to read lines from: a file, or a pipe (``<(cut -f1 t.tsv)``,
    a named pipe) as evaluate reads one; a folder, a missing path or one this user may not
    read is a usage error (before the model loads)."""
    if os.path.isdir(path):
        raise UsageError(f"--src {path} is a folder, not a file")
    if not os.path.exists(path):
        raise UsageError(f"--src {path}: no such file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"--src {path}: no permission to read it")


def _open_src(path: str):
    """``--src``'s lines (closed by the caller); one that cannot be opened (a socket, a file
    made unreadable since it was checked) is a usage error naming it, not a traceback."""
    try:
        return open(path, encoding="utf-8")  # noqa: SIM115
    except OSError as err:
        raise UsageError(f"--src {path}: cannot read it ({err.strerror})") from None


def _check_stream_options(args: argparse.Namespace) -> None:
    if args.src is not None and args.sentences:
        raise UsageError("give sentences or --src FILE, not both")
    if args.src is not None:
        _check_src(args.src)
    if args.buffer_size < 1:
        raise UsageError(f"--buffer-size must be >= 1, got {args.buffer_size}")
    if args.n_best is not None and args.n_best < 1:
        raise UsageError(f"--n-best must be >= 1, got {args.n_best}")
    if args.n_best is not None and not args.attention_json:
        raise UsageError("--n-best needs --attention-json FILE (the hypotheses go there)")
    if args.attention_json == "-":
        raise UsageError("--attention-json -: stdout carries the translations; give a file name")
    if args.attention_out and not args.show_attention:
        raise UsageError("--attention-out needs --show-attention")
    if args.html and not Path(args.html).resolve().parent.is_dir():
        raise UsageError(f"--html {args.html}: its folder does not exist")
    outputs = {
        "--attention-json": args.attention_json,
        "--attention-out": args.attention_out,
        "--html": args.html,
    }
    # without sentences or --src the lines come from stdin, which may be a file (< in.txt)
    stdin = None if args.sentences or args.src else "/dev/stdin"
    for option, path in outputs.items():
        check_output(option, path, {"--src": args.src, "standard input": stdin})
    check_distinct_outputs(outputs)


def run_evaluate(args: argparse.Namespace) -> int:
    from ..atomic import atomic_write_bytes
    from ..nmt.analysis.evaluate import evaluate_corpus, evaluate_run

    if args.output == "-":
        raise UsageError("--output -: stdout carries the scores; give a file name")
    check_output("--output", args.output, {"--src": args.src, "--tgt": args.tgt})
    corpus = _own_test_set(args)  # read before the model loads: file errors come first
    run, settings = _load(args)
    engine = _engine(args, run)
    with search_memory(settings), decoding_precision(run):
        if corpus is None:
            label = args.split or "test"
            check_split(run, label)
            result = evaluate_run(run, label, settings, warn=warn, engine=engine)
        else:
            label = args.src
            result = evaluate_corpus(run, corpus, args.src, settings, warn=warn, engine=engine)
    _print_scores(label, result, settings.beam_size)
    if args.output:
        text = "".join(f"{h}\n" for h in result.hypotheses)
        atomic_write_bytes(Path(args.output), text.encode("utf-8"))
    return 0


def _print_scores(label: str, result, beam: int) -> None:
    """The summary line and the three scores, on stdout (a full disk names ``<stdout>``)."""
    from ..atomic import STDOUT, writing

    with writing(STDOUT):
        print(f"{label}: {len(result.hypotheses)} sentences, beam {beam}{_empty_lines(result)}")
        for score in (result.bleu, result.chrf, result.tokenized_bleu):
            print(score)


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
