"""Coverage penalty and n-gram blocking in beam search, measured on a trained run.

From the root of a clone::

    python -m benchmarks.coverage_sweep RUN_DIR [--betas 0,0.2,0.4] [--ngrams 0,3]
        [--splits valid,test] [--json FILE]

For every beta of GNMT's coverage penalty (Wu et al. 2016, eq. 14) and every
``no_repeat_ngram`` setting, the run's beam search (its ``decode`` section
otherwise) translates each split, and ``attnkit.nmt.analysis.inspect.inspect_run``
gives sacreBLEU, chrF, the repeated-3-gram rate, the share of under-covered
source words (coverage < 0.5) and the length ratio. The setting with the best
validation BLEU is the one to make the default; test figures are for
reporting only. Runs on one thread.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from attnkit.nmt.analysis.inspect import inspect_run
from attnkit.nmt.data.corpus import load_split
from attnkit.nmt.decoding.settings import SearchSettings
from attnkit.nmt.runs.loaded_run import load_run


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


COLUMNS = ("split", "beam", "beta", "no_repeat_ngram", "bleu", "chrf", "repeated_3gram_rate",
           "under_covered", "over_covered", "length_ratio", "seconds")  # fmt: skip


def measure(run, corpus, split: str, beta: float, ngram: int) -> dict:
    """One setting on one split: the figures of ``inspect_run`` and the time it took."""
    settings = SearchSettings.from_config(
        run.config.decode, coverage_penalty=beta, no_repeat_ngram=ngram
    )
    start = time.perf_counter()
    found = inspect_run(run, corpus.src, corpus.tgt, settings)
    s = found.summary
    values = (split, settings.beam_size, beta, ngram, found.bleu.score, found.chrf.score,
              s.repeated_3gram_rate, s.under_covered, s.over_covered, s.length_ratio,
              time.perf_counter() - start)  # fmt: skip
    return dict(zip(COLUMNS, values, strict=True))


def _cell(value) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--betas", type=_floats, default=[0.0, 0.2, 0.4])
    parser.add_argument("--ngrams", type=_floats, default=[0, 3])
    parser.add_argument("--splits", default="valid,test")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    run = load_run(args.run_dir)
    rows = []
    print("| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS))
    for split in args.splits.split(","):
        corpus = load_split(run.config.data, split)
        for ngram in args.ngrams:
            for beta in args.betas:
                rows.append(measure(run, corpus, split, beta, int(ngram)))
                print("| " + " | ".join(_cell(v) for v in rows[-1].values()) + " |", flush=True)
    valid = [r for r in rows if r["split"] == "valid"]
    if valid:
        best = max(valid, key=lambda r: r["bleu"])
        print(f"\nbest on valid: beta {best['beta']}, no_repeat_ngram {best['no_repeat_ngram']} "
              f"(BLEU {best['bleu']:.2f})")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
