"""Damaged checkpoints and non-finite losses: clear errors naming the file, fallback to
the previous checkpoint (and the same result as an unbroken run), skipped steps, and
a clean stop that keeps the last good checkpoint."""

import errno
import json
import math
import os
import shutil
import signal

import pytest
import torch

import attnkit.nmt.training.objective as objective_module
import attnkit.plot as plot_module
from attnkit.atomic import WriteError
from attnkit.cli import main
from attnkit.nmt.config import RunConfig
from attnkit.nmt.runs.checkpoint import load_checkpoint, load_latest, save_checkpoint
from attnkit.nmt.runs.run_folder import RunFolder
from attnkit.nmt.training.interrupt import StopRequest
from attnkit.nmt.training.loop import TrainingError, train

TINY = {
    "data": {
        "toy": {"task": "reverse", "num_symbols": 8, "min_len": 2, "max_len": 6},
        "max_src_len": None,
        "max_tgt_len": None,
    },
    "tokenizer": {"kind": "word", "vocab_size": 50},
    "model": {"embed_dim": 16, "hidden_size": 24, "dropout": 0.1, "score": "additive"},
    "train": {"batch_size": 32, "lr": 0.01, "epochs": 3, "valid_every": 5, "seed": 3},
    "decode": {"beam_size": 1, "max_len_a": 1.0, "max_len_b": 2},
}
SIZES = ["data.toy.train_size=320", "data.toy.valid_size=16", "data.toy.test_size=8"]


def config(*overrides):
    return RunConfig.from_dict(TINY, [*SIZES, "train.threads=1", "train.max_steps=20", *overrides])


def quiet(_line):
    pass


def rows(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if k != "elapsed_s"} for x in lines]


def assert_same_weights(a, b):
    first, second = load_checkpoint(a / "last.json").model, load_checkpoint(b / "last.json").model
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("reference")
    train(config(), run_dir, progress_bar=False, echo=quiet)
    return run_dir


def stopped_at_step_10(run_dir):
    """A run killed right after its step-10 checkpoint: last = step 10, last.prev = step 5."""

    def crash(line):
        if line.startswith("epoch 1 step 10:"):
            raise KeyboardInterrupt  # like a kill: no further saving

    with pytest.raises(KeyboardInterrupt):
        train(config(), run_dir, progress_bar=False, echo=crash)
    assert load_checkpoint(run_dir / "last.json").state["progress"]["step"] == 10
    assert load_checkpoint(run_dir / "last.prev.json").state["progress"]["step"] == 5


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("damaged", ["weights", "record"])
def test_truncated_checkpoint_is_named_and_resume_falls_back(reference, tmp_path, damaged):
    stopped_at_step_10(tmp_path)
    record = tmp_path / "last.json"
    weights = tmp_path / json.loads(record.read_text())["weights"]
    truncate(weights if damaged == "weights" else record)
    named = weights.name if damaged == "weights" else "last.json"
    with pytest.raises(
        ValueError, match=rf"{named}.*(truncated or corrupt|not a valid checkpoint)"
    ):
        load_checkpoint(record)
    messages = []
    summary = train(config(), tmp_path, resume=True, progress_bar=False, echo=messages.append)
    fallback = [m for m in messages if "falling back" in m]
    assert len(fallback) == 1 and named in fallback[0] and "last.prev.json" in fallback[0]
    assert "resumed at epoch 1, step 5" in messages
    assert summary.progress.step == 20 and summary.progress.finished
    assert rows(tmp_path) == rows(reference)  # step 10 was redone, its row not duplicated
    assert_same_weights(tmp_path, reference)


def test_both_checkpoints_damaged_is_one_clear_error(tmp_path):
    weights = {"w": torch.ones(3)}
    for step in (1, 2):
        save_checkpoint(tmp_path, "last", weights, {"step": step}, keep_previous=True)
    for name in ("last.json", "last.prev.json"):
        truncate(tmp_path / name)
    with pytest.raises(ValueError, match=r"no usable checkpoint: .*last\.json.*last\.prev\.json"):
        load_latest(tmp_path / "last.json")


