"""CLI command align: a run's attention turned into word alignments, scored by AER.

``attnkit align RUN_DIR (--src FILE --tgt FILE | --bitext FILE) [--gold FILE] [--out FILE]
[--layer auto --dev-bitext FILE --dev-gold FILE] [--symmetrize METHOD --reverse-run DIR]``
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from .decoding import decoding_precision, head_selection, view_options
from .errors import UsageError, warn
from .outputs import check_output
from .run_dir import load_batched_run, pair_file_options, run_options

AGREEMENT, MUTUAL = "agreement", "mutual"
WEIGHT_RULES = (AGREEMENT, MUTUAL)  # rules on the two directions' weights, not their links
# attnkit.nmt.analysis.symmetrize.SYMMETRIZATIONS and those two, without importing torch here
SYMMETRIZATIONS = (
    "intersection", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and", AGREEMENT,
    MUTUAL,
)  # fmt: skip
METHOD_THRESHOLD, AGREEMENT_THRESHOLD = 0.3, 0.1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the align command."""
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
    run_options(p)
    p.add_argument(
        "--batch-size", type=int, default=32, metavar="N", help="sentences per batch (default 32)"
    )
    pair_file_options(p, "target sentences, line-aligned with --src")
    p.add_argument("--bitext", metavar="FILE", help="'source ||| target' lines instead")
    p.add_argument("--gold", metavar="FILE", help="gold links: i-j sure, ipj possible")
    p.add_argument(
        "--gold-base", type=int, default=1, choices=(0, 1), help="first index in --gold (default 1)"
    )
    p.add_argument("--out", metavar="FILE", help="write the alignments here (default: stdout)")
    p.add_argument(
        "--method",
        default="argmax",
        choices=("argmax", "threshold"),
        help="argmax: each target word's most attended source word; threshold: every source "
        "word whose weight reaches --threshold (default: argmax)",
    )
    p.add_argument(
        "--threshold",
        type=float,
        help="tau of --method threshold (default 0.3), or of --symmetrize agreement/mutual, "
        "where it bounds the product of the two directions' weights (default 0.1)",
    )
    p.add_argument(
        "--shift",
        choices=("0", "1", "auto"),
        help="1: align target word t with the step that reads it (row t+1); auto: the "
        "literature's rule from the run's config, 1 for an RNN with query_timing previous "
        "(Bahdanau), else 0 (default: the shift a guided-alignment run was trained with, "
        "else 0: measured better for both timings, docs/align.md)",
    )
    p.add_argument(
        "--merge", default="sum", choices=("sum", "max"), help="subwords -> words (default: sum)"
    )
    p.add_argument(
        "--jump-prior",
        type=float,
        default=0.0,
        metavar="LAMBDA",
        help="smooth each sentence's word weights with an HMM jump prior exp(-LAMBDA "
        "|jump - 1|) before drawing links (Vogel et al. 1996; 0.5 with --symmetrize "
        "agreement --threshold 0.2 aligned best, docs/align.md); 0, the default, is off",
    )
    view_options(p, all_heads=False, auto_layer=True)
    p.add_argument(
        "--dev-bitext",
        metavar="FILE",
        help="with --layer auto: development pairs ('source ||| target'), never the scored ones",
    )
    p.add_argument("--dev-gold", metavar="FILE", help="with --layer auto: their gold links")
    p.add_argument(
        "--symmetrize",
        choices=SYMMETRIZATIONS,
        help="combine with --reverse-run's target->source alignments: links (Koehn et al. "
        "2003), or 'agreement': the two directions' weights multiplied, a link where the "
        "product reaches --threshold (Liang et al. 2006), or 'mutual': those of them whose "
        "product is also the largest of its row and its column (docs/align.md)",
    )
    p.add_argument(
        "--reverse-run", metavar="DIR", help="a run trained target->source, for --symmetrize"
    )
    p.set_defaults(func=run_align)


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


def _options(args: argparse.Namespace, run):
    """The extraction options; a guided-alignment run is read, unless told otherwise,
    where it was supervised (its layer, head and shift), and always in the pass it
    was supervised in (``full_context``)."""
    from ..nmt.analysis.align import AlignOptions, default_shift, reads_full_context

    layer, args.layer = args.layer, None if args.layer == "auto" else args.layer
    heads = head_selection(args, all_heads=False)
    args.layer = layer
    guided = run.config.train.guided_alignment
    view = {"layer": heads.layer, "head": heads.head}
    if guided is not None and args.layer is None and args.head is None:
        layers = run.model.attention_layout.layers
        view = {"layer": guided.decoder_layer(layers), "head": guided.read_head()}
    if args.shift == "auto":
        shift = default_shift(run.config.model)
    elif args.shift is None:
        shift = guided.shift if guided is not None else 0
    else:
        shift = int(args.shift)
    return AlignOptions(
        method=args.method,
        threshold=args.threshold,
        shift=shift,
        merge=args.merge,
        full_context=reads_full_context(run.config),
        jump_prior=args.jump_prior,
        **view,
    )


