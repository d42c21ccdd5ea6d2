"""Fine-tuning (train.init_from): a new run starts from a trained run's weights and nothing else.

A tiny reverse-task RNN (test_train's TINY) trained 30 steps is the parent;
its children train on the same data for a step or a few.
"""

import json
import os
import re
import shutil

import pytest
import torch
import yaml
from test_train import TINY, TRANSFORMER, config, quiet

from attnkit.nmt.config import RunConfig
from attnkit.nmt.data.tokenizer import WordTokenizer, save_tokenizers
from attnkit.nmt.runs.checkpoint import load_checkpoint
from attnkit.nmt.training.loop import train
from cli_helpers import run

PARENT_STEPS = 30


def rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def weights(path):
    return load_checkpoint(path).model


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("parent") / "run"
    train(config(f"train.max_steps={PARENT_STEPS}"), run_dir, progress_bar=False, echo=quiet)
    return run_dir


def child_config(parent, *overrides):
    return config(f"train.init_from={parent}", *overrides)


@pytest.fixture(scope="module")
def child(parent, tmp_path_factory):
    """One step at a rate too small to move a weight, validated at once; other tokenizer
    settings and dropout than the parent's."""
    run_dir = tmp_path_factory.mktemp("child") / "run"
    cfg = child_config(
        parent,
        "train.init_checkpoint=last",
        "train.lr=1e-12",
        "train.max_steps=1",
        "train.valid_every=1",
        "tokenizer.vocab_size=40",
        "model.dropout=0.3",
    )
    heard = []
    train(cfg, run_dir, progress_bar=False, echo=heard.append)
    return run_dir, heard


def test_the_child_starts_at_the_parents_validation_loss(parent, child, tmp_path):
    run_dir, heard = child
    parent_loss = rows(parent)[-1]["valid_loss"]
    child_loss = rows(run_dir)[0]["valid_loss"]
    assert abs(child_loss - parent_loss) < 1e-6
    fresh = config("train.lr=1e-12", "train.max_steps=1", "train.valid_every=1")
    train(fresh, tmp_path / "fresh", progress_bar=False, echo=quiet)
    assert rows(tmp_path / "fresh")[0]["valid_loss"] > parent_loss + 1.0
    assert f"initialised from {parent} (checkpoint last, step {PARENT_STEPS})" in heard


def test_the_parents_checkpoint_is_recorded_with_its_checksum(parent, child):
    run_dir, _ = child
    record = json.loads((run_dir / "init_from.json").read_text())
    saved = json.loads((parent / "last.json").read_text())
    assert record == {
        "run": str(parent),
        "checkpoint": "last",
        "record": str(parent / "last.json"),
        "sha256": saved["sha256"],
        "step": PARENT_STEPS,
    }
    assert RunConfig.load(run_dir / "config.yaml").train.init_from == str(parent)


def test_the_child_copies_the_parents_tokenizers_and_records_their_section(parent, child):
    run_dir, heard = child
    for name in ("tokenizer.json", "vocab.json"):
        assert (run_dir / name).read_bytes() == (parent / name).read_bytes()
    assert RunConfig.load(run_dir / "config.yaml").tokenizer.vocab_size == 50
    notes = [line for line in heard if line.startswith("note: train.init_from")]
    assert len(notes) == 1 and "tokenizer.vocab_size 40 given, 50 there" in notes[0]
    assert RunConfig.load(run_dir / "config.yaml").model.dropout == 0.3  # allowed to differ


def test_optimizer_schedule_and_counters_start_again(parent, tmp_path):
    cfg = child_config(
        parent,
        "train.lr_schedule=inverse_sqrt",
        "train.warmup_steps=10",
        "train.max_steps=2",
        "train.valid_every=1",
        "train.precision=bf16",
    )
    train(cfg, tmp_path, progress_bar=False, echo=quiet)
    assert [row["lr"] for row in rows(tmp_path)] == pytest.approx([0.002, 0.003])  # warm-up
    last = load_checkpoint(tmp_path / "last.json")
    assert {float(s["step"]) for s in last.optimizer["state"].values()} == {2.0}  # Adam's t
    progress = last.state["progress"]
    assert (progress["step"], progress["epoch"], progress["best_step"]) == (2, 1, 2)
    assert {t.dtype for t in last.model.values()} == {torch.float32}  # bf16 keeps fp32 weights


def test_a_model_section_that_differs_is_one_error_before_any_data_is_read(parent, tmp_path):
    cfg = child_config(parent, "model.hidden_size=32", "model.embed_dim=8")
    with pytest.raises(ValueError) as caught:
        train(cfg, tmp_path / "run", progress_bar=False, echo=quiet)
    message = str(caught.value)
    assert message.startswith("train.init_from: the model section must be that of") and (
        "\n" not in message
    )
    assert f"model.embed_dim: 16 in {parent}, 8 given" in message
    assert f"model.hidden_size: 24 in {parent}, 32 given" in message
    assert (
        not (tmp_path / "run" / "store").exists() and not (tmp_path / "run" / "vocab.json").exists()
    )


def test_a_transformer_cannot_start_from_an_rnn(parent, tmp_path):
    with pytest.raises(ValueError, match='model.arch: "rnn" in .*, "transformer" given$'):
        train(child_config(parent, TRANSFORMER), tmp_path, progress_bar=False, echo=quiet)