def test_previous_checkpoint_is_kept_and_stale_weights_removed(tmp_path):
    for step in (1, 2, 3):
        save_checkpoint(
            tmp_path, "last", {"w": torch.full((2,), step)}, {"step": step}, keep_previous=True
        )
    (tmp_path / "last.deadbeef.safetensors").write_bytes(b"left by a crash")
    save_checkpoint(tmp_path, "last", {"w": torch.zeros(2)}, {"step": 4}, keep_previous=True)
    assert load_checkpoint(tmp_path / "last.json").state == {"step": 4}
    assert load_checkpoint(tmp_path / "last.prev.json").state == {"step": 3}
    assert len(list(tmp_path.glob("last.*.safetensors"))) == 2


def test_a_damaged_newest_checkpoint_never_replaces_the_good_previous_one(tmp_path):
    # a resume that fell back to last.prev.json saves again: before, the damaged last.json
    # was kept as the new last.prev.json, so no good fallback was left
    for step in (1, 2):
        save_checkpoint(
            tmp_path, "last", {"w": torch.full((2,), step)}, {"step": step}, keep_previous=True
        )
    weights = tmp_path / json.loads((tmp_path / "last.json").read_text())["weights"]
    truncate(weights)
    assert load_latest(tmp_path / "last.json", warn=lambda _: None).state == {"step": 1}
    save_checkpoint(tmp_path, "last", {"w": torch.zeros(2)}, {"step": 3}, keep_previous=True)
    assert load_checkpoint(tmp_path / "last.json").state == {"step": 3}
    assert load_checkpoint(tmp_path / "last.prev.json").state == {"step": 1}
    assert not weights.exists()  # the damaged weights, named by no record, are gone


def poisoned_loss(bad_calls, kind="loss"):
    """Wrap the training loss so the given training calls (1-based) are non-finite."""
    real, calls = objective_module.token_loss, []

    def loss(model, batch, smoothing, teacher_forcing, reduction="mean"):
        value = real(model, batch, smoothing, teacher_forcing, reduction)
        if reduction != "mean":  # validation
            return value
        calls.append(1)
        if bad_calls(len(calls)):
            if kind == "loss":
                return value * math.nan
            # finite value, NaN gradient: d sqrt(x)/dx is inf at 0, times 0
            return value + torch.sqrt(next(model.parameters()).sum() * 0)
        return value

    return loss


