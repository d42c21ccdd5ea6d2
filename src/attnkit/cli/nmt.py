"""CLI commands: train, translate, evaluate (registered by attnkit.cli.build_parser).

``attnkit train CONFIG.yaml [--out DIR] [--set key=value ...] [--section.key VALUE ...]``
``attnkit train --resume RUN_DIR`` (continue a run from its own saved config)
``attnkit translate RUN_DIR [SENTENCE ...] [--beam K] [--buffer-size N] [--progress]
[--show-attention [--attention-out FILE]] [--attention-json FILE [--n-best N]] [--plot DIR]
[--layer L] [--head H|all]``
``attnkit evaluate RUN_DIR [--split test | --src FILE --ref FILE] [--beam K] [--output FILE]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import stat
import sys
from pathlib import Path

from .errors import UsageError

OVERRIDE_PREFIX = "override:"
DEFAULT_BUFFER_LINES = 256


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
    from ..nmt.training.distributed import MainFailed, PeerLost
    from ..nmt.training.loop import TrainingError, train

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
    from ..nmt.runs.loaded_run import load_run

    if args.beam is not None and args.beam < 1:
        raise UsageError(f"--beam must be >= 1, got {args.beam}")
    device = resolve_device(args.device, "--device")
    run = load_run(args.run_dir, checkpoint=args.checkpoint, device=str(device))
    apply_search_options(args, run)
    return run


def run_translate(args: argparse.Namespace) -> int:
    """Translate buffer by buffer; each buffer's outputs are written as soon as it is done."""
    from ..nmt.decoding.streaming import translate_buffers

    head = _head(args.head)
    _check_stream_options(args)
    run = _load(args)
    _check_view(run, args.layer, head)
    if hasattr(sys.stdout, "reconfigure"):  # a terminal that cannot show a character gets "?"
        sys.stdout.reconfigure(errors="replace")
    with contextlib.ExitStack() as stack:
        sinks = _TranslateSinks(args, run, head, stack)
        for first, translations in translate_buffers(
            run, _input_buffers(args), beam_size=args.beam, warn=_warn
        ):
            sinks.write(first, translations)
        sinks.close()
    return 0


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


def _input_buffers(args: argparse.Namespace):
    """The sentences given as arguments, else stdin, in buffers of ``--buffer-size`` lines."""
    from ..nmt.decoding.streaming import read_buffers

    if args.sentences:
        size = args.buffer_size
        return (args.sentences[i : i + size] for i in range(0, len(args.sentences), size))
    binary = getattr(sys.stdin, "buffer", None)
    if binary is None:  # a text stream without bytes underneath (e.g. io.StringIO)
        binary = io.BytesIO(sys.stdin.read().encode("utf-8", "replace"))
    return read_buffers(binary, args.buffer_size, warn=_warn)


