"""AER of a run's attention against eflomal on the same text, scored by the same code.

From the root of a clone, the one table (eflomal, RNN attention, Transformer
attention at its best layer and shift, guided attention; precision, recall,
AER and each run's best validation BLEU)::

    python -m benchmarks.align_aer --table --rnn DIR [--rnn-reverse DIR]
        --transformer DIR [--transformer-reverse DIR] --guided DIR [--guided-reverse DIR]
        [--dev-pairs 100] [--checkpoint best|averaged] [--draws 3] [--json FILE]

The layer and shift of a Transformer (and the extraction rule of every run)
are chosen on the first ``--dev-pairs`` gold pairs (development); every
figure of the table, eflomal's included, is scored on the remaining pairs
only, so nothing is tuned on the pairs it is scored on. eflomal is sampled (seeded
from ``/dev/urandom``), so its rows are the means of ``--draws`` runs, their range in
the name. ``--checkpoint averaged`` reads the runs' ``train.average_last``
checkpoints. A ``*-reverse`` run
(French->English) adds grow-diag-final-and of the two directions' links and
their agreement (the product of their word weights, plain or mutual best, each direction
first smoothed with an HMM jump prior or not, the rule, its threshold and the prior's
strength chosen on the development pairs; :mod:`attnkit.nmt.analysis.symmetrize`,
:mod:`attnkit.nmt.analysis.jump_prior`).

Guided-alignment labels from eflomal, for the training pairs only::

    python -m benchmarks.align_aer --write-labels OUT --config configs/align_transformer.yaml

runs eflomal on every line of the config's training corpus file plus the 447
test pairs as plain text (as unsupervised aligners are used), and writes
grow-diag-final-and links (``--label-rule intersection``: the intersection) for the
training file's lines only (``OUT``, line-aligned
with it; blank lines for blank pairs) and the same turned round (``OUT.reverse``,
for a French->English run). Its words are the lines' punctuation-split words
(:mod:`attnkit.nmt.data.word_split`: punctuation and French elisions split,
as the gold set is tokenized), lowercased: train on them with
``train.guided_alignment.words: punctuation``. With ``--test-copies N`` the model
sees the test text as eflomal does, as plain parallel text: ``OUT.train.tsv`` is the
config's training split followed by the 447 test pairs N times (their label lines
blank, so no link of a test pair is ever trained on), ``OUT.valid.tsv`` its held-out
validation split, and the command prints the ``--set`` flags that train on them.

The per-setting sweep of one run (as before)::

    python -m benchmarks.align_aer RUN_DIR [--reverse-run DIR] [--gold-dir DIR]
        [--eflomal-venv DIR] [--json FILE]

Attention: ``attnkit.nmt.analysis.align.align_words`` on the Hansards English-French
gold set (447 pairs, Och & Ney's sure/possible links, 1-based), for every
extraction method (argmax; thresholds 0.1-0.5), timing (shift 0/1) and
subword merge (sum/max); with ``--reverse-run DIR`` (a target->source run)
also both directions' attention symmetrised like eflomal's. Baseline:
eflomal (Östling & Tiedemann 2017), trained on the run's training text
(the config's train split) plus the 447 test sentences, as unsupervised
aligners are used; its forward, reverse,
intersection and grow-diag-final-and links are scored by the same
``attnkit.nmt.analysis.metrics.alignment_error_rate``.

eflomal runs in its own virtual environment (default ``/work/eflomal-venv``),
created with ``pip install eflomal`` when missing; when it cannot be built
the attention figures are still printed and the failure is reported.
Its text is lowercased and split at punctuation and French elisions
(``l'homme`` -> ``l' homme``), the Hansards' tokenization; the Hansards'
de-contracted French (``de le`` for ``du``) is left as it is on both sides.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from itertools import islice, product
from pathlib import Path

from attnkit.nmt.analysis.align import (
    AlignOptions,
    GoldAlignment,
    align_words,
    extract_links,
    read_bitext,
    read_gold,
    reads_full_context,
)
from attnkit.nmt.analysis.jump_prior import jump_smoothed
from attnkit.nmt.analysis.layer_choice import choose_layer
from attnkit.nmt.analysis.metrics import Link, alignment_error_rate
from attnkit.nmt.analysis.symmetrize import agreement_links, symmetrize, symmetrize_all
from attnkit.nmt.config import RunConfig
from attnkit.nmt.data.corpus import load_split, stream_parallel, stream_tsv
from attnkit.nmt.data.word_split import split_words
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.nmt.runs.run_folder import RunFolder

from .joined_pairs import join_pairs

ROOT = Path(__file__).resolve().parents[1]
GOLD_DIR = ROOT.parent / "shared" / "data" / "alignment_gold" / "hansards_enfr_awesome_align"
THRESHOLDS = (0.1, 0.2, 0.3, 0.5)
AGREEMENT_THRESHOLDS = (0.01, 0.03, 0.05, 0.07, 0.1, 0.2, 0.3, 0.5)
JUMP_PRIORS = (0.0, 0.2, 0.5, 1.0)  # lambda of the jump prior; 0 is off


def tokenize(text: str) -> str:
    """Lowercased words and punctuation, elisions split (``l'homme`` -> ``l' homme``): the
    ``punctuation`` rule of :mod:`attnkit.nmt.data.word_split`, then lowercased."""
    return " ".join(w.lower() for w in split_words(text, "punctuation"))


def attention_rows(run_dir: Path, src, tgt, gold) -> list[dict]:
    """AER of every extraction setting of the run's attention."""
    run = load_run(run_dir)
    rows = []
    for shift in (0, 1):
        for merge in ("sum", "max"):
            base = AlignOptions(shift=shift, merge=merge)
            found = _align(run, src, tgt, base)
            rules = [("argmax", None), *(("threshold", t) for t in THRESHOLDS)]
            for method, tau in rules:
                links = [extract_links(a.weights, method, tau or 0.3) for a in found]
                name = method if tau is None else f"threshold {tau}"
                rows.append(_row(f"attention {name}, shift {shift}, {merge}", links, gold))
    return rows


