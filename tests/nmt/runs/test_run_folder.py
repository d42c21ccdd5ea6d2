"""RunFolder: the file names, the default run name, start/resume/overwrite rules, history."""

import json
import os
from pathlib import Path

import pytest
import torch

from attnkit.nmt.config import RunConfig
from attnkit.nmt.runs.checkpoint import save_checkpoint
from attnkit.nmt.runs.run_folder import RESUME_MAY_CHANGE, RunFolder

TOY = {"data": {"toy": {"task": "reverse", "train_size": 16, "valid_size": 4}}}


def config(*overrides):
    return RunConfig.from_dict(TOY, ["name=toy", *overrides])


def with_a_run(folder: RunFolder, *overrides) -> None:
    """What a started run leaves: its config and a ``last`` checkpoint."""
    assert folder.prepare(config(*overrides), resume=False, overwrite=False, echo=print) is False
    save_checkpoint(folder.path, "last", {"w": torch.zeros(1)}, {"step": 1})


def test_file_names():
    folder = RunFolder("runs/x")
    assert folder.path == Path("runs/x") and folder.name == "x"
    assert folder.config == Path("runs/x/config.yaml")
    assert folder.metrics == Path("runs/x/metrics.jsonl")
    assert folder.learning_curve == Path("runs/x/learning_curve.png")
    assert folder.lock == Path("runs/x/.lock")
    assert folder.best == Path("runs/x/best.json")
    assert folder.last == Path("runs/x/last.json")
    assert folder.checkpoint("last.prev") == Path("runs/x/last.prev.json")


def test_default_folder_is_runs_slash_the_config_name():
    assert RunFolder.default("quick") == RunFolder(Path("runs") / "quick")


def test_a_new_run_writes_its_config_and_drops_stale_metrics(tmp_path):
    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    folder.metrics.write_text('{"step": 5}\n')  # left by a start killed before its first save
    assert folder.prepare(config(), resume=False, overwrite=False, echo=print) is False
    assert RunConfig.load(folder.config).model_dump() == config().model_dump()
    assert not folder.metrics.exists() and not folder.has_run()


def test_a_history_whose_last_checkpoints_are_gone_is_not_overwritten(tmp_path):
    # two validations mean a `last` was saved after the first: with it and last.prev
    # deleted by hand, a start here would have overwritten best.json, metrics and snapshots
    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    folder.metrics.write_text('{"step": 5}\n{"step": 10}\n')
    save_checkpoint(folder.path, "best", {"w": torch.zeros(1)}, {"step": 10})
    for resume in (False, True):
        with pytest.raises(ValueError) as caught:
            folder.prepare(config(), resume=resume, overwrite=False, echo=print)
        assert str(caught.value) == (
            f"{folder.path} holds the history of a run (2 validations in metrics.jsonl) but no "
            "last.json or last.prev.json to resume from; starting here would overwrite what is "
            "left: restore those files, pass --overwrite (overwrite=True in Python) to start "
            "over, or use another --out folder"
        )
    assert folder.metrics.read_text() == '{"step": 5}\n{"step": 10}\n'
    assert folder.prepare(config(), resume=False, overwrite=True, echo=print) is False
    assert not folder.metrics.exists() and not folder.best.exists()


def test_a_folder_with_a_run_needs_resume_or_overwrite(tmp_path):
    folder = RunFolder(tmp_path)
    with_a_run(folder)
    with pytest.raises(ValueError, match="already holds a run; pass --resume"):
        folder.prepare(config(), resume=False, overwrite=False, echo=print)
    messages = []
    assert folder.prepare(config(), resume=True, overwrite=False, echo=messages.append) is True
    assert messages == []


def test_resume_refuses_a_changed_model_and_names_the_key(tmp_path):
    folder = RunFolder(tmp_path)
    with_a_run(folder)
    with pytest.raises(ValueError, match=r"\(model\.hidden_size: 512 in the run, 8 given\)"):
        folder.prepare(config("model.hidden_size=8"), resume=True, overwrite=False, echo=print)


