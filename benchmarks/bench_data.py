"""Corpora of millions of pairs: memory, preparation speed and start-up time, by corpus size.

For each size (100k, 1M and 5M pairs; ``--quick``: 20k and 100k) a corpus is
generated once under ``$TMPDIR/attnkit-bench-data/`` (reused by later runs):
every pair joins two random Multi30k caption pairs, so each side has about 25
words (WMT-like lengths) and the text keeps varying. Then, each in a fresh
process:

- ``attnkit prepare`` (sampled tokenizer training + the token store): its own
  report of the store build rate, in pairs/s, against sentencepiece's own
  multithreaded batch encoding of the same pairs (the first 200k, both sides,
  in memory, same threads) measured in this run:
  ``data_prepare_vs_spm_{size}`` (target >= 0.8);
- ``attnkit train --train.max_steps 50`` on the prepared folder: peak resident
  memory from launch to exit (``wait4``), and for a second run on a copy of
  the prepared folder the time from launch to its ``data:`` line, when the
  tokenizers are loaded, the store is mapped and the first batch is next
  (launch to first step with the store built):
  ``data_rss_largest_vs_previous`` (5M against 1M pairs; target <= 1.15),
  ``data_first_step_largest_vs_smallest``
  (target <= 1.2).

The model is deliberately small (the corpus is the subject): an RNN with
64-wide embeddings and 128 hidden units, batch 64, joint sentencepiece 8k.

``--rate PAIRS [--repeats N]`` measures the build rate alone, for a machine
whose other users' load changes from minute to minute: after one untimed
``attnkit prepare`` (a tokenizer trained on a 100k-pair sample), it deletes
the store and runs ``attnkit prepare`` again (tokenizers reused: only the
store is built) alternately with sentencepiece's own batch encode, ``N`` times
each (default 3), and reports the medians (``data_prepare_vs_spm_alternated``).
``--baseline PATH`` adds, in the same rotation, the builds of the attnkit whose
package lies in ``PATH`` (e.g. ``git archive COMMIT | tar -x -C /tmp/old``, then
``/tmp/old/src``): an A/B of two versions under the same load.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnkit.nmt.data.corpus import bundled_multi30k
from attnkit.nmt.data.tokenizer import SentencePieceTokenizer

from .report import Result, Table

SIZES = (100_000, 1_000_000, 5_000_000)
QUICK_SIZES = (20_000, 100_000)
SPM_PAIRS = 200_000
CONFIG = """\
data:
  train: {{src: train.de, tgt: train.en}}
  valid: {{src: valid.de, tgt: valid.en}}
  max_src_len: 100
  max_tgt_len: 100