def run_align(args: argparse.Namespace) -> int:
    from ..atomic import atomic_write_bytes
    from ..nmt.analysis.align import format_pharaoh
    from ..nmt.decoding.selection import HeadSelection

    _check_align_options(args)
    src_words, tgt_words = _word_pairs(args)
    gold = _gold(args, src_words, tgt_words) if args.gold else None
    dev = _dev_set(args) if args.layer == "auto" else None
    run = load_batched_run(args)
    options = _options(args, run)
    found, options = _run_alignments(args, run, options, src_words, tgt_words, dev)
    links = [a.links for a in found]
    if args.symmetrize:
        links = _symmetrized(args, run, found, src_words, tgt_words, dev)
    heads = HeadSelection(options.layer, options.head)
    text = "".join(f"{format_pharaoh(pair)}\n" for pair in links)
    if args.out:
        atomic_write_bytes(Path(args.out), text.encode("utf-8"))
    else:
        sys.stdout.write(text)
    if gold is not None:
        from ..nmt.analysis.metrics import alignment_error_rate

        score = alignment_error_rate(links, gold.sure, gold.possible)
        report = sys.stdout if args.out else sys.stderr
        layers = run.model.attention_layout
        which = heads.caption(layers.layers, layers.alignment_layer)
        rule = _describe(options)
        both = f", {args.symmetrize} with {args.reverse_run}" if args.symmetrize else ""
        if args.symmetrize in WEIGHT_RULES:  # the product is the rule, not --method
            mutual = "mutual best, " if args.symmetrize == MUTUAL else ""
            rule = f"{mutual}product >= {args.agreement_threshold}, shift {options.shift}"
            rule += f", jump prior {options.jump_prior}" if options.jump_prior else ""
        print(f"{len(links)} sentence pairs, {rule}, {which}{both}", file=report)
        print(score, file=report)
    return 0


def _check_align_options(args: argparse.Namespace) -> None:
    inputs = {
        "--src": args.src,
        "--tgt": args.tgt,
        "--bitext": args.bitext,
        "--gold": args.gold,
        "--dev-bitext": args.dev_bitext,
        "--dev-gold": args.dev_gold,
    }
    check_output("--out", args.out, inputs)
    if bool(args.symmetrize) != bool(args.reverse_run):
        raise UsageError("--symmetrize and --reverse-run go together (give both or neither)")
    tau = args.threshold
    if tau is not None and not 0.0 < tau <= 1.0:
        raise UsageError(f"--threshold must be in (0, 1], got {tau}")
    if not (math.isfinite(args.jump_prior) and args.jump_prior >= 0):
        raise UsageError(f"--jump-prior must be >= 0 and finite, got {args.jump_prior}")
    agreement = args.symmetrize in WEIGHT_RULES
    if tau is not None and args.method == "argmax" and not agreement:
        warn(
            f"--threshold {tau} has no effect with --method argmax: it is the tau of "
            "--method threshold and of --symmetrize agreement/mutual"
        )
    args.agreement_threshold = AGREEMENT_THRESHOLD if tau is None else tau
    args.threshold = METHOD_THRESHOLD if tau is None or agreement else tau
    auto = args.layer == "auto"
    if auto != bool(args.dev_bitext and args.dev_gold) or (
        not auto and (args.dev_bitext or args.dev_gold)
    ):
        raise UsageError(
            "--layer auto needs --dev-bitext FILE and --dev-gold FILE (a development set, not "
            "the pairs being scored), and they are only used with --layer auto"
        )
    if auto and (args.head is not None or args.shift is not None):
        raise UsageError(
            "--layer auto chooses the head and the shift too: leave out --head and --shift"
        )


def _dev_set(args: argparse.Namespace):
    """Development words and gold for --layer auto, checked like --gold."""
    from ..nmt.analysis.align import read_bitext

    src, tgt = read_bitext(args.dev_bitext)
    gold = _gold(argparse.Namespace(**{**vars(args), "gold": args.dev_gold}), src, tgt)
    return src, tgt, gold


def _flip(src, tgt, gold):
    """The development set seen from a target->source run."""
    from ..nmt.analysis.align import GoldAlignment

    turn = [{(j, i) for i, j in links} for links in gold.sure]
    maybe = [{(j, i) for i, j in links} for links in gold.possible]
    return tgt, src, GoldAlignment(turn, maybe)


