"""Training runs in a subprocess, interrupted and resumed: the commands, and the checks that a
resumed run equals one never stopped (per-epoch metrics and final weights)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attnkit.nmt.runs.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
REVERSE = str(ROOT / "configs" / "reverse.yaml")
# One thread before anything runs, so every process computes identically.
LAUNCH = (
    "import sys, torch; torch.set_num_threads(1); from attnkit.cli import main; "
    "sys.exit(main(sys.argv[1:]))"
)
SMALL = [
    "--no-progress",
    "--model.embed_dim", "16",
    "--model.hidden_size", "32",
    "--model.dropout", "0.1",  # exercises the saved RNG state
    "--data.toy.train_size", "640",
    "--data.toy.valid_size", "16",
    "--data.toy.test_size", "8",
    "--train.batch_size", "32",
    "--train.epochs", "3",
    "--train.early_stopping", "null",
    "--train.checkpoint_every", "5",
    "--train.threads", "1",
]  # fmt: skip
STEPS = 3 * 20  # 640 / 32 batches per epoch
COMPARED = ("epoch", "step", "train_loss", "valid_loss", "valid_bleu", "lr")


def attnkit(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", LAUNCH, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process, timeout=120):
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def saved_step(run_dir):
    try:
        record = json.loads((run_dir / "last.json").read_text())
        return record["state"]["progress"]["step"]
    except (OSError, ValueError, KeyError):
        return None


def wait_for_checkpoint(process, run_dir, timeout=60):
    """Poll until a checkpoint exists; return its step (the process keeps running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        step = saved_step(run_dir)
        if step:
            return step
        if process.poll() is not None:
            pytest.fail(f"training ended before its first checkpoint: {process.communicate()}")
        time.sleep(0.005)
    pytest.fail("no checkpoint appeared")


def epoch_rows(run_dir):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: row[k] for k in COMPARED} for row in rows]


def assert_same_run(resumed, reference, steps=STEPS):
    assert epoch_rows(resumed) == epoch_rows(reference)
    a, b = load_checkpoint(resumed / "last.json"), load_checkpoint(reference / "last.json")
    assert a.state["progress"]["step"] == b.state["progress"]["step"] == steps
    assert a.model.keys() == b.model.keys()
    for key in b.model:
        assert torch.equal(a.model[key], b.model[key]), key


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    code, _, err = finish(attnkit("train", REVERSE, "--out", str(run_dir), *SMALL))
    assert code == 0, err
    assert [row["epoch"] for row in epoch_rows(run_dir)] == [1, 2, 3]
    return run_dir


def resume(run_dir):
    code, out, err = finish(attnkit("train", "--resume", str(run_dir), "--no-progress"))
    assert code == 0, err
    assert "resumed at epoch" in err and "Traceback" not in err
    return out