@dataclass
class SizedGold(GoldAlignment):
    """Gold links with each pair's length in words (source + target), for AER by length."""

    words: list[int] = field(default_factory=list)


LENGTHS = {"<=20": (0, 20), "21-40": (21, 40), ">40": (41, 10**9)}


def _row(name: str, links: list[set[Link]], gold) -> dict:
    score = alignment_error_rate(links, gold.sure, gold.possible)
    row = {"system": name, "aer": score.aer, "precision": score.precision,
           "recall": score.recall, "links": score.predicted}  # fmt: skip
    if isinstance(gold, SizedGold):
        row["aer_by_length"] = {b: _aer_within(links, gold, *LENGTHS[b]) for b in LENGTHS}
    return row


def _aer_within(links: list[set[Link]], gold: SizedGold, low: int, high: int) -> float | None:
    """AER of the pairs of ``low``..``high`` words (None: no such pair)."""
    keep = [k for k, w in enumerate(gold.words) if low <= w <= high]
    if not keep:
        return None
    pick = lambda seq: [seq[k] for k in keep]  # noqa: E731
    return alignment_error_rate(pick(links), pick(gold.sure), pick(gold.possible)).aer


GDFA = "grow-diag-final-and"


def _install_eflomal(venv: Path) -> None:
    """Make the virtual environment ``venv`` and pip-install eflomal into it.

    Raises:
        OSError: either step failed (no network, ``venv`` not writable); the message
            names ``--eflomal-venv`` and the commands that make it by hand.
    """
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "eflomal"], check=True)
    except (OSError, subprocess.CalledProcessError) as err:
        raise OSError(
            f"eflomal is not installed in --eflomal-venv {venv} and installing it failed "
            f"({err}); make it by hand: {sys.executable} -m venv {venv} && "
            f"{venv}/bin/pip install eflomal"
        ) from None


def _eflomal(venv: Path, lines: list[str]) -> tuple[list[set[Link]], list[set[Link]]]:
    """eflomal's forward and reverse links for ``source ||| target`` lines (installed if needed)."""
    if not (venv / "bin" / "eflomal-align").exists():
        _install_eflomal(venv)
    with tempfile.TemporaryDirectory() as tmp:
        bitext, fwd, rev = (Path(tmp) / name for name in ("bitext", "fwd", "rev"))
        bitext.write_text("\n".join(lines) + "\n", encoding="utf-8")
        cmd = [str(venv / "bin" / "eflomal-align"), "-i", str(bitext), "-f", str(fwd),
               "-r", str(rev), "--overwrite"]  # fmt: skip
        subprocess.run(cmd, check=True)
        forward = [_links(line) for line in fwd.read_text().splitlines()]
        reverse = [_links(line) for line in rev.read_text().splitlines()]
    return forward, reverse