def damaged_copy(parent, folder):
    shutil.copytree(parent, folder)
    path = next(folder.glob("best.*.safetensors"))
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    return folder


def other_vocabulary(parent, folder):
    shutil.copytree(parent, folder)
    (folder / "vocab.json").unlink()
    tok = WordTokenizer.train([" ".join(f"w{i}" for i in range(30))])
    save_tokenizers(folder, tok, tok)
    return folder


@pytest.mark.parametrize(
    ("make", "checkpoint", "error", "words"),
    [
        (lambda p, f: f, "auto", FileNotFoundError, "does not exist"),
        (lambda p, f: f.mkdir() or f, "auto", FileNotFoundError, "is not a run folder"),
        (lambda p, f: p, "averaged", FileNotFoundError, "averaged.json; it has best, last"),
        (damaged_copy, "best", ValueError, "checksum mismatch"),
        (other_vocabulary, "auto", ValueError, "do not fit the model and the vocabularies"),
    ],
    ids=["missing", "not-a-run", "no-checkpoint", "damaged", "vocabulary"],
)
def test_a_bad_parent_is_one_line_naming_the_setting(
    parent, tmp_path, make, checkpoint, error, words
):
    where = make(parent, tmp_path / "parent")
    cfg = child_config(where, f"train.init_checkpoint={checkpoint}")
    with pytest.raises(error) as caught:
        train(cfg, tmp_path / "run", progress_bar=False, echo=quiet)
    message = str(caught.value)
    assert message.startswith("train.init_from: ") and "\n" not in message, message
    assert words in message


def test_a_resumed_child_equals_an_uninterrupted_one_without_its_parent(parent, tmp_path):
    steps = ("train.max_steps=20", "train.valid_every=5")
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    train(child_config(parent, *steps), straight, progress_bar=False, echo=quiet)

    def crash_after_step_10(line):
        if line.startswith("epoch 1 step 10:"):
            raise KeyboardInterrupt

    moved = tmp_path / "parent"
    shutil.copytree(parent, moved)
    with pytest.raises(KeyboardInterrupt):
        train(child_config(moved, *steps), stopped, progress_bar=False, echo=crash_after_step_10)
    shutil.rmtree(moved)  # resuming reads the child's own checkpoint, never the parent
    heard = []
    again = child_config(moved, *steps, "tokenizer.vocab_size=8000")  # the saved section is kept
    summary = train(again, stopped, resume=True, progress_bar=False, echo=heard.append)
    assert summary.progress.step == 20 and "resumed at epoch 1, step 10" in heard
    assert not any(line.startswith("initialised from") for line in heard)
    a, b = weights(stopped / "last.json"), weights(straight / "last.json")
    assert all(torch.equal(a[k], b[k]) for k in b)
    keys = ("step", "train_loss", "valid_loss", "valid_bleu", "lr")
    assert [[r[k] for k in keys] for r in rows(stopped)] == [
        [r[k] for k in keys] for r in rows(straight)
    ]


def test_a_run_cannot_start_from_its_own_folder(parent, tmp_path):
    shutil.copytree(parent, tmp_path / "run")
    cfg = child_config(tmp_path / "run")
    with pytest.raises(ValueError, match="train.init_from: .* is this run's own folder"):
        train(cfg, tmp_path / "run", overwrite=True, progress_bar=False, echo=quiet)
    assert (tmp_path / "run" / "best.json").is_file()  # nothing deleted


def test_changing_init_from_on_resume_is_refused(parent, child, tmp_path):
    run_dir, _ = child
    shutil.copytree(run_dir, tmp_path / "run")
    other = RunConfig.load(run_dir / "config.yaml", [f"train.init_from={tmp_path}"])
    changed = f'(train.init_from: "{parent}" in the run, "{tmp_path}" given)'
    with pytest.raises(ValueError, match=re.escape(changed)):
        train(other, tmp_path / "run", resume=True, progress_bar=False, echo=quiet)


def test_the_cli_takes_init_from_relative_to_the_current_folder(
    parent, tmp_path, capsys, monkeypatch
):
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    monkeypatch.chdir(tmp_path)
    relative = os.path.relpath(parent, tmp_path)
    status, out, err = run(
        capsys, "train", "tiny.yaml", "--out", "child", "--no-progress",
        "--train.init_from", relative, "--train.max_steps", "1",
    )  # fmt: skip
    assert status == 0, err
    assert f"initialised from {parent.resolve()} (checkpoint best, step {PARENT_STEPS})" in err
    saved = RunConfig.load(tmp_path / "child" / "config.yaml")
    assert saved.train.init_from == str(parent.resolve())


def test_a_config_file_names_init_from_relative_to_its_folder(tmp_path):
    (tmp_path / "configs").mkdir()
    raw = {**TINY, "train": {**TINY["train"], "init_from": "../runs/big"}}
    (tmp_path / "configs" / "tune.yaml").write_text(yaml.safe_dump(raw))
    loaded = RunConfig.load(tmp_path / "configs" / "tune.yaml")
    assert loaded.train.init_from == str((tmp_path / "runs" / "big").resolve())
    assert loaded.train.init_checkpoint == "auto"
