"""train.average_last: snapshots of the last validations, the averaged checkpoint at the end,
and both kept consistent when a run is resumed."""

import json

import pytest
import torch
from test_train import TINY

from attnkit.nmt.config import RunConfig
from attnkit.nmt.runs.checkpoint import load_checkpoint, save_checkpoint
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.nmt.runs.run_folder import RunFolder
from attnkit.nmt.runs.snapshots import Snapshots
from attnkit.nmt.training import objective
from attnkit.nmt.training.loop import train
from attnkit.nmt.training.prepare import validation_data

# 20 steps, validated every 5: snapshots at 5, 10, 15, 20; the last 3 are kept.
AVERAGED = ("train.max_steps=20", "train.average_last=3")


def config(*overrides):
    return RunConfig.from_dict(TINY, [*AVERAGED, *overrides])


def quiet(_line):
    pass


def _mean_by_hand(states):
    return {k: (sum(s[k].double() for s in states) / len(states)).float() for k in states[0]}


def _snapshot_weights(run_dir):
    folder = RunFolder(run_dir)
    return {s: load_checkpoint(folder.snapshots.path(s)).model for s in folder.snapshots.steps()}


@pytest.fixture(scope="module")
def averaged_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("averaged")
    heard = []
    train(config(), run_dir, progress_bar=False, echo=heard.append)
    return run_dir, heard


def test_the_last_three_snapshots_are_kept_with_their_scores(averaged_run):
    run_dir, _ = averaged_run
    folder = RunFolder(run_dir)
    assert folder.snapshots.steps() == [10, 15, 20]
    assert len(list(folder.snapshots.folder.glob("*.safetensors"))) == 3
    rows = {r["step"]: r for r in map(json.loads, folder.metrics.read_text().splitlines())}
    for step in (10, 15, 20):
        snapshot = load_checkpoint(folder.snapshots.path(step))
        assert snapshot.optimizer is None and snapshot.extra == {}
        assert snapshot.state["valid_bleu"] == rows[step]["valid_bleu"]
        assert snapshot.state["epoch"] == rows[step]["epoch"]
    last = load_checkpoint(folder.last).model  # the model after step 20
    newest = load_checkpoint(folder.snapshots.path(20)).model
    assert all(torch.equal(newest[k], last[k]) for k in last)


def test_the_averaged_checkpoint_is_the_mean_of_the_three_snapshots(averaged_run):
    run_dir, _ = averaged_run
    snapshots = _snapshot_weights(run_dir)
    averaged = load_checkpoint(RunFolder(run_dir).averaged)
    expected = _mean_by_hand([snapshots[s] for s in (10, 15, 20)])
    assert averaged.model.keys() == expected.keys()
    for key, value in expected.items():
        assert averaged.model[key].dtype == value.dtype
        assert torch.equal(averaged.model[key], value), key
    newest = snapshots[20]
    assert not all(torch.equal(averaged.model[k], newest[k]) for k in newest)  # not a copy
    assert averaged.optimizer is None


def test_the_averaged_scores_are_recorded_and_compared_with_best(averaged_run):
    run_dir, heard = averaged_run
    folder = RunFolder(run_dir)
    state = load_checkpoint(folder.averaged).state
    best = load_checkpoint(folder.best).state["progress"]
    assert state["averaged_steps"] == [10, 15, 20] and state["step"] == 20
    assert state["best_step"] == best["best_step"] and state["best_bleu"] == best["best_bleu"]
    line = [h for h in heard if h.startswith("averaged 3 snapshots (steps 10, 15, 20)")]
    assert len(line) == 1
    bleu, best_bleu = state["valid_bleu"], best["best_bleu"]
    assert f"valid BLEU {bleu:.2f} vs best {best_bleu:.2f}" in line[0]
    assert f"{bleu - best_bleu:+.2f}" in line[0] and "--checkpoint averaged" in line[0]


def test_the_recorded_scores_are_those_of_the_averaged_weights(averaged_run):
    run_dir, _ = averaged_run
    run = load_run(run_dir, checkpoint="averaged")
    data = validation_data(run.config, run.src_tok, run.tgt_tok)
    scores = objective.validate(
        run.model, data.valid, data.references, run.tgt_tok, run.config, run.device
    )
    state = load_checkpoint(RunFolder(run_dir).averaged).state
    assert scores["valid_bleu"] == pytest.approx(state["valid_bleu"], abs=1e-9)
    assert scores["valid_loss"] == pytest.approx(state["valid_loss"], rel=1e-6)