def write_labels(
    config_path: Path,
    out: Path,
    venv: Path,
    src,
    tgt,
    test_copies: int = 0,
    rule: str = GDFA,
    joined: int = 0,
) -> None:
    """Guided-alignment labels from eflomal for every line of the training corpus file, over
    its punctuation-split words (``train.guided_alignment.words: punctuation``): eflomal's two
    directions symmetrised by ``rule`` (grow-diag-final-and, or intersection: fewer, surer
    links, at most one per word).

    With ``test_copies`` N > 0 or ``joined`` J > 0 the labels go with a new corpus instead:
    ``OUT.train.tsv`` (the config's training split, then J labelled pairs made of 2-5 of its
    pairs joined (:mod:`benchmarks.joined_pairs`), then the test pairs N times as plain text,
    with blank labels), ``OUT.train.json`` (those three counts, so eflomal is later given
    the original text once) and ``OUT.valid.tsv`` (its held-out validation split)."""
    data = RunConfig.load(config_path).data
    if data.train is None:
        raise SystemExit(f"{config_path}: --write-labels needs data.train files")
    new_corpus = bool(test_copies or joined)
    if new_corpus:
        split = load_split(data, "train", keep_empty=True)
        pairs = list(zip(split.src, split.tgt, strict=True))
    else:
        pairs = list(_file_pairs(data.train))
    words = [(tokenize(s).split(), tokenize(t).split()) for s, t in pairs]
    used = [k for k, (s, t) in enumerate(words) if s and t]
    lines = [f"{' '.join(words[k][0])} ||| {' '.join(words[k][1])}" for k in used]
    lines += [
        f"{' '.join(s).lower()} ||| {' '.join(t).lower()}" for s, t in zip(src, tgt, strict=True)
    ]
    forward, reverse = _eflomal(venv, lines)
    links: list[set[Link]] = [set() for _ in pairs]
    for k, f, r in zip(used, forward, reverse, strict=False):  # the test pairs are left out
        links[k] = symmetrize(f, r, rule)
    if new_corpus:
        lengths = [(len(s), len(t)) for s, t in words]
        extra = join_pairs(pairs, lengths, links, used, joined)
        test = [(" ".join(s), " ".join(t)) for s, t in zip(src, tgt, strict=True)]
        counts = {"train": len(pairs), "joined": joined, "test_copies": test_copies,
                  "test_pairs": len(test)}  # fmt: skip
        pairs = pairs + [p for p, _ in extra] + test * test_copies
        links = links + [x for _, x in extra] + [set() for _ in range(test_copies * len(test))]
        _write_corpus(data, out, pairs, counts)
    labels = [" ".join(f"{i}-{j}" for i, j in sorted(x)) for x in links]
    turned = [" ".join(f"{j}-{i}" for i, j in sorted(x)) for x in links]
    out.write_text("\n".join(labels) + "\n", encoding="utf-8")
    Path(f"{out}.reverse").write_text("\n".join(turned) + "\n", encoding="utf-8")
    print(f"{out}: {len(labels)} lines ({len(used)} aligned, {joined} joined) + {out}.reverse")
    print(
        "their indices count punctuation-split words (l' homme , dit-il .): train with "
        "train.guided_alignment.words: punctuation"
    )


def _file_pairs(files):
    if files.tsv is not None:
        return stream_tsv(files.tsv, files.src_column, files.tgt_column, keep_empty=True)
    return stream_parallel(files.src, files.tgt, keep_empty=True)


