"""AER of a run's attention against eflomal on the same text, scored by the same code.

From the root of a clone::

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
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from attnkit.nmt.analysis.align import (
    AlignOptions,
    align_words,
    extract_links,
    read_bitext,
    read_gold,
)
from attnkit.nmt.analysis.metrics import Link, alignment_error_rate
from attnkit.nmt.data.corpus import load_split
from attnkit.nmt.runs.loaded_run import load_run

ROOT = Path(__file__).resolve().parents[1]
GOLD_DIR = ROOT.parent / "shared" / "data" / "alignment_gold" / "hansards_enfr_awesome_align"
THRESHOLDS = (0.1, 0.2, 0.3, 0.5)
_TOKEN = re.compile(r"\w+'|'\w+|\w+(?:[-.]\w+)*|[^\w\s]")
_NEIGHBOURS = [(-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)]


def tokenize(text: str) -> str:
    """Lowercased words and punctuation, elisions split (``l'homme`` -> ``l' homme``)."""
    return " ".join(_TOKEN.findall(text.replace("\u00a0", " ").replace("\u202f", " ").lower()))


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


def _row(name: str, links: list[set[Link]], gold) -> dict:
    score = alignment_error_rate(links, gold.sure, gold.possible)
    return {"system": name, "aer": score.aer, "precision": score.precision,
            "recall": score.recall, "links": score.predicted}  # fmt: skip


def eflomal_rows(venv: Path, run_dir: Path, src, tgt, gold) -> list[dict]:
    """eflomal on the run's training text + the test sentences, four symmetrisations."""
    if not (venv / "bin" / "eflomal-align").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "eflomal"], check=True)
    train = load_split(load_run(run_dir).config.data, "train")
    lines = [f"{tokenize(s)} ||| {tokenize(t)}" for s, t in zip(train.src, train.tgt, strict=True)]
    lines += [
        f"{' '.join(s).lower()} ||| {' '.join(t).lower()}" for s, t in zip(src, tgt, strict=True)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        bitext, fwd, rev = (Path(tmp) / name for name in ("bitext", "fwd", "rev"))
        bitext.write_text("\n".join(lines) + "\n", encoding="utf-8")
        cmd = [str(venv / "bin" / "eflomal-align"), "-i", str(bitext), "-f", str(fwd),
               "-r", str(rev), "--overwrite"]  # fmt: skip
        subprocess.run(cmd, check=True)
        forward = [_links(line) for line in fwd.read_text().splitlines()[-len(src) :]]
        reverse = [_links(line) for line in rev.read_text().splitlines()[-len(src) :]]
    return _symmetrised("eflomal", forward, reverse, gold)


def _symmetrised(name: str, forward, reverse, gold) -> list[dict]:
    """Rows for both directions' links and their intersection and grow-diag-final-and."""
    pairs = list(zip(forward, reverse, strict=True))
    return [
        _row(f"{name} forward", forward, gold),
        _row(f"{name} reverse", reverse, gold),
        _row(f"{name} intersection", [f & r for f, r in pairs], gold),
        _row(f"{name} grow-diag-final-and", [_gdfa(f, r) for f, r in pairs], gold),
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


def _gdfa(forward: set[Link], reverse: set[Link]) -> set[Link]:
    """grow-diag-final-and symmetrisation (Koehn et al. 2003, as in Moses)."""
    union, links = forward | reverse, forward & reverse
    src_done, tgt_done = {i for i, _ in links}, {j for _, j in links}

    def add(i: int, j: int) -> None:
        links.add((i, j))
        src_done.add(i)
        tgt_done.add(j)

    grown = True
    while grown:
        grown = False
        for i, j in sorted(links):
            for di, dj in _NEIGHBOURS:
                p = (i + di, j + dj)
                if p in union and p not in links and (p[0] not in src_done or p[1] not in tgt_done):
                    add(*p)
                    grown = True
    for direction in (forward, reverse):
        for i, j in sorted(direction):
            if i not in src_done and j not in tgt_done:
                add(i, j)
    return links


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--gold-dir", type=Path, default=GOLD_DIR)
    parser.add_argument("--eflomal-venv", type=Path, default=Path("/work/eflomal-venv"))
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--reverse-run", type=Path, help="a target->source run: symmetrise the two attentions"
    )
    args = parser.parse_args(argv)
    src, tgt = read_bitext(args.gold_dir / "enfr.src-tgt")
    gold = read_gold(args.gold_dir / "enfr.gold")
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