@pytest.mark.parametrize("kind", ["loss", "gradient"])
def test_a_non_finite_step_is_skipped_with_a_warning(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(objective_module, "token_loss", poisoned_loss(lambda n: n == 3, kind))
    messages = []
    summary = train(config(), tmp_path, progress_bar=False, echo=messages.append)
    warnings = [m for m in messages if m.startswith("warning:")]
    why = "loss is nan" if kind == "loss" else "gradient norm is nan"
    assert len(warnings) == 1 and f"batch 3: {why}; step skipped" in warnings[0]
    assert summary.progress.step == 20 and summary.progress.skipped_steps == 1
    stopped = next(m for m in messages if m.startswith("stopped: "))
    assert "1 step(s) skipped as non-finite" in stopped
    weights = load_checkpoint(tmp_path / "last.json").model
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_repeated_non_finite_losses_stop_and_keep_the_last_good_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setattr(objective_module, "token_loss", poisoned_loss(lambda n: n >= 7))
    with pytest.raises(
        TrainingError, match="3 non-finite losses/gradients in a row at step 6"
    ) as e:
        train(config("train.max_nonfinite=3"), tmp_path, progress_bar=False, echo=quiet)
    # the advice named train.lr and train.clip, which --resume refuses to change
    assert str(e.value).endswith(
        "(keys --resume may not change: start over with --overwrite, or in another --out with "
        f"train.init_from: {tmp_path} and train.init_checkpoint: last to keep what it learnt)"
    )
    good = load_checkpoint(tmp_path / "last.json")
    assert good.state["progress"]["step"] == 5
    assert all(torch.isfinite(w).all() for w in good.model.values())


def test_cli_reports_divergence_with_exit_1_and_no_traceback(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(objective_module, "token_loss", poisoned_loss(lambda n: True))
    path = tmp_path / "tiny.yaml"
    path.write_text(config("train.max_nonfinite=2").to_yaml())
    assert main(["train", str(path), "--out", str(tmp_path / "run"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "attnkit train: error: 2 non-finite losses/gradients in a row at step 0" in err
    assert err.count("warning:") == 2


def test_sigterm_saves_and_stops_then_resume_matches_an_unbroken_run(reference, tmp_path):
    messages = []

    def terminate_after_step_5(line):
        messages.append(line)
        if line.startswith("epoch 1 step 5:"):
            signal.raise_signal(signal.SIGTERM)  # as when the machine shuts down

    before = signal.getsignal(signal.SIGTERM)
    summary = train(config(), tmp_path, progress_bar=False, echo=terminate_after_step_5)
    assert summary.interrupted and not summary.progress.finished
    assert summary.progress.step == 5
    assert messages[-1].startswith("interrupted (SIGTERM) at epoch 1, step 5; checkpoint saved;")
    assert "continue with: attnkit train --resume" in messages[-1]
    assert signal.getsignal(signal.SIGTERM) is before  # handler restored
    train(config(), tmp_path, resume=True, progress_bar=False, echo=quiet)
    assert rows(tmp_path) == rows(reference)
    assert_same_weights(tmp_path, reference)


def test_second_sigint_aborts_at_once(capfd):
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), StopRequest() as stop:
        signal.raise_signal(signal.SIGINT)  # to this thread, now
        assert stop.requested == "SIGINT"
        signal.raise_signal(signal.SIGINT)  # to this thread, now
    assert capfd.readouterr().err.count("SIGINT: saving a checkpoint after this step") == 1
    assert signal.getsignal(signal.SIGINT) is before


def test_ctrl_c_after_training_ended_stops_at_once_and_resume_finishes_the_run(tmp_path, capfd):
    said = []

    def interrupt_after_averaging(line):
        said.append(line)
        if line.startswith("averaged 3 snapshots"):  # then the run chooses its checkpoint
            signal.raise_signal(signal.SIGINT)  # to this thread, now

    with pytest.raises(KeyboardInterrupt):
        train(
            config("train.average_last=3"),
            tmp_path,
            progress_bar=False,
            echo=interrupt_after_averaging,
        )
    assert "saving a checkpoint after this step" not in capfd.readouterr().err
    assert said[-1] == (
        "interrupted after the last step, which is saved; finish the run (its averaged "
        f"checkpoint and choice of checkpoint) with: attnkit train --resume {tmp_path}"
    )
    folder = RunFolder(tmp_path)
    assert load_checkpoint(folder.last).state["progress"]["finished"]
    assert not folder.choice.exists()
    heard = []
    train(
        config("train.average_last=3"), tmp_path, resume=True, progress_bar=False, echo=heard.append
    )
    assert folder.choice.exists() and heard[-1].startswith("checkpoint auto: ")


class FullDisk:
    """A disk that fills up: once ``full()`` says so, every atomic write fails with ENOSPC
    (at its fsync, after the data went to the temporary file, as on a real full disk)."""

    def __init__(self, monkeypatch, full):
        real = os.fsync
        self.failed = []

        def fsync(fd):
            if full() and os.path.isfile(f"/proc/self/fd/{fd}"):
                self.failed.append(os.readlink(f"/proc/self/fd/{fd}"))
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(fd)

        monkeypatch.setattr(os, "fsync", fsync)


def after_rows(run_dir, count):
    """True once metrics.jsonl holds ``count`` rows."""
    path = run_dir / "metrics.jsonl"
    return lambda: path.is_file() and len(path.read_text().splitlines()) >= count


def test_a_full_disk_is_one_message_with_the_last_checkpoint_and_resume_is_exact(
    reference, tmp_path, monkeypatch, capsys
):
    run_dir, path = tmp_path / "run", tmp_path / "tiny.yaml"
    path.write_text(config().to_yaml())
    disk = FullDisk(monkeypatch, after_rows(run_dir, 3))  # full after the step-15 row
    assert main(["train", str(path), "--out", str(run_dir), "--no-progress"]) == 74
    err = capsys.readouterr().err.splitlines()
    assert "Traceback" not in "\n".join(err) and len(disk.failed) == 1
    weights = json.loads((run_dir / "last.json").read_text())["weights"]
    assert err[-1].startswith(f"attnkit train: error: cannot write {run_dir}/last.")
    assert err[-1].endswith(
        f".safetensors: No space left on device; nothing saved is lost: the last good checkpoint "
        f"of the run in {run_dir} is last.json (step 10); free some space and continue with: "
        f"attnkit train --resume {run_dir}"
    )
    assert weights in {p.name for p in run_dir.iterdir()}
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]  # nothing half-written
    monkeypatch.undo()
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 0
    assert rows(run_dir) == rows(reference)
    assert_same_weights(run_dir, reference)


def test_a_full_disk_after_a_row_of_the_checkpoints_step_is_resumed_without_a_twin_row(
    tmp_path, monkeypatch
):
    # checkpoint_every saves step 10 before the epoch's validation at step 10 writes its row;
    # the disk fills before that validation's checkpoints: resuming redoes the validation
    every_epoch = config("train.valid_every=null", "train.checkpoint_every=5")
    straight, run_dir = tmp_path / "straight", tmp_path / "run"
    train(every_epoch, straight, progress_bar=False, echo=quiet)
    FullDisk(monkeypatch, after_rows(run_dir, 1))
    with pytest.raises(WriteError, match="is last.json \\(step 10\\)"):
        train(every_epoch, run_dir, progress_bar=False, echo=quiet)
    assert [row["step"] for row in rows(run_dir)] == [10]
    monkeypatch.undo()
    train(every_epoch, run_dir, resume=True, progress_bar=False, echo=quiet)
    assert [row["step"] for row in rows(run_dir)] == [10, 20]
    assert rows(run_dir) == rows(straight)
    assert_same_weights(run_dir, straight)


def test_a_full_disk_before_the_first_checkpoint_says_to_start_again(tmp_path, monkeypatch):
    FullDisk(monkeypatch, lambda: (tmp_path / "metrics.jsonl").is_file())
    with pytest.raises(WriteError, match="holds no checkpoint yet; free some space and start"):
        train(config(), tmp_path, progress_bar=False, echo=quiet)


def test_metrics_on_a_full_disk_names_the_file(tmp_path):
    (tmp_path / "metrics.jsonl").symlink_to("/dev/full")  # every write: ENOSPC
    with pytest.raises(WriteError, match=r"metrics\.jsonl: No space left on device"):
        RunFolder(tmp_path).append_history({"step": 1})


def test_a_learning_curve_on_a_full_disk_ends_training_with_the_checkpoint_named(
    tmp_path, monkeypatch
):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(plot_module, "learning_curve", full)  # rank 0 imports it to draw
    with pytest.raises(WriteError) as caught:
        train(config(), tmp_path, progress_bar=False, echo=quiet)
    message = str(caught.value)
    assert message.startswith(f"cannot write {tmp_path}/learning_curve.png: No space left")
    assert "last good checkpoint of the run" in message and "is last.json (step 5)" in message


def test_a_run_killed_before_drawing_its_last_validation_draws_it_when_resumed(
    tmp_path, monkeypatch
):
    drawn, killed = [], []

    def killed_while_drawing_step_20(rows, path):
        if rows[-1]["step"] == 20 and not killed:  # last.json of step 20 is saved
            killed.append(True)
            raise KeyboardInterrupt
        drawn.append([row["step"] for row in rows])
        path.write_bytes(b"png")

    monkeypatch.setattr(plot_module, "learning_curve", killed_while_drawing_step_20)
    with pytest.raises(KeyboardInterrupt):
        train(config(), tmp_path, progress_bar=False, echo=quiet)
    assert load_checkpoint(tmp_path / "last.json").state["progress"]["step"] == 20
    train(config(), tmp_path, resume=True, progress_bar=False, echo=quiet)
    assert drawn[-1] == [row["step"] for row in rows(tmp_path)] == [5, 10, 15, 20]


def test_a_torn_last_metrics_row_is_named_and_rebuilt_on_resume(reference, tmp_path):
    shutil.copytree(reference, tmp_path / "run")
    run_dir = tmp_path / "run"
    metrics = run_dir / "metrics.jsonl"
    intact = rows(run_dir)
    metrics.write_bytes(metrics.read_bytes()[:-40])  # as a kill during the write would
    messages = []
    summary = train(config(), run_dir, resume=True, progress_bar=False, echo=messages.append)
    warnings = [m for m in messages if m.startswith("warning:")]
    assert len(warnings) == 1 and f"{metrics}: line {len(intact)} is damaged" in warnings[0]
    last = summary.history[-1]
    assert last["damaged"] is True and last["step"] == intact[-1]["step"] == 20
    rebuilt = {k: v for k, v in last.items() if k not in ("damaged", "elapsed_s")}
    assert rebuilt.items() <= intact[-1].items() and {"valid_loss", "lr"} <= rebuilt.keys()
    assert len(summary.history) == len(intact)


def test_the_resume_command_after_a_failed_write_quotes_a_folder_with_a_space(tmp_path):
    """'continue with: attnkit train --resume /x/my run' pasted into a shell gave two
    arguments, and train took 'run' for a second CONFIG."""
    from attnkit.atomic import WriteError
    from attnkit.nmt.runs.run_folder import RunFolder
    from attnkit.nmt.training.messages import after_write_failure

    folder = RunFolder(tmp_path / "my run")
    full = WriteError(folder.path / "last.json", OSError(errno.ENOSPC, "No space left on device"))
    assert after_write_failure(folder, full).endswith(
        f"start again (the same command, or attnkit train --resume '{tmp_path}/my run')"
    )


def _hang_up_after_step_5(messages: list):
    """An echo that keeps the lines and hangs up (SIGHUP) after step 5's."""

    def echo(line):
        messages.append(line)
        if line.startswith("epoch 1 step 5:"):
            signal.raise_signal(signal.SIGHUP)

    return echo


def test_sighup_saves_and_stops_as_sigterm_does(tmp_path):
    # the terminal closed or the ssh session dropped: the run ended at once, nothing saved
    messages = []
    before = signal.getsignal(signal.SIGHUP)
    summary = train(config(), tmp_path, progress_bar=False, echo=_hang_up_after_step_5(messages))
    assert summary.interrupted and summary.progress.step == 5
    assert messages[-1].startswith("interrupted (SIGHUP) at epoch 1, step 5; checkpoint saved;")
    assert signal.getsignal(signal.SIGHUP) is before


def test_a_run_under_nohup_keeps_ignoring_sighup(tmp_path):
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts a command
    try:
        echo = _hang_up_after_step_5([])
        summary = train(config(), tmp_path, progress_bar=False, echo=echo)
    finally:
        signal.signal(signal.SIGHUP, before)
    assert not summary.interrupted and summary.progress.finished