def _write_corpus(data, out: Path, pairs: list[tuple[str, str]], counts: dict) -> None:
    """``OUT.train.tsv`` (``pairs``), ``OUT.train.json`` (``counts``) and ``OUT.valid.tsv``
    (the config's validation split)."""
    valid = load_split(data, "valid", keep_empty=True)
    for name, rows in (("train", pairs), ("valid", zip(valid.src, valid.tgt, strict=True))):
        path = Path(f"{out}.{name}.tsv")
        path.write_text("".join(f"{s}\t{t}\n" for s, t in rows), encoding="utf-8")
    Path(f"{out}.train.json").write_text(json.dumps(counts) + "\n", encoding="utf-8")
    print(
        f"{out}.train.tsv: {counts['train']} training pairs + {counts['joined']} joined + "
        f"{counts['test_copies']} x {counts['test_pairs']} test pairs (plain text, no links); "
        f"{out}.valid.tsv: {len(valid.src)} pairs. Train with "
        f"--set data.train.tsv={out.resolve()}.train.tsv --set data.valid.tsv="
        f"{out.resolve()}.valid.tsv --set data.valid_holdout=null"
    )


def _valid_bleu(run_dir: Path, checkpoint: str) -> float | None:
    """The validation BLEU training recorded for ``checkpoint`` (best: the history's highest)."""
    if checkpoint == "averaged":
        record = RunFolder(Path(run_dir)).averaged
        return json.loads(record.read_text(encoding="utf-8"))["state"]["valid_bleu"]
    rows = RunFolder(Path(run_dir)).read_history(10**12)
    scores = [r["valid_bleu"] for r in rows if r.get("valid_bleu") is not None]
    return max(scores) if scores else None


def _split_gold(gold: GoldAlignment, n: int) -> tuple[GoldAlignment, GoldAlignment]:
    return (GoldAlignment(gold.sure[:n], gold.possible[:n]),
            GoldAlignment(gold.sure[n:], gold.possible[n:]))  # fmt: skip


def _run_links(run, src, tgt, dev, dev_gold, transformer: bool):
    """Links of one run on the scored pairs, with the rule (and layer/shift) chosen on dev."""
    candidates = []
    full_context = reads_full_context(run.config)
    for method, tau in [("argmax", 0.3), *(("threshold", t) for t in THRESHOLDS)]:
        options = AlignOptions(method=method, threshold=tau, full_context=full_context)
        if transformer:  # every decoder layer, head and shift (layer_choice)
            options, scores = choose_layer(
                run.model, run.src_tok, run.tgt_tok, dev[0], dev[1], dev_gold, options
            )
            candidates.append((min(s.aer for s in scores), options))
            continue
        for shift in (0, 1):
            tried = AlignOptions(method=method, threshold=tau, shift=shift)
            found = _align(run, dev[0], dev[1], tried)
            score = alignment_error_rate([a.links for a in found], dev_gold.sure, dev_gold.possible)
            candidates.append((score.aer, tried))
    _, best = min(candidates, key=lambda c: c[0])
    return [a.links for a in _align(run, src, tgt, best)], best


def _describe(o: AlignOptions) -> str:
    rule = "argmax" if o.method == "argmax" else f"threshold {o.threshold}"
    layer = "" if o.layer is None else f"layer {o.layer}, "
    head = "" if o.head is None else f"head {o.head}, "
    context = "full context, " if o.full_context else ""
    return f"{layer}{head}{context}shift {o.shift}, {rule}"


