"""One run folder, one writer: the training lock (nmt/runs/runlock.py) against concurrent trainings,
a SIGKILLed holder, and readers that translate while a training writes."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from attnkit.nmt.decoding.translate import translate_lines
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.nmt.runs.runlock import LOCK_NAME, RunInUse, run_lock
from cli_helpers import assert_one_line_error, run
from resume_helpers import (
    REVERSE,
    ROOT,
    SMALL,
    assert_same_run,
    attnkit,
    epoch_rows,
    finish,
    reference,  # noqa: F401  (the uninterrupted run, a fixture)
    saved_step,
    wait_for_checkpoint,
)

IN_USE = "is in use by another training"


def test_second_lock_of_a_folder_names_the_holder_and_frees_after_release(tmp_path):
    run_dir = tmp_path / "new" / "run"
    with run_lock(run_dir):
        with pytest.raises(RunInUse) as caught, run_lock(run_dir):
            pass
        message = str(caught.value)
        assert message == (
            f"{run_dir} {IN_USE} (pid {os.getpid()} on {socket.gethostname()}); "
            "wait for it or stop it"
        )
    with run_lock(run_dir):  # released at the end of the block
        pass


def test_the_error_names_the_work_that_holds_the_folder(tmp_path):
    run_dir = tmp_path / "run"
    held = r"is in use by attnkit prepare \(pid \d+ on "
    with (
        run_lock(run_dir, work="attnkit prepare"),
        pytest.raises(RunInUse, match=held),
        run_lock(run_dir),
    ):
        pass


def test_a_holder_that_recorded_no_work_is_a_training(tmp_path):
    run_dir = tmp_path / "run"
    with run_lock(run_dir) as lock:
        lock.write_text("123 elsewhere\n")  # what attnkit wrote before it named the work
        held = r"in use by another training \(pid 123 on elsewhere\)"
        with pytest.raises(RunInUse, match=held), run_lock(run_dir):
            pass


@pytest.mark.parametrize("command", ["train", "prepare"])  # docs/large_corpora.md: at once
def test_cli_train_on_a_locked_folder_exits_2_and_writes_nothing(tmp_path, capsys, command):
    run_dir = tmp_path / "run"
    with run_lock(run_dir):
        status, _, err = run(capsys, command, REVERSE, "--out", str(run_dir), "--no-progress")
    assert status == 2
    assert_one_line_error(err, command, f"{IN_USE} (pid {os.getpid()} on ")
    assert [p.name for p in run_dir.iterdir()] == [LOCK_NAME]


def test_a_sigkilled_holder_leaves_no_stale_lock(tmp_path):
    run_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from attnkit.nmt.runs.runlock import run_lock\n"
            "with run_lock(sys.argv[1]):\n    print('locked', flush=True); time.sleep(60)",
            str(run_dir),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline() == "locked\n"
    with pytest.raises(RunInUse, match=f"pid {holder.pid} on"), run_lock(run_dir):
        pass
    holder.kill()
    holder.wait(timeout=30)
    with run_lock(run_dir):  # no manual cleanup: the kernel dropped the dead holder's lock
        pass


def race(*argvs):
    """Start one ``attnkit`` process per argv at once; -> [(process, status, stdout, stderr)]."""
    processes = [attnkit(*argv) for argv in argvs]
    return [(p, *finish(p)) for p in processes]


def winner_and_loser(results):
    """The process that trained (status 0) and the one refused (status 2), in that order."""
    assert sorted(status for _, status, _, _ in results) == [0, 2], results
    won, lost = sorted(results, key=lambda r: r[1])
    assert lost[3].count("\n") == 1 and "Traceback" not in lost[3], lost[3]
    return won, lost


@pytest.mark.slow
def test_two_concurrent_resumes_one_trains_exactly_the_other_exits_2(reference, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    first = attnkit("train", REVERSE, "--out", str(run_dir), *SMALL)
    wait_for_checkpoint(first, run_dir)
    first.send_signal(signal.SIGKILL)  # the killed holder's lock goes with it
    first.wait(timeout=30)
    assert saved_step(run_dir) < 60
    resume = ("train", "--resume", str(run_dir), "--no-progress")
    won, lost = winner_and_loser(race(resume, resume))
    assert f"{IN_USE} (pid {won[0].pid} on {socket.gethostname()}); wait for it" in lost[3]
    assert "resumed at epoch" in won[3]
    assert_same_run(run_dir, reference)  # no duplicate metrics rows, the unbroken run's weights


@pytest.mark.slow
def test_two_concurrent_fresh_starts_make_one_run(tmp_path):
    run_dir = tmp_path / "run"
    fresh = ("train", REVERSE, "--out", str(run_dir), *SMALL, "--train.max_steps", "10")
    won, lost = winner_and_loser(race(fresh, fresh))
    # the loser either met the lock or, starting late, the winner's config.yaml
    assert IN_USE in lost[3] or "already holds a run" in lost[3], lost[3]
    assert [row["step"] for row in epoch_rows(run_dir)] == [10]


@pytest.mark.slow
def test_translate_while_training_writes_reads_whole_checkpoints(tmp_path):
    run_dir = tmp_path / "run"
    args = [*SMALL, "--train.checkpoint_every", "1", "--train.valid_every", "4"]
    args += ["--train.max_steps", "24"]
    training = attnkit("train", REVERSE, "--out", str(run_dir), *args)
    wait_for_checkpoint(training, run_dir)
    while not (run_dir / "best.json").is_file():
        time.sleep(0.01)
    steps = set()
    while training.poll() is None:  # readers take no lock and never wait for the writer
        for name in ("best", "last"):
            loaded = load_run(run_dir, checkpoint=name)
            (translation,) = translate_lines(loaded, ["s1 s2 s3"], beam_size=1)
            assert translation.weights is not None  # a whole model decoded it
        steps.add(saved_step(run_dir))
        time.sleep(0.02)  # leave the trainer some CPU
    assert finish(training)[0] == 0
    assert len(steps) > 2  # the loads really overlapped many saves


@pytest.mark.parametrize("command", ["train", "prepare"])
def test_an_out_folder_that_cannot_be_made_is_one_line(tmp_path, capsys, command):
    in_the_way = tmp_path / "notes.txt"
    in_the_way.write_text("not a run\n")
    status, _, err = run(capsys, command, REVERSE, "--out", str(in_the_way), "--no-progress")
    assert status == 2
    assert_one_line_error(err, command, f"--out {in_the_way} is a file, not a run folder")
    assert in_the_way.read_text() == "not a run\n"
    status, _, err = run(capsys, command, REVERSE, "--out", str(in_the_way / "run"))
    assert status == 74
    assert_one_line_error(err, command, f"cannot write {in_the_way / 'run'}: Not a directory")
