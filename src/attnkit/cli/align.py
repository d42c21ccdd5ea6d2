"""CLI commands: align (attention -> word alignments, AER) and inspect (attention diagnostics).

``attnkit align RUN_DIR (--src FILE --tgt FILE | --bitext FILE) [--gold FILE] [--out FILE]``
``attnkit inspect RUN_DIR [--split test | --src FILE --tgt FILE] [--json FILE] [--plot FILE]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .decoding import (
    check_search_options,
    decoding_precision,
    head_selection,
    precision_option,
    search_options,
    search_settings,
    view_options,
)
from .errors import UsageError, warn
from .run_hint import check_run_folder


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the align and inspect commands."""
    _register_align(subparsers)
    _register_inspect(subparsers)


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="run folder written by 'attnkit train'")
    p.add_argument("--checkpoint", default="best", choices=("best", "last"))
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    precision_option(p)
    p.add_argument("--batch-size", type=int, default=32, help="sentences per batch (default 32)")


def _register_align(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "align",
        help="word alignments from a run's attention (Pharaoh i-j), AER against gold",
        description=(
            "Force-decode the given targets (teacher forcing, no search) and turn the "
            "cross-attention into word links, one line per pair in Pharaoh format (0-based "
            "'source-target' word indices). Input is whitespace-tokenized words; subword "
            "pieces are merged back to them and </s> is dropped. With --gold, print precision, "
            "recall and AER (Och & Ney 2003)."
        ),
    )
    _run_options(p)
    p.add_argument("--src", metavar="FILE", help="source sentences, one per line")
    p.add_argument(
        "--tgt",
        "--ref",
        dest="tgt",
        metavar="FILE",
        help="target sentences, line-aligned with --src (--ref is the same option)",
    )
    p.add_argument("--bitext", metavar="FILE", help="'source ||| target' lines instead")
    p.add_argument("--gold", metavar="FILE", help="gold links: i-j sure, ipj possible")
    p.add_argument(
        "--gold-base", type=int, default=1, choices=(0, 1), help="first index in --gold (default 1)"
    )
    p.add_argument("--out", metavar="FILE", help="write the alignments here (default: stdout)")
    p.add_argument("--method", default="argmax", choices=("argmax", "threshold"))
    p.add_argument(
        "--threshold", type=float, default=0.3, help="tau of --method threshold (default 0.3)"
    )
    p.add_argument(
        "--shift",
        default="0",
        choices=("0", "1", "auto"),
        help="1: align target word t with the step that reads it (row t+1); auto: the "
        "literature's rule from the run's config, 1 for an RNN with query_timing previous "
        "(Bahdanau), else 0 (default 0: measured better for both timings, docs/align.md)",
    )
    p.add_argument("--merge", default="sum", choices=("sum", "max"), help="subwords -> words")
    view_options(p, all_heads=False)
    p.set_defaults(func=run_align)


def _load(args: argparse.Namespace):
    from ..nmt.runs.loaded_run import load_run

    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    check_run_folder(args.run_dir)
    return load_run(
        args.run_dir,
        checkpoint=args.checkpoint,
        device=args.device,
        precision=args.precision,
        option="--precision",
    )


def _word_pairs(args: argparse.Namespace) -> tuple[list[list[str]], list[list[str]]]:
    """Source and target words from --bitext or --src/--tgt."""
    from ..nmt.analysis.align import read_bitext
    from ..nmt.data.corpus import read_lines

    if args.bitext and (args.src or args.tgt):
        raise UsageError("give --bitext or --src/--tgt, not both")
    if args.bitext:
        return read_bitext(args.bitext)
    if not (args.src and args.tgt):
        raise UsageError("give --src FILE and --tgt FILE (or --bitext FILE)")
    src, tgt = read_lines(args.src), read_lines(args.tgt)
    if len(src) != len(tgt):
        raise UsageError(f"{args.src} has {len(src)} lines but {args.tgt} has {len(tgt)}")
    return [line.split() for line in src], [line.split() for line in tgt]


def _options(args: argparse.Namespace, model_config):
    from ..nmt.analysis.align import AlignOptions, default_shift

    heads = head_selection(args, all_heads=False)
    shift = default_shift(model_config) if args.shift == "auto" else int(args.shift)
    return AlignOptions(
        method=args.method,
        threshold=args.threshold,
        shift=shift,
        merge=args.merge,
        layer=heads.layer,
        head=heads.head,
    )