tokenizer: {{vocab_size: 8000}}
model: {{embed_dim: 64, hidden_size: 128, dropout: 0.1, score: scaled_dot}}
train: {{batch_size: 64, max_steps: {steps}, valid_every: 1000000, valid_bleu_sentences: 50}}
decode: {{beam_size: 1}}
"""
_RATE = re.compile(r"token store: .*\(([\d,]+) pairs/s\)")


def corpus_dir(pairs: int) -> Path:
    """A generated corpus of ``pairs`` pairs (written on first use)."""
    root = Path(os.environ.get("TMPDIR", tempfile.gettempdir())) / "attnkit-bench-data"
    folder = root / f"{pairs}"
    if not (folder / "done").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        _write_corpus(folder, pairs)
        (folder / "done").write_text("")
    return folder


def _write_corpus(folder: Path, pairs: int) -> None:
    captions = bundled_multi30k("train")
    n = len(captions)
    rng = random.Random(pairs)
    with open(folder / "train.de", "w") as de, open(folder / "train.en", "w") as en:
        for _ in range(pairs):
            i, j = rng.randrange(n), rng.randrange(n)
            de.write(f"{captions.src[i]} {captions.src[j]}\n")
            en.write(f"{captions.tgt[i]} {captions.tgt[j]}\n")
    valid = bundled_multi30k("valid")
    (folder / "valid.de").write_text("\n".join(valid.src[:100]) + "\n")
    (folder / "valid.en").write_text("\n".join(valid.tgt[:100]) + "\n")


def _attnkit(
    *args: str, mark: str | None = None, package: str | None = None
) -> tuple[str, float, float]:
    """Run the CLI in a fresh process: (stderr, seconds, peak RSS in MB).

    The seconds run from launch to exit, or to the first stderr line that
    starts with ``mark`` when one is given. ``package``: the folder that holds
    the attnkit to run (its ``PYTHONPATH``), else this one.
    """
    env = None if package is None else {**os.environ, "PYTHONPATH": package}
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-S", "-c", _LAUNCHER, sys.executable, "-m", "attnkit", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines, marked = [], None
    for line in process.stderr:
        lines.append(line)
        if marked is None and mark is not None and line.startswith(mark):
            marked = time.perf_counter() - start
    peak_kb = process.stdout.read().strip()
    status = process.wait()
    wall = time.perf_counter() - start
    err = "".join(lines)
    if status != 0:
        raise RuntimeError(f"attnkit {' '.join(args)} failed:\n{err[-2000:]}")
    return err, wall if marked is None else marked, int(peak_kb) / 1024


# Starts the command from a small process and prints its peak RSS in KiB (``wait4``). A
# child started from this process itself would count this process's own peak: at
# ``exec`` the kernel keeps the high-water mark of the memory it leaves (Linux's
# ``ru_maxrss``), and this process may hold gigabytes from the suites run before.
_LAUNCHER = """\
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(usage.ru_maxrss, flush=True)
sys.exit(os.waitstatus_to_exitcode(status) & 255)
"""


def spm_pairs_per_second(folder: Path, run: Path, threads: int) -> float:
    """sentencepiece's own batch encoding of the first pairs of the corpus, both sides."""
    tok = SentencePieceTokenizer.load(run / "spm.model")
    with open(folder / "train.de") as de, open(folder / "train.en") as en:
        src = [line.rstrip("\n") for line in itertools.islice(de, SPM_PAIRS)]
        tgt = [line.rstrip("\n") for line in itertools.islice(en, SPM_PAIRS)]
    start = time.perf_counter()
    tok.sp.encode(src, num_threads=threads)
    tok.sp.encode(tgt, num_threads=threads)
    return len(src) / (time.perf_counter() - start)


def measure(pairs: int, threads: int) -> dict[str, float]:
    folder = corpus_dir(pairs)
    work = Path(tempfile.mkdtemp(prefix="attnkit-bench-run-"))
    run = work / "run"
    config = folder / "bench.yaml"
    config.write_text(CONFIG.format(steps=50))
    thread_opt = ("--train.threads", str(threads))
    err, prepare_s, prepare_rss = _attnkit("prepare", str(config), "--out", str(run), *thread_opt)
    rate = float(_RATE.search(err).group(1).replace(",", ""))
    one = work / "one"
    shutil.copytree(run, one)  # the same prepared folder, for the start-up measurement
    _, _, train_rss = _attnkit(
        "train", str(config), "--out", str(run), "--no-progress", *thread_opt
    )
    _, first_step_s, _ = _attnkit(
        "train", str(config), "--out", str(one), "--no-progress", "--train.max_steps", "1",
        *thread_opt, mark="data: ",
    )  # fmt: skip
    store_mb = sum(p.stat().st_size for p in (run / "store").rglob("*")) / 2**20
    spm_rate = spm_pairs_per_second(folder, run, threads)
    shutil.rmtree(work)
    return {
        "pairs": pairs,
        "prepare_s": prepare_s,
        "prepare_rss_mb": prepare_rss,
        "store_pairs_per_s": rate,
        "spm_pairs_per_s": spm_rate,
        "train_rss_mb": train_rss,
        "first_step_s": first_step_s,
        "store_mb": store_mb,
    }