def table_rows(args, src, tgt, gold) -> list[dict]:
    """The one table: eflomal, then each given run (and its symmetrisation with a reverse run)."""
    n = args.dev_pairs
    dev, dev_gold = (src[:n], tgt[:n]), _split_gold(gold, n)[0]
    test_src, test_tgt, test = src[n:], tgt[n:], _split_gold(gold, n)[1]
    sizes = [len(s) + len(t) for s, t in zip(test_src, test_tgt, strict=True)]
    test_gold = SizedGold(test.sure, test.possible, sizes)
    flipped = GoldAlignment([{(j, i) for i, j in g} for g in dev_gold.sure],
                            [{(j, i) for i, j in g} for g in dev_gold.possible])  # fmt: skip
    rows = []
    first = args.rnn or args.transformer or args.guided
    try:
        rows += _eflomal_mean_rows(args.eflomal_venv, first, src, tgt, n, test_gold, args.draws)
    except (OSError, subprocess.CalledProcessError) as err:
        print(f"eflomal baseline failed: {err}", file=sys.stderr)
    runs = [("attention (RNN)", args.rnn, args.rnn_reverse, False),
            ("attention (Transformer)", args.transformer, args.transformer_reverse, True),
            ("guided attention", args.guided, args.guided_reverse, True)]  # fmt: skip
    for name, run_dir, reverse_dir, transformer in runs:
        if run_dir is None:
            continue
        run = load_run(run_dir, checkpoint=args.checkpoint)
        is_tf = transformer and run.model.attention_layout.layers > 1
        links, options = _run_links(run, test_src, test_tgt, dev, dev_gold, is_tf)
        bleu = _valid_bleu(run_dir, args.checkpoint)
        rows.append({**_row(f"{name}, {_describe(options)}", links, test_gold), "bleu": bleu})
        if reverse_dir is not None:
            back_run = load_run(reverse_dir, checkpoint=args.checkpoint)
            back, back_options = _run_links(
                back_run, test_tgt, test_src, (dev[1], dev[0]), flipped, is_tf
            )
            reverse = [{(i, j) for j, i in pair} for pair in back]
            both = symmetrize_all(links, reverse, GDFA)
            rows.append({**_row(f"{name}, both ways, {GDFA}", both, test_gold), "bleu": bleu})
            forward = _align(run, src, tgt, options)
            backward = _align(back_run, tgt, src, back_options)
            row = _agreement_row(name, forward, backward, n, dev_gold, test_gold)
            rows.append({**row, "bleu": bleu})
    return rows


def _agreement_row(name: str, forward, backward, n: int, dev_gold, test_gold) -> dict:
    """Both directions' word weights multiplied (``agreement_links``, plain or mutual best),
    each direction first smoothed with a jump prior (``jump_smoothed``; 0 is off); the rule,
    tau and lambda chosen on dev."""
    smoothed = {lam: [(jump_smoothed(f.weights, lam), jump_smoothed(b.weights, lam))
                      for f, b in zip(forward, backward, strict=True)]
                for lam in JUMP_PRIORS}  # fmt: skip

    def links(pairs: slice, rule: tuple[bool, float, float]) -> list[set[Link]]:
        mutual, tau, lam = rule
        return [agreement_links(f, b, tau, mutual=mutual) for f, b in smoothed[lam][pairs]]

    def dev_aer(rule: tuple[bool, float, float]) -> float:
        return alignment_error_rate(links(slice(0, n), rule), dev_gold.sure, dev_gold.possible).aer

    rules = list(product((False, True), AGREEMENT_THRESHOLDS, JUMP_PRIORS))  # mutual, tau, lambda
    mutual, tau, lam = min(rules, key=dev_aer)
    kind = "mutual" if mutual else "agreement"
    jumps = f", jump prior {lam}" if lam else ""
    row_links = links(slice(n, None), (mutual, tau, lam))
    return _row(f"{name}, both ways, {kind} {tau}{jumps}", row_links, test_gold)


def _eflomal_mean_rows(venv, run_dir, src, tgt, n: int, test_gold, draws: int) -> list[dict]:
    """eflomal's four rows on the scored pairs, each the mean of ``draws`` runs (its sampler
    is seeded from /dev/urandom: one draw's intersection AER ranged 0.102-0.113 here)."""
    lines = eflomal_text(run_dir, src, tgt)
    tables = []
    for _ in range(draws):
        forward, reverse = (links[n:] for links in _test_links(venv, lines, len(src)))
        tables.append(_symmetrised("eflomal", forward, reverse, test_gold))
    rows = []
    for same in zip(*tables, strict=True):
        aers = [r["aer"] for r in same]
        name = f"{same[0]['system']}, mean of {draws} (AER {min(aers):.3f}-{max(aers):.3f})"
        row = {k: _mean([r[k] for r in same]) for k in ("aer", "precision", "recall", "links")}
        lengths = same[0]["aer_by_length"]
        row["aer_by_length"] = {b: _mean([r["aer_by_length"][b] for r in same]) for b in lengths}
        rows.append({"system": name if draws > 1 else same[0]["system"], **row, "bleu": None})
    return rows


def _mean(values: list) -> float | None:
    return None if None in values else sum(values) / len(values)


def eflomal_rows(venv: Path, run_dir: Path, src, tgt, gold) -> list[dict]:
    """eflomal's forward, reverse, intersection and grow-diag-final-and rows."""
    return _symmetrised(
        "eflomal", *_test_links(venv, eflomal_text(run_dir, src, tgt), len(src)), gold
    )