def test_resume_keeps_the_snapshot_set_of_an_uninterrupted_run(averaged_run, tmp_path):
    run_dir, _ = averaged_run

    def crash_after_step_10(line):
        if line.startswith("epoch 1 step 10:"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(config(), tmp_path, progress_bar=False, echo=crash_after_step_10)
    folder = RunFolder(tmp_path)
    assert folder.snapshots.steps() == [5, 10]
    # A snapshot from past the checkpoint (a crash after it was written): resuming drops it.
    save_checkpoint(folder.snapshots.folder, "step-00000012", {"x": torch.zeros(1)}, {"step": 12})
    save_checkpoint(tmp_path, "averaged", {"x": torch.zeros(1)}, {"averaged_steps": [5, 10, 12]})
    train(config(), tmp_path, resume=True, progress_bar=False, echo=quiet)
    assert folder.snapshots.steps() == [10, 15, 20]
    resumed, straight = _snapshot_weights(tmp_path), _snapshot_weights(run_dir)
    for step in (10, 15, 20):
        assert all(torch.equal(resumed[step][k], straight[step][k]) for k in straight[step])
    a, b = (
        load_checkpoint(folder.averaged).model,
        load_checkpoint(RunFolder(run_dir).averaged).model,
    )
    assert all(torch.equal(a[k], b[k]) for k in b)


def test_a_run_killed_before_its_last_trim_keeps_average_last_snapshots(
    averaged_run, tmp_path, monkeypatch
):
    keep_last = Snapshots.keep_last

    def killed_before_the_last_trim(self, count):
        if self.steps()[-1] == 20:  # the last validation's snapshot and last checkpoint are saved
            raise KeyboardInterrupt
        return keep_last(self, count)

    monkeypatch.setattr(Snapshots, "keep_last", killed_before_the_last_trim)
    with pytest.raises(KeyboardInterrupt):
        train(config(), tmp_path, progress_bar=False, echo=quiet)
    monkeypatch.setattr(Snapshots, "keep_last", keep_last)
    folder = RunFolder(tmp_path)
    assert folder.snapshots.steps() == [5, 10, 15, 20]
    train(config(), tmp_path, resume=True, progress_bar=False, echo=quiet)
    assert folder.snapshots.steps() == RunFolder(averaged_run[0]).snapshots.steps() == [10, 15, 20]


def test_a_run_stopped_while_averaging_is_finished_when_resumed(averaged_run, tmp_path):
    run_dir, straight_heard = averaged_run

    def crash_when_training_stops(line):
        if line.startswith("stopped: "):  # then the averaged checkpoint and the choice
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(config(), tmp_path, progress_bar=False, echo=crash_when_training_stops)
    folder = RunFolder(tmp_path)
    assert not folder.averaged.exists() and not folder.choice.exists()
    heard = []
    train(config(), tmp_path, resume=True, progress_bar=False, echo=heard.append)
    a, b = load_checkpoint(folder.averaged), load_checkpoint(RunFolder(run_dir).averaged)
    assert a.state == b.state and all(torch.equal(a.model[k], b.model[k]) for k in b.model)
    assert folder.choice.read_text() == RunFolder(run_dir).choice.read_text()
    ours = [line.replace(str(tmp_path), str(run_dir)) for line in heard[-2:]]
    assert ours == straight_heard[-2:]  # the averaged line and the checkpoint auto line


def test_a_run_that_trains_on_drops_the_choice_of_its_earlier_end(averaged_run, tmp_path):
    run_dir, _ = averaged_run

    def crash_after_step_25(line):
        if line.startswith("epoch") and " step 25:" in line:
            raise KeyboardInterrupt

    train(config(), tmp_path, progress_bar=False, echo=quiet)
    assert RunFolder(tmp_path).choice.exists()
    with pytest.raises(KeyboardInterrupt):
        train(
            config("train.max_steps=30"),
            tmp_path,
            resume=True,
            progress_bar=False,
            echo=crash_after_step_25,
        )
    assert not RunFolder(tmp_path).choice.exists()  # it chose among step-20 checkpoints


def test_average_last_off_keeps_no_snapshots(tmp_path):
    train(
        config("train.average_last=0", "train.max_steps=5"),
        tmp_path,
        progress_bar=False,
        echo=quiet,
    )
    folder = RunFolder(tmp_path)
    assert not folder.snapshots.folder.exists() and not folder.averaged.exists()


def test_one_snapshot_is_not_averaged_and_says_so(tmp_path):
    heard = []
    train(
        config("train.average_last=1", "train.max_steps=10"),
        tmp_path,
        progress_bar=False,
        echo=heard.append,
    )
    folder = RunFolder(tmp_path)
    assert folder.snapshots.steps() == [10] and not folder.averaged.exists()
    assert any("averaging needs 2 or more, so no averaged checkpoint" in h for h in heard)


def test_a_negative_average_last_is_a_config_error():
    with pytest.raises(ValueError, match=r"train.average_last: must be >= 0, got -1"):
        RunConfig.from_dict(TINY, ["train.average_last=-1"])