def _stdin_is_a_file() -> bool:
    try:
        return stat.S_ISREG(os.fstat(sys.stdin.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):  # no descriptor (captured in tests)
        return False


class _TranslateSinks:
    """Where translate writes: stdout, the alignments, the JSON Lines, the heatmaps, progress."""

    def __init__(self, args: argparse.Namespace, run, head, stack: contextlib.ExitStack) -> None:
        from tqdm.auto import tqdm

        self.args, self.run, self.head = args, run, head
        self.chosen = args.layer is not None or head is not None
        self.alignments = sys.stderr if args.show_attention else None
        if args.show_attention and args.attention_out:
            self.alignments = stack.enter_context(_open_for_writing(args.attention_out))
        self.json = None
        if args.attention_json:
            self.json = stack.enter_context(_open_for_writing(args.attention_json))
        if args.plot:
            _clear_old_heatmaps(Path(args.plot))
        self.page = [] if args.html else None  # translations for --html, written at the end
        show = args.progress or (not args.sentences and _stdin_is_a_file())
        self.bar = stack.enter_context(
            tqdm(unit=" lines", file=sys.stderr, disable=not show, dynamic_ncols=True)
        )

    def write(self, first: int, translations) -> None:
        """Write one buffer's translations (input lines ``first``, ``first + 1``, ...)."""
        for t in translations:
            print(t.text)
        sys.stdout.flush()
        if self.alignments is not None:
            self._write_alignments(first, translations)
        if self.json is not None:
            self._write_json(first, translations)
        if self.args.plot:
            _plot(self.run, translations, Path(self.args.plot), self.args.layer, self.head, first)
        if self.page is not None:
            self.page.extend(translations)
        self.bar.update(len(translations))

    def close(self) -> None:
        """Write what needs every translation (the --html page)."""
        if self.page is not None:
            from ..serve import write_html

            beam = self.args.beam or self.run.config.decode.beam_size
            path = write_html(self.args.html, self.run, self.page, beam_size=beam)
            print(f"html: {path}", file=sys.stderr)

    def _weights(self, t):
        """The --layer/--head cross-attention when chosen, else None (the translation's own)."""
        if not self.chosen or t.weights is None:
            return None
        return _chosen_cross(self.run, t, self.args.layer, self.head)

    def _write_alignments(self, first: int, translations) -> None:
        from ..nmt.decoding.translate import alignment_text

        for number, t in enumerate(translations, start=first):
            if t.weights is not None:
                print(f"line {number}: {t.text}", file=self.alignments)
                print(alignment_text(t, self._weights(t)), file=self.alignments)
        self.alignments.flush()

    def _write_json(self, first: int, translations) -> None:
        from ..nmt.decoding.streaming import json_record, n_best

        n = self.args.n_best
        best = (
            n_best(self.run, translations, n, self.args.beam) if n else [None] * len(translations)
        )
        for number, (t, hyps) in enumerate(zip(translations, best, strict=True), start=first):
            record = json_record(self.run, t, number, self._weights(t), hyps)
            self.json.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.json.flush()


def _open_for_writing(path: str):
    try:
        return open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed by the ExitStack)
    except OSError as err:
        raise UsageError(f"cannot write {path}: {err.strerror}") from None


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
    from ..nmt.decoding.views import attention_views, pick
    from ..nmt.vocab_ids import EOS, NUM_SPECIAL

    views = attention_views(run.model, [NUM_SPECIAL], [EOS], run.device)  # one-token probe
    for weights in (views.cross, views.encoder, views.decoder):
        if weights is not None:
            pick(weights, layer, None if head == "all" else head)


def _chosen_cross(run, translation, layer: int | None, head):
    """Cross-attention of ``--layer``/``--head`` (head average for ``all``), (T, S)."""
    from ..nmt.decoding.views import attention_views, pick

    views = attention_views(run.model, translation.src_ids, translation.output_ids, run.device)
    return pick(views.cross, layer, None if head == "all" else head)


# What --plot writes: sentence_NNN.png, sentence_NNN.encoder.png, sentence_NNN.decoder.png
_HEATMAP_NAME = re.compile(r"sentence_\d{3,}(\.encoder|\.decoder)?\.png")


def _clear_old_heatmaps(folder: Path) -> None:
    """Delete the heatmaps an earlier ``translate --plot`` left in ``folder`` (only those)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for path in folder.iterdir():
            if _HEATMAP_NAME.fullmatch(path.name) and path.is_file():
                path.unlink()
    except OSError as err:
        raise UsageError(f"cannot write heatmaps to {folder}: {err.strerror}") from None


def _plot(run, translations, folder: Path, layer: int | None, head, first: int = 1) -> None:
    """Heatmaps of each translation, numbered by input line (``first`` = the first's)."""
    from ..nmt.decoding.views import attention_views, write_heatmaps

    for number, t in enumerate(translations, start=first):
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
    from ..atomic import atomic_write_bytes
    from ..nmt.analysis.evaluate import evaluate_corpus, evaluate_run

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
    from ..nmt.data.corpus import read_parallel

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
