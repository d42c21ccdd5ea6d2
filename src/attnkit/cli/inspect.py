"""CLI command inspect: corpus figures of a run's attention (entropy, coverage, monotonicity).

``attnkit inspect RUN_DIR [--split test | --src FILE --tgt FILE] [--json FILE] [--plot FILE]``
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .decoding import check_search_options, decoding_precision, search_options, search_settings
from .errors import UsageError, warn
from .outputs import check_output
from .run_dir import check_split, load_run_folder, pair_file_options, run_options


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the inspect command."""
    p = subparsers.add_parser(
        "inspect",
        help="attention diagnostics of a run on a corpus (entropy, coverage, monotonicity)",
        description=(
            "Translate a split of the run's data (or --src/--tgt files) with the run's search "
            "settings and print corpus figures of the attention: mean entropy per output step, "
            "mass on padding (must be 0), coverage per source word and the shares under 0.5 "
            "and over 1.5, monotonicity (Spearman), repeated 3-gram rate and length ratio."
        ),
    )
    run_options(p)
    p.add_argument("--split", choices=("test", "valid", "train"), help="default: test")
    pair_file_options(p, "references, line-aligned with --src")
    search_options(p)
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    p.add_argument("--plot", metavar="FILE", help="draw a coverage histogram (.png/.svg/.pdf)")
    p.set_defaults(func=run_inspect)


def _corpus(args: argparse.Namespace, run) -> tuple[list[str], list[str], str]:
    """Sources, references and a name for them: --src/--tgt files or a split, every line
    kept (a blank source gets "", as evaluate scores it), so warnings name the file's line."""
    from ..nmt.data.corpus import load_split, read_parallel

    if args.split and (args.src or args.tgt):
        raise UsageError("give --split or --src/--tgt, not both")
    if args.src or args.tgt:
        if not (args.src and args.tgt):
            raise UsageError("give both --src FILE and --tgt FILE")
        corpus = read_parallel(args.src, args.tgt, keep_empty=True)
        return corpus.src, corpus.tgt, str(args.src)
    check_split(run, args.split or "test")
    corpus = load_split(run.config.data, args.split or "test", keep_empty=True)
    return corpus.src, corpus.tgt, args.split or "test"


def _json_number(value):
    """``value``, or None where it is a float JSON cannot write (NaN, an infinity)."""
    import math

    return None if isinstance(value, float) and not math.isfinite(value) else value


def run_inspect(args: argparse.Namespace) -> int:
    import json

    from ..atomic import atomic_write_bytes
    from ..nmt.analysis.inspect import inspect_run

    check_search_options(args)
    for option, path in (("--json", args.json), ("--plot", args.plot)):
        check_output(option, path, {"--src": args.src, "--tgt": args.tgt})
    if args.plot:
        from ..plot import check_path

        check_path(args.plot)
    run = load_run_folder(args)
    settings = search_settings(args, run)
    sources, references, name = _corpus(args, run)
    with decoding_precision(run):
        found = inspect_run(run, sources, references, settings, warn=warn)
    figures = {
        "corpus": name,
        "beam_size": settings.beam_size,
        "length_penalty": settings.length_penalty,
        "coverage_penalty": settings.coverage_penalty,
        "no_repeat_ngram": settings.no_repeat_ngram,
        "early_stopping": settings.early_stopping,
        **found.summary.as_dict(),
    }
    figures.update(bleu=found.bleu.score, chrf=found.chrf.score)
    for key, value in figures.items():
        print(f"{key:>24}: {value:.4f}" if isinstance(value, float) else f"{key:>24}: {value}")
    if args.json:  # JSON has no NaN: an undefined figure (monotonicity of no sentence) is null
        strict = {k: _json_number(v) for k, v in figures.items()}
        text = json.dumps(strict, indent=2, allow_nan=False) + "\n"
        atomic_write_bytes(Path(args.json), text.encode("utf-8"))
    if args.plot:
        from ..plot import coverage_histogram

        coverage_histogram(found.coverage.tolist(), title=f"coverage: {name}", path=args.plot)
    return 0