def _test_links(venv: Path, lines: list[str], count: int) -> tuple[list[set[Link]], ...]:
    """One eflomal run over ``lines``: forward and reverse links of the last ``count``
    lines, the test pairs (:func:`eflomal_text`)."""
    return tuple(direction[-count:] for direction in _eflomal(venv, lines))


def eflomal_text(run_dir: Path, src, tgt) -> list[str]:
    """eflomal's ``source ||| target`` lines: the run's training text, then the test pairs
    (the last ``len(src)`` lines).

    Each test pair is given once: copies of it in the run's training text (``--test-copies``)
    are left out, as repeating a sentence only makes eflomal's sampler more sure of its
    own first links (intersection AER 0.134 with ten copies, 0.103 with one). So are
    joined pairs (``--join``; ``OUT.train.json`` counts them): their text is already there."""
    data = load_run(run_dir).config.data
    train = load_split(data, "train", keep_empty=True)
    original = islice(zip(train.src, train.tgt, strict=True), _original_count(data))
    copies = {(" ".join(s), " ".join(t)) for s, t in zip(src, tgt, strict=True)}
    lines = [
        f"{tokenize(s)} ||| {tokenize(t)}"
        for s, t in original
        if s and t and (s, t) not in copies  # keep_empty gives a blank side as ""
    ]
    return lines + [
        f"{' '.join(s).lower()} ||| {' '.join(t).lower()}" for s, t in zip(src, tgt, strict=True)
    ]


def _original_count(data) -> int | None:
    """How many leading lines of the training file are original pairs (``OUT.train.json``
    of ``--write-labels``), or None: all of them."""
    if data.train.tsv is None:
        return None
    manifest = Path(data.train.tsv).with_suffix(".json")
    return json.loads(manifest.read_text())["train"] if manifest.is_file() else None


def _symmetrised(name: str, forward, reverse, gold) -> list[dict]:
    """Rows for both directions' links and their intersection and grow-diag-final-and."""
    pairs = list(zip(forward, reverse, strict=True))
    return [
        _row(f"{name} forward", forward, gold),
        _row(f"{name} reverse", reverse, gold),
        _row(f"{name} intersection", [f & r for f, r in pairs], gold),
        _row(f"{name} grow-diag-final-and", symmetrize_all(forward, reverse, GDFA), gold),
    ]


def both_ways_rows(run_dir: Path, reverse_dir: Path, src, tgt, gold) -> list[dict]:
    """Attention of a source->target run and a target->source run, symmetrised like eflomal's."""
    forward_run, reverse_run = load_run(run_dir), load_run(reverse_dir)
    rows = []
    for method in ("argmax", "threshold"):
        options = AlignOptions(method=method, threshold=0.3)
        forward = [a.links for a in _align(forward_run, src, tgt, options)]
        backward = _align(reverse_run, tgt, src, options)
        reverse = [{(i, j) for j, i in a.links} for a in backward]  # back to (source, target)
        rule = "argmax" if method == "argmax" else "threshold 0.3"
        rows += _symmetrised(f"attention both ways, {rule},", forward, reverse, gold)[1:]
    return rows


def _align(run, src, tgt, options: AlignOptions):
    return align_words(run.model, run.src_tok, run.tgt_tok, src, tgt, options, batch_size=32)