def _symmetrized(args, run, found, src_words, tgt_words, dev) -> list[set[tuple[int, int]]]:
    """The links of ``found`` (``run``'s) combined with --reverse-run's, by --symmetrize."""
    from ..nmt.analysis.symmetrize import agreement_links, symmetrize_all

    reverse_run = load_batched_run(args, args.reverse_run)
    _warn_same_direction(run.config.data, reverse_run.config.data, args.reverse_run)
    flipped = None if dev is None else _flip(*dev)
    back, _ = _run_alignments(
        args, reverse_run, _options(args, reverse_run), tgt_words, src_words, flipped
    )
    if args.symmetrize in WEIGHT_RULES:
        tau, mutual = args.agreement_threshold, args.symmetrize == MUTUAL
        return [
            agreement_links(f.weights, b.weights, tau, mutual=mutual)
            for f, b in zip(found, back, strict=True)
        ]
    reverse = [{(i, j) for j, i in a.links} for a in back]  # back to (source, target)
    return symmetrize_all([a.links for a in found], reverse, args.symmetrize)


def _warn_same_direction(forward, reverse, reverse_dir: str) -> None:
    """Warn when --reverse-run's languages are the run's, in the same order: its links would
    be read the wrong way round. Only a warning: a toy task is its own inverse, and a user
    corpus's ``src_lang``/``tgt_lang`` labels may have been left at their defaults."""
    if (forward.src_lang, forward.tgt_lang) == (reverse.src_lang, reverse.tgt_lang):
        warn(
            f"--reverse-run {reverse_dir} translates {reverse.src_lang}->{reverse.tgt_lang}, "
            f"the same direction as RUN_DIR; --symmetrize needs a run trained "
            f"{forward.tgt_lang}->{forward.src_lang} on the same pairs"
        )


def _run_alignments(args, run, options, src_words, tgt_words, dev):
    """One run's word alignments (and the options used: the dev set's choice with --layer auto)."""
    from ..nmt.analysis.align import align_words

    with decoding_precision(run):
        if dev is not None:
            options = _choose_layer(args, run, options, dev)
        found = align_words(
            run.model, run.src_tok, run.tgt_tok, src_words, tgt_words, options,
            batch_size=args.batch_size, device=run.device, warn=warn,
        )  # fmt: skip
    return found, options


def _choose_layer(args, run, options, dev):
    """``--layer auto``: the layer, head and shift with the lowest AER on the development pairs."""
    from ..nmt.analysis.layer_choice import choose_layer

    options, scores = choose_layer(
        run.model, run.src_tok, run.tgt_tok, *dev, options,
        batch_size=args.batch_size, device=run.device,
    )  # fmt: skip
    best = min(s.aer for s in scores)
    print(
        f"{run.folder}: --layer auto on {len(dev[0])} development pairs: layer {options.layer}, "
        f"head {options.head}, shift {options.shift} (dev AER {best:.3f}, the lowest of "
        f"{len(scores)} layer/head/shift choices)",
        file=sys.stderr,
    )
    return options


def _describe(options) -> str:
    rule = options.method if options.method == "argmax" else f"threshold {options.threshold}"
    context = ", full context" if options.full_context else ""
    jumps = f", jump prior {options.jump_prior}" if options.jump_prior else ""
    return f"{rule}, shift {options.shift}{context}, {options.merge} merge{jumps}"


def _lines(count: int) -> str:
    return f"{count} line" if count == 1 else f"{count} lines"


def _gold(args: argparse.Namespace, src_words, tgt_words):
    """The gold file, checked against the sentences: same count, every index inside."""
    from ..nmt.analysis.align import read_gold

    gold = read_gold(args.gold, one_based=args.gold_base == 1)
    if len(gold.sure) != len(src_words):
        raise UsageError(
            f"{args.gold} has {_lines(len(gold.sure))} but there are {len(src_words)} sentence "
            "pairs"
        )
    for number, (links, s, t) in enumerate(
        zip(gold.possible, src_words, tgt_words, strict=True), start=1
    ):
        bad = [(i, j) for i, j in links if i >= len(s) or j >= len(t)]
        if bad:
            i, j = bad[0]
            kind = "-" if bad[0] in gold.sure[number - 1] else "p"  # as the file writes it
            raise UsageError(
                f"{args.gold}, line {number}: link {i + args.gold_base}{kind}{j + args.gold_base} "
                f"is outside the pair ({len(s)} source, {len(t)} target words)"
            )
    return gold