def test_resume_may_change_a_budget_and_records_it(tmp_path):
    folder = RunFolder(tmp_path)
    with_a_run(folder)
    messages = []
    changed = config("train.max_steps=9")
    assert folder.prepare(changed, resume=True, overwrite=False, echo=messages.append) is True
    assert messages == ["resuming with train.max_steps: null in the run, 9 given"]
    assert RunConfig.load(folder.config).train.max_steps is None  # saved once it trains
    folder.save_config(changed)
    assert RunConfig.load(folder.config).train.max_steps == 9


def test_resume_may_change_threads_and_device_and_records_them(tmp_path):
    folder = RunFolder(tmp_path)
    with_a_run(folder)
    assert {"train.max_steps", "train.threads", "train.device"} <= set(RESUME_MAY_CHANGE)
    changed = config("train.max_steps=9", "train.threads=1", "train.device=cpu")
    messages = []
    assert folder.prepare(changed, resume=True, overwrite=False, echo=messages.append) is True
    assert messages == [
        'resuming with train.device: "auto" in the run, "cpu" given; train.max_steps: null in '
        'the run, 9 given; train.threads: "auto" in the run, 1 given'
    ]
    folder.save_config(changed)
    saved = RunConfig.load(folder.config).train
    assert (saved.max_steps, saved.threads, saved.device) == (9, 1, "cpu")


def test_overwrite_removes_the_previous_run_but_not_the_lock(tmp_path):
    folder = RunFolder(tmp_path)
    with_a_run(folder)
    for name in (
        "metrics.jsonl",
        "learning_curve.png",
        "tokenizer.json",
        "vocab.json",
        "spm.src.model",
        "last.prev.json",
        "best.0123abcd.safetensors",
        ".lock",
        "precision.json.damaged",
    ):
        (tmp_path / name).write_text("x")
    mine = ["best.txt", "last.notes.md", "spm_old.model", "vocab_mine.json"]  # a user's own
    for name in mine:
        (tmp_path / name).write_text("x")
    assert folder.prepare(config(), resume=False, overwrite=True, echo=print) is False
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".lock", "config.yaml", *mine])


def test_history_reads_rows_up_to_a_step_and_keeps_what_a_torn_line_holds(tmp_path):
    folder = RunFolder(tmp_path)
    assert folder.read_history(10) == []  # no file yet
    for step in (1, 2, 3):
        folder.append_history({"step": step, "valid_bleu": step / 2})
    with open(folder.metrics, "a") as log:
        log.write('[1, 2]\n{"step": "4"}\n{"step": 4, "lr": 0.5, "valid_')  # a torn write last
    warnings = []
    history = folder.read_history(float("inf"), warn=warnings.append)
    assert history[3] == {"step": 4, "lr": 0.5, "damaged": True}
    assert [row["step"] for row in history] == [1, 2, 3, 4]
    assert [w.split(": line ")[1][:1] for w in warnings] == ["4", "5", "6"]
    assert all(w.startswith(f"warning: {folder.metrics}: line ") for w in warnings)
    assert "names no step; that row is dropped" in warnings[0]
    assert "kept step, lr of step 4" in warnings[2]
    assert folder.read_history(2) == [
        {"step": 1, "valid_bleu": 0.5},
        {"step": 2, "valid_bleu": 1.0},
    ]