def run_align(args: argparse.Namespace) -> int:
    from ..atomic import atomic_write_bytes
    from ..nmt.analysis.align import align_words, format_pharaoh
    from ..nmt.decoding.selection import HeadSelection

    src_words, tgt_words = _word_pairs(args)
    gold = _gold(args, src_words, tgt_words) if args.gold else None
    run = _load(args)
    options = _options(args, run.config.model)
    heads = HeadSelection(options.layer, options.head)
    with decoding_precision(run):
        alignments = align_words(
            run.model,
            run.src_tok,
            run.tgt_tok,
            src_words,
            tgt_words,
            options,
            batch_size=args.batch_size,
            device=run.device,
        )
    text = "".join(f"{format_pharaoh(a.links)}\n" for a in alignments)
    if args.out:
        atomic_write_bytes(Path(args.out), text.encode("utf-8"))
    else:
        sys.stdout.write(text)
    if gold is not None:
        from ..nmt.analysis.metrics import alignment_error_rate

        score = alignment_error_rate([a.links for a in alignments], gold.sure, gold.possible)
        report = sys.stdout if args.out else sys.stderr
        layers = run.model.attention_layout
        which = heads.caption(layers.layers, layers.alignment_layer)
        print(f"{len(alignments)} sentence pairs, {_describe(options)}, {which}", file=report)
        print(score, file=report)
    return 0


def _describe(options) -> str:
    rule = options.method if options.method == "argmax" else f"threshold {options.threshold}"
    return f"{rule}, shift {options.shift}, {options.merge} merge"


def _gold(args: argparse.Namespace, src_words, tgt_words):
    """The gold file, checked against the sentences: same count, every index inside."""
    from ..nmt.analysis.align import read_gold

    gold = read_gold(args.gold, one_based=args.gold_base == 1)
    if len(gold.sure) != len(src_words):
        raise UsageError(
            f"{args.gold} has {len(gold.sure)} lines but there are {len(src_words)} sentence pairs"
        )
    for number, (links, s, t) in enumerate(
        zip(gold.possible, src_words, tgt_words, strict=True), start=1
    ):
        bad = [(i, j) for i, j in links if i >= len(s) or j >= len(t)]
        if bad:
            i, j = bad[0]
            raise UsageError(
                f"{args.gold}, line {number}: link {i + args.gold_base}-{j + args.gold_base} "
                f"is outside the pair ({len(s)} source, {len(t)} target words)"
            )
    return gold


def _register_inspect(subparsers: argparse._SubParsersAction) -> None:
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
    _run_options(p)
    p.add_argument("--split", choices=("test", "valid", "train"), help="default: test")
    p.add_argument("--src", metavar="FILE", help="source sentences, one per line")
    p.add_argument(
        "--tgt",
        "--ref",
        dest="tgt",
        metavar="FILE",
        help="references, line-aligned with --src (--ref is the same option)",
    )
    search_options(p)
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    p.add_argument("--plot", metavar="FILE", help="draw a coverage histogram (.png/.svg/.pdf)")
    p.set_defaults(func=run_inspect)


def _corpus(args: argparse.Namespace, run) -> tuple[list[str], list[str], str]:
    """Sources, references and a name for them: --src/--tgt files or a split."""
    from ..nmt.data.corpus import load_split, read_parallel

    if args.split and (args.src or args.tgt):
        raise UsageError("give --split or --src/--tgt, not both")
    if args.src or args.tgt:
        if not (args.src and args.tgt):
            raise UsageError("give both --src FILE and --tgt FILE")
        corpus = read_parallel(args.src, args.tgt)
        return corpus.src, corpus.tgt, str(args.src)
    corpus = load_split(run.config.data, args.split or "test")
    return corpus.src, corpus.tgt, args.split or "test"


def run_inspect(args: argparse.Namespace) -> int:
    import json

    from ..atomic import atomic_write_bytes
    from ..nmt.analysis.inspect import inspect_run

    check_search_options(args)
    if args.plot:
        from ..plot import check_path

        check_path(args.plot)
    run = _load(args)
    settings = search_settings(args, run)
    sources, references, name = _corpus(args, run)
    with decoding_precision(run):
        found = inspect_run(run, sources, references, settings, warn=warn)
    figures = {
        "corpus": name,
        "beam_size": settings.beam_size,
        "coverage_penalty": settings.coverage_penalty,
        "no_repeat_ngram": settings.no_repeat_ngram,
        **found.summary.as_dict(),
    }
    figures.update(bleu=found.bleu.score, chrf=found.chrf.score)
    for key, value in figures.items():
        print(f"{key:>24}: {value:.4f}" if isinstance(value, float) else f"{key:>24}: {value}")
    if args.json:
        text = json.dumps(figures, indent=2) + "\n"
        atomic_write_bytes(Path(args.json), text.encode("utf-8"))
    if args.plot:
        from ..plot import coverage_histogram

        coverage_histogram(found.coverage.tolist(), title=f"coverage: {name}", path=args.plot)
    return 0