def rate_alternated(
    pairs: int, threads: int, repeats: int, baseline: str | None = None
) -> dict[str, list[float]]:
    """Store builds (``attnkit prepare`` on a prepared folder without its store) and
    sentencepiece's batch encode, in rotation: pairs/s of each, ``repeats`` times;
    with ``baseline`` (a folder holding another attnkit), its builds too."""
    folder = corpus_dir(pairs)
    run = Path(tempfile.mkdtemp(prefix="attnkit-bench-rate-")) / "run"
    config = folder / "bench.yaml"
    config.write_text(CONFIG.format(steps=50))
    prepare = ("prepare", str(config), "--out", str(run), "--train.threads", str(threads),
               "--tokenizer.sample_sentences", "100000")  # fmt: skip
    _attnkit(*prepare)  # the tokenizer, once
    sides = ["store", "spm"] if baseline is None else ["store", "spm", "baseline"]
    rates: dict[str, list[float]] = {side: [] for side in sides}
    for repeat in range(repeats):
        for side in sides[repeat % len(sides) :] + sides[: repeat % len(sides)]:
            if side == "spm":
                rates["spm"].append(spm_pairs_per_second(folder, run, threads))
                continue
            shutil.rmtree(run / "store")
            err, _, _ = _attnkit(*prepare, package=baseline if side == "baseline" else None)
            rates[side].append(float(_RATE.search(err).group(1).replace(",", "")))
    shutil.rmtree(run.parent)
    return rates


def run(quick: bool) -> Result:
    threads = len(os.sched_getaffinity(0))
    sizes = QUICK_SIZES if quick else SIZES
    rows = [measure(n, threads) for n in sizes]
    table = Table(
        f"large corpora ({threads} threads; RNN 64/128, spm 8k, batch 64, 50 steps)",
        ["pairs", "prepare s", "store pairs/s", "spm pairs/s", "peak RSS train MB",
         "peak RSS prepare MB", "launch to first step s", "store MB"],
    )  # fmt: skip
    for r in rows:
        table.add(
            r["pairs"], r["prepare_s"], r["store_pairs_per_s"], r["spm_pairs_per_s"],
            r["train_rss_mb"], r["prepare_rss_mb"], r["first_step_s"], r["store_mb"],
        )  # fmt: skip
    ratios = {
        f"data_prepare_vs_spm_{r['pairs']}": r["store_pairs_per_s"] / r["spm_pairs_per_s"]
        for r in rows
    }
    if len(rows) > 1:  # the size ratios need two sizes
        ratios["data_rss_largest_vs_previous"] = rows[-1]["train_rss_mb"] / rows[-2]["train_rss_mb"]
        ratios["data_first_step_largest_vs_smallest"] = (
            rows[-1]["first_step_s"] / rows[0]["first_step_s"]
        )
    return Result([table], ratios)


def _main_rate(pairs: int, repeats: int, baseline: str | None) -> None:
    threads = len(os.sched_getaffinity(0))
    rates = rate_alternated(pairs, threads, repeats, baseline)
    median = {side: statistics.median(values) for side, values in rates.items()}
    print(f"{pairs:,} pairs, {threads} threads, in rotation {repeats} times (pairs/s):")
    for side, values in rates.items():
        print(f"{side}: {[round(r) for r in values]}, median {median[side]:,.0f}")
    print(f"data_prepare_vs_spm_alternated_{pairs}: {median['store'] / median['spm']:.3f}")
    if baseline is not None:
        print(f"baseline_vs_spm: {median['baseline'] / median['spm']:.3f}")
        print(f"store_vs_baseline: {median['store'] / median['baseline']:.3f}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_data",
        description="Corpora of millions of pairs: memory, preparation speed and start-up "
        "time by corpus size (see the module docstring).",
    )
    parser.add_argument(
        "sizes", nargs="*", type=int, metavar="PAIRS",
        help=f"corpus sizes in pairs (default {', '.join(f'{n:,}' for n in SIZES)})",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES} instead")
    parser.add_argument(
        "--rate", type=int, metavar="PAIRS",
        help="measure the store build rate alone on a corpus of this many pairs",
    )  # fmt: skip
    parser.add_argument(
        "--repeats", type=int, default=3, help="--rate: builds per side (default 3)"
    )
    parser.add_argument(
        "--baseline", metavar="PATH",
        help="--rate: also build with the attnkit package under PATH, in the same rotation",
    )  # fmt: skip
    return parser


if __name__ == "__main__":
    args = _parser().parse_args()
    if args.rate is not None:
        _main_rate(args.rate, args.repeats, args.baseline)
        sys.exit()
    if args.sizes:
        SIZES = tuple(args.sizes)  # e.g. python -m benchmarks.bench_data 1000000 5000000
    result = run(args.quick)
    for table in result.tables:
        print(table.to_markdown())
    for key, value in result.ratios.items():
        print(f"{key}: {value:.3f}")
