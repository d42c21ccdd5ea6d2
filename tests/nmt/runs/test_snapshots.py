"""Snapshots for checkpoint averaging: kept by step, pruned, dropped after a resumed step."""

import json

import pytest
import torch

from attnkit.nmt.runs.checkpoint import delete_checkpoint, load_checkpoint, save_checkpoint
from attnkit.nmt.runs.run_folder import RunFolder
from attnkit.nmt.runs.snapshots import Snapshots


def _weights(value: float) -> dict[str, torch.Tensor]:
    return {"w": torch.full((2, 3), value), "n": torch.tensor(int(value))}


def _snapshots(tmp_path, steps=(5, 10, 15, 20)) -> Snapshots:
    snapshots = Snapshots(tmp_path / "snapshots")
    for step in steps:
        snapshots.add(step, _weights(step), {"epoch": 1, "valid_bleu": float(step)})
    return snapshots


def test_a_snapshot_holds_the_weights_only_and_its_step(tmp_path):
    snapshots = _snapshots(tmp_path, steps=(7,))
    ckpt = load_checkpoint(snapshots.path(7))
    assert ckpt.optimizer is None and ckpt.extra == {}
    assert torch.equal(ckpt.model["w"], torch.full((2, 3), 7.0))
    assert ckpt.state == {"epoch": 1, "valid_bleu": 7.0, "step": 7}
    assert snapshots.path(7).name == "step-00000007.json"


def test_steps_are_listed_oldest_first_by_number_not_by_name(tmp_path):
    snapshots = _snapshots(tmp_path, steps=(100_000_000, 20, 5))
    (snapshots.folder / "notes.json").write_text("{}")  # not a snapshot
    assert snapshots.steps() == [5, 20, 100_000_000]
    assert Snapshots(tmp_path / "absent").steps() == []


def test_keep_last_deletes_the_oldest_records_and_weights(tmp_path):
    snapshots = _snapshots(tmp_path)
    assert snapshots.keep_last(2) == [5, 10]
    assert snapshots.steps() == [15, 20]
    names = sorted(p.name.split(".")[0] for p in snapshots.folder.iterdir())
    assert names == ["step-00000015"] * 2 + ["step-00000020"] * 2  # record + weights each
    assert snapshots.keep_last(5) == []


def test_drop_after_deletes_the_snapshots_of_later_steps(tmp_path):
    snapshots = _snapshots(tmp_path)
    assert snapshots.drop_after(10) == [15, 20]
    assert snapshots.steps() == [5, 10]
    assert len(list(snapshots.folder.glob("*.safetensors"))) == 2


def test_load_last_gives_the_newest_oldest_first(tmp_path):
    snapshots = _snapshots(tmp_path)
    loaded = snapshots.load_last(3)
    assert [c.state["step"] for c in loaded] == [10, 15, 20]
    assert [c.state["step"] for c in snapshots.load_last()] == [5, 10, 15, 20]


def test_load_last_more_than_kept_says_how_many_there_are(tmp_path):
    snapshots = _snapshots(tmp_path, steps=(5, 10))
    with pytest.raises(ValueError, match=r"last 3 snapshots: .* holds 2 \(steps 5, 10\)"):
        snapshots.load_last(3)


def test_delete_checkpoint_removes_record_and_weights_and_keeps_others(tmp_path):
    save_checkpoint(tmp_path, "averaged", _weights(1), {})
    save_checkpoint(tmp_path, "best", _weights(2), {})
    delete_checkpoint(tmp_path, "averaged")
    assert sorted(p.name.split(".")[0] for p in tmp_path.iterdir()) == ["best", "best"]
    delete_checkpoint(tmp_path, "averaged")  # already gone: no error


def _averaged(folder: RunFolder, steps: list[int]) -> None:
    save_checkpoint(folder.path, "averaged", _weights(1), {"averaged_steps": steps})


def test_resuming_drops_later_snapshots_and_an_averaged_checkpoint_that_used_them(tmp_path):
    folder = RunFolder(tmp_path)
    _snapshots(tmp_path)
    _averaged(folder, [10, 15, 20])
    assert folder.drop_averaging_after(12) == [15, 20]
    assert folder.snapshots.steps() == [5, 10]
    assert not folder.averaged.exists() and not list(tmp_path.glob("averaged.*"))


def test_resuming_at_or_after_the_averaged_steps_keeps_the_averaged_checkpoint(tmp_path):
    folder = RunFolder(tmp_path)
    _snapshots(tmp_path)
    _averaged(folder, [10, 15, 20])
    assert folder.drop_averaging_after(20) == []
    assert json.loads(folder.averaged.read_text())["state"]["averaged_steps"] == [10, 15, 20]


def test_overwrite_clears_the_snapshots_and_the_averaged_checkpoint(tmp_path):
    folder = RunFolder(tmp_path)
    _snapshots(tmp_path)
    _averaged(folder, [5, 10])
    (folder.snapshots.folder / "step-00000099.dead.safetensors").write_bytes(b"x")  # a leftover
    folder.clear()
    assert folder.snapshots.steps() == [] and not folder.averaged.exists()
    assert list(tmp_path.rglob("*.safetensors")) == []


@pytest.mark.parametrize(("best_step", "expected"), [(20, "averaged"), (35, "best")])
def test_auto_compares_averaged_with_the_best_of_now_after_training_on(
    tmp_path, best_step, expected
):
    # averaged at a finished run's end (step 20, above that best); the run then trained on
    # with a raised budget: its best moved to step 35 with 40.0, and was not compared yet
    folder = RunFolder(tmp_path)
    averaged = {"valid_bleu": 31.0, "best_bleu": 30.0, "best_step": 20, "step": 20}
    save_checkpoint(tmp_path, "averaged", _weights(1.0), averaged)
    bleu = 30.0 if best_step == 20 else 40.0
    progress = {"step": best_step, "best_step": best_step, "best_bleu": bleu}
    save_checkpoint(tmp_path, "best", _weights(2.0), {"progress": progress})
    assert folder.resolve_checkpoint("auto") == expected


@pytest.mark.parametrize(
    ("averaged_bleu", "expected"), [(31.0, "averaged"), (30.0, "averaged"), (29.5, "best")]
)
def test_auto_picks_averaged_only_where_it_validated_at_least_as_well_as_best(
    tmp_path, averaged_bleu, expected
):
    folder = RunFolder(tmp_path)
    assert folder.resolve_checkpoint("auto") == "best"  # no averaged checkpoint at all
    state = {"valid_bleu": averaged_bleu, "best_bleu": 30.0, "step": 20}
    save_checkpoint(tmp_path, "averaged", _weights(1.0), state)
    assert folder.resolve_checkpoint("auto") == expected
    for name in ("best", "last", "averaged"):
        assert folder.resolve_checkpoint(name) == name
    folder.averaged.write_text("{not json")
    assert folder.resolve_checkpoint("auto") == "best"


@pytest.mark.parametrize(
    ("whole", "expected"), [((30.5, 30.0), "averaged"), ((29.0, 30.0), "best")]
)
def test_auto_follows_the_whole_valid_set_where_the_record_has_it(tmp_path, whole, expected):
    # training's 300-sentence BLEU says the opposite of the whole set's in both cases
    part = 29.0 if expected == "averaged" else 31.0
    state = {"valid_bleu": part, "best_bleu": 30.0, "step": 20}
    state.update(whole_valid_bleu=whole[0], best_whole_valid_bleu=whole[1])
    save_checkpoint(tmp_path, "averaged", _weights(1.0), state)
    assert RunFolder(tmp_path).resolve_checkpoint("auto") == expected
