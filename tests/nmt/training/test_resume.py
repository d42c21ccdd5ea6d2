"""A training process stopped by SIGKILL (between checkpoints) or SIGINT, then resumed
with ``attnkit train --resume RUN_DIR``, gives the same per-epoch losses and the same
final weights as an uninterrupted run (same machine, seed, one thread)."""

import signal

from attnkit.nmt.runs.checkpoint import load_checkpoint
from resume_helpers import (
    REVERSE,
    SMALL,
    STEPS,
    assert_same_run,
    attnkit,
    finish,
    reference,  # noqa: F401  (the uninterrupted run, a fixture)
    resume,
    saved_step,
    wait_for_checkpoint,
)


def test_sigkill_between_checkpoints_then_resume_matches_uninterrupted(reference, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    process = attnkit("train", REVERSE, "--out", str(run_dir), *SMALL)
    step = wait_for_checkpoint(process, run_dir)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    killed_at = saved_step(run_dir)
    assert step <= killed_at < STEPS  # killed mid-run, after at least one checkpoint
    resume(run_dir)
    assert_same_run(run_dir, reference)


def test_sigint_saves_a_checkpoint_exits_cleanly_and_resumes_exactly(reference, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    process = attnkit("train", REVERSE, "--out", str(run_dir), *SMALL)
    wait_for_checkpoint(process, run_dir)
    process.send_signal(signal.SIGINT)
    code, out, err = finish(process)
    assert code == 130
    assert "Traceback" not in err
    assert "checkpoint saved; continue with: attnkit train --resume" in err
    progress = load_checkpoint(run_dir / "last.json").state["progress"]
    assert not progress["finished"] and 0 < progress["step"] < STEPS
    resume(run_dir)
    assert_same_run(run_dir, reference)
