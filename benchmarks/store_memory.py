"""Resident memory of the data side of training against the corpus size, model left out.

``python -m benchmarks.store_memory 1000000 5000000``: for each size N a token
store of N random pairs (20-40 tokens a side, ids below 8,000, ``uint16``) is
written once under ``$TMPDIR/attnkit-bench-store/N`` in the layout of the
attnkit on ``PYTHONPATH`` (its extra files are ignored by a version that does
not know them, so the same command measures an older checkout). A fresh
process then maps it, draws one epoch of batches of 64 (as training does) and
makes 50 batches, and prints one JSON object: after each stage the resident
memory (RSS) in MB, its anonymous part (the process's own) and its
file-backed part (mapped pages of the store and of the libraries), then the
peak (``VmHWM``).

The model is left out on purpose: its share of ``attnkit train``'s peak does
not grow with the corpus but follows the longest target among the batches a
run happens to draw (about 15 MB per target position for the ``data`` suite's
RNN with a vocabulary of 8,000), which hides the data's share in that peak.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

STEPS = 50
BATCH = 64


def store_dir(pairs: int) -> Path:
    """The synthetic store of ``pairs`` pairs (written on first use)."""
    from attnkit.nmt.data import store

    root = Path(os.environ.get("TMPDIR", tempfile.gettempdir())) / "attnkit-bench-store"
    folder = root / f"{pairs}-v{store.VERSION}"
    if not (folder / "meta.json").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        _write(folder, pairs, store.VERSION)
    return folder


def _write(folder: Path, pairs: int, version: int) -> None:
    rng = np.random.default_rng(0)
    meta = {"format": "attnkit-token-store", "version": version, "fingerprint": "synthetic"}
    meta |= {"dtype": "uint16", "length_dtype": "uint16", "pairs": pairs}
    meta |= {"skipped": 0, "dropped": 0}
    for side in ("src", "tgt"):
        lengths = rng.integers(20, 41, pairs).astype(np.int64)
        np.concatenate([[0], np.cumsum(lengths)]).tofile(folder / f"{side}.offsets")
        lengths.astype(np.uint16).tofile(folder / f"{side}.lengths")
        ids = rng.integers(4, 8000, int(lengths.sum()), dtype=np.uint16)
        ids.tofile(folder / f"{side}.ids")
        meta[f"{side}_tokens"] = int(lengths.sum())
    (folder / "meta.json").write_text(json.dumps(meta))


def _memory() -> dict[str, float]:
    found = {}
    with open("/proc/self/smaps_rollup") as rollup:
        for line in rollup:
            parts = line.split()
            if parts[-1] == "kB":  # the first line names the address range
                found[parts[0].rstrip(":")] = int(parts[1]) / 1024
    return {
        "rss": round(found["Rss"]),
        "anon": round(found["Anonymous"]),
        "file": round(found["Rss"] - found["Anonymous"]),
    }


def measure(folder: Path) -> dict:
    """In this process: map the store, draw an epoch, make the first batches."""
    import torch

    from attnkit.nmt.data.batching import Examples, bucket_batches, make_batch
    from attnkit.nmt.data.store import TokenStore

    report = {"imports": _memory()}
    store = TokenStore.open(folder)
    examples = Examples(store.src, store.tgt)
    report["mapped"] = _memory()
    batches = bucket_batches(examples, BATCH, generator=torch.Generator().manual_seed(1))
    report["epoch_order"] = _memory()
    for _, indices in zip(range(STEPS), batches, strict=False):
        make_batch(examples, indices)
    report[f"{STEPS}_batches"] = _memory()
    with open("/proc/self/status") as status:
        peak = next(line for line in status if line.startswith("VmHWM"))
    report["peak"] = round(int(peak.split()[1]) / 1024)
    return report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.store_memory", description=__doc__.splitlines()[0]
    )
    parser.add_argument("sizes", type=int, nargs="+", metavar="PAIRS", help="store sizes in pairs")
    return parser


if __name__ == "__main__":
    if sys.argv[1:2] == ["--in-process"]:  # the fresh process of one size
        print(json.dumps({"pairs": int(sys.argv[3]), **measure(Path(sys.argv[2]))}))
        sys.exit()
    for size in _parser().parse_args().sizes:
        folder = store_dir(size)
        args = ["--in-process", str(folder), str(size)]
        subprocess.run([sys.executable, "-m", "benchmarks.store_memory", *args], check=True)