def _links(line: str) -> set[Link]:
    return {(int(i), int(j)) for i, _, j in (item.partition("-") for item in line.split())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, nargs="?", help="the per-setting sweep of one run")
    parser.add_argument("--gold-dir", type=Path, default=GOLD_DIR)
    parser.add_argument("--eflomal-venv", type=Path, default=Path("/work/eflomal-venv"))
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--reverse-run", type=Path, help="a target->source run: symmetrise the two attentions"
    )
    parser.add_argument("--table", action="store_true", help="the one table (see above)")
    for name in ("rnn", "transformer", "guided"):
        parser.add_argument(f"--{name}", type=Path)
        parser.add_argument(f"--{name}-reverse", type=Path)
    parser.add_argument("--dev-pairs", type=int, default=100, help="gold pairs for choosing")
    parser.add_argument(
        "--draws", type=int, default=3, help="with --table: eflomal runs averaged (it is sampled)"
    )
    parser.add_argument(
        "--checkpoint",
        choices=("best", "averaged"),
        default="best",
        help="with --table: the runs' checkpoint (averaged: train.average_last's)",
    )
    parser.add_argument("--write-labels", type=Path, metavar="OUT")
    parser.add_argument("--config", type=Path, help="with --write-labels: the guided run's config")
    parser.add_argument(
        "--test-copies",
        type=int,
        default=0,
        help="with --write-labels: also write a corpus with the test pairs N times, unlinked",
    )
    parser.add_argument(
        "--label-rule",
        choices=(GDFA, "intersection"),
        default=GDFA,
        help="with --write-labels: how eflomal's two directions are symmetrised",
    )
    parser.add_argument(
        "--join",
        type=int,
        default=0,
        metavar="J",
        help="with --write-labels: also train on J labelled pairs, each 2-5 training pairs joined",
    )
    args = parser.parse_args(argv)
    src, tgt = read_bitext(args.gold_dir / "enfr.src-tgt")
    gold = read_gold(args.gold_dir / "enfr.gold")
    if args.write_labels:
        if args.config is None:
            parser.error("--write-labels needs --config")
        try:
            write_labels(
                args.config,
                args.write_labels,
                args.eflomal_venv,
                src,
                tgt,
                args.test_copies,
                args.label_rule,
                args.join,
            )
        except (OSError, subprocess.CalledProcessError) as err:  # eflomal: nothing written
            parser.exit(2, f"{parser.prog}: error: --write-labels: {err}\n")
        return 0
    if args.table:
        if not (args.rnn or args.transformer or args.guided):
            parser.error("--table needs at least one of --rnn, --transformer, --guided")
        if args.draws < 1:
            parser.error(f"--draws must be >= 1, got {args.draws}")
        if not 1 <= args.dev_pairs < len(src):  # both the choosing and the scoring need pairs
            parser.error(
                f"--dev-pairs must be from 1 to {len(src) - 1} (the gold has {len(src)} pairs), "
                f"got {args.dev_pairs}"
            )
        rows = table_rows(args, src, tgt, gold)
        n = len(src) - args.dev_pairs
        print(f"Hansards en-fr, {n} scored pairs (the first {args.dev_pairs} chose each "
              "run's layer, head, shift and rule)\n")  # fmt: skip
        lengths = " / ".join(LENGTHS)
        print(f"| system | precision | recall | AER | AER at {lengths} words | valid BLEU |\n"
              "|---|---|---|---|---|---|")  # fmt: skip
        for r in rows:
            bleu = "" if r["bleu"] is None else f"{r['bleu']:.2f}"
            by_length = " / ".join("-" if a is None else f"{a:.3f}"
                                   for a in r["aer_by_length"].values())  # fmt: skip
            print(f"| {r['system']} | {r['precision']:.3f} | {r['recall']:.3f} | "
                  f"{r['aer']:.3f} | {by_length} | {bleu} |")  # fmt: skip
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
        return 0
    if args.run_dir is None:
        parser.error("give RUN_DIR, --table or --write-labels")
    rows = attention_rows(args.run_dir, src, tgt, gold)
    if args.reverse_run:
        rows += both_ways_rows(args.run_dir, args.reverse_run, src, tgt, gold)
    try:
        rows += eflomal_rows(args.eflomal_venv, args.run_dir, src, tgt, gold)
    except (OSError, subprocess.CalledProcessError) as err:
        print(f"eflomal baseline failed: {err}", file=sys.stderr)
    print("| system | AER | precision | recall | links |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['system']} | {r['aer']:.3f} | {r['precision']:.3f} | {r['recall']:.3f} | "
              f"{r['links']} |")  # fmt: skip
    best_att = min((r for r in rows if r["system"].startswith("attention")), key=lambda r: r["aer"])
    baseline = [r for r in rows if r["system"].startswith("eflomal")]
    if baseline:
        best_efl = min(baseline, key=lambda r: r["aer"])
        print(f"\nbest attention: {best_att['system']} AER {best_att['aer']:.3f}; best eflomal: "
              f"{best_efl['system']} AER {best_efl['aer']:.3f}; ratio "
              f"{best_att['aer'] / best_efl['aer']:.2f}x")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