def test_a_torn_row_is_completed_from_what_the_checkpoint_records(tmp_path):
    folder = RunFolder(tmp_path)
    folder.write_history([{"epoch": 1, "step": 5, "valid_bleu": 1.0}])
    with open(folder.metrics, "a") as log:
        log.write('{"epoch": 2, "step": 10, "train_loss": 1.5, "valid_bl')
    known = {"epoch": 2, "step": 10, "valid_bleu": 3.0, "lr": 0.01}
    warnings = []
    rows = folder.history_until(10, rewrite=True, known=known, warn=warnings.append)
    rebuilt = {"epoch": 2, "step": 10, "train_loss": 1.5, "valid_bleu": 3.0, "lr": 0.01}
    assert rows[1] == {**rebuilt, "damaged": True}
    assert "line 2 is damaged" in warnings[0]
    assert "lr, valid_bleu rebuilt from the checkpoint" in warnings[0]
    assert [json.loads(line) for line in folder.metrics.read_text().splitlines()] == rows


def test_a_last_row_torn_before_its_step_takes_the_checkpoints_step(tmp_path):
    folder = RunFolder(tmp_path)
    folder.write_history([{"epoch": 1, "step": 5}])
    with open(folder.metrics, "a") as log:
        log.write('{"epoch": 2, "st')
    known = {"epoch": 2, "step": 10, "lr": 0.01}
    rows = folder.read_history(10, known=known, warn=lambda _: None)
    assert rows[1] == {"epoch": 2, "step": 10, "lr": 0.01, "damaged": True}
    # the checkpoint's step already has an intact row: the torn line names no step
    folder.write_history([{"epoch": 2, "step": 10}])
    with open(folder.metrics, "a") as log:
        log.write('{"epoch": 2, "st')
    assert folder.read_history(10, known=known, warn=lambda _: None) == [{"epoch": 2, "step": 10}]


def test_history_until_a_checkpoint_rewrites_the_file_only_when_asked(tmp_path):
    folder = RunFolder(tmp_path)
    folder.write_history([{"step": s} for s in (1, 2, 3)])
    before = folder.metrics.read_text()
    assert folder.history_until(2, rewrite=False) == [{"step": 1}, {"step": 2}]
    assert folder.metrics.read_text() == before
    assert folder.history_until(2, rewrite=True) == [{"step": 1}, {"step": 2}]
    lines = folder.metrics.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"step": 1}, {"step": 2}]


@pytest.mark.parametrize("absolute", [False, True])
def test_auto_never_follows_choice_json_out_of_the_run_folder(tmp_path, absolute):
    # a downloaded run's choice.json naming "../elsewhere/best" (or an absolute path) made
    # --checkpoint auto load RUN/../elsewhere/best.json and its weights: a file outside the
    # folder the user gave
    folder = RunFolder(tmp_path / "run")
    with_a_run(folder)
    save_checkpoint(tmp_path / "elsewhere", "best", {"w": torch.ones(2)}, {"progress": {"step": 7}})
    save_checkpoint(folder.path, "best", {"w": torch.zeros(2)}, {"progress": {"step": 3}})
    chosen = str(tmp_path / "elsewhere" / "best") if absolute else "../elsewhere/best"
    choice = {"chosen": chosen, "steps": {chosen: 7}, "scores": {chosen: 1.0}}
    folder.choice.write_text(json.dumps(choice))
    assert folder.resolve_checkpoint("auto") == "best"
    folder.choice.write_text(json.dumps({"chosen": "last", "steps": {"last": 1}}))
    assert folder.resolve_checkpoint("auto") == "last"  # a record of its own is followed


@pytest.mark.parametrize("name", ["choice.json", "averaged.json", "best.json"])
def test_auto_reads_no_device_in_place_of_its_records(tmp_path, name):
    # choice.json or averaged.json linked to /dev/zero was read until memory ran out;
    # best.json too, once auto compared the averaged record with the best of now
    folder = RunFolder(tmp_path / "run")
    with_a_run(folder)
    (folder.path / name).symlink_to(os.devnull)
    read = []
    original = Path.read_bytes
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "read_bytes", lambda self: read.append(self.name) or original(self))
        patch.setattr(Path, "read_text", lambda self, **_: read.append(self.name) or "")
        assert folder.resolve_checkpoint("auto") == "best"
    assert name not in read
