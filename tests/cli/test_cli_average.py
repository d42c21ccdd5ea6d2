"""``attnkit average RUN``, ``--checkpoint averaged`` and their errors, on a tiny trained run."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from attnkit.cli import main
from attnkit.nmt.precision import resolve_precision
from attnkit.nmt.runs.averaging import average_weights
from attnkit.nmt.runs.checkpoint import load_checkpoint
from attnkit.nmt.runs.run_folder import RunFolder
from cli_helpers import assert_one_line_error, run

REVERSE = str(Path(__file__).resolve().parents[2] / "configs" / "reverse.yaml")
TINY = [
    "--no-progress",
    "--train.max_steps", "20",
    "--train.valid_every", "5",
    "--train.early_stopping", "null",
    "--train.average_last", "3",
    "--train.lr", "0.01",
    "--data.toy.train_size", "320",
    "--data.toy.valid_size", "16",
    "--data.toy.test_size", "8",
    "--model.hidden_size", "16",
    "--model.embed_dim", "8",
    "--train.threads", "1",
]  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli_average") / "reverse"
    assert main(["train", REVERSE, "--out", str(out), *TINY]) == 0
    return out


@pytest.fixture
def copy_of_run(run_dir, tmp_path):
    """A copy of the trained run a test may change."""
    return Path(shutil.copytree(run_dir, tmp_path / "run"))


def _snapshot_mean(folder: RunFolder, steps):
    return average_weights([load_checkpoint(folder.snapshots.path(s)).model for s in steps])


def test_average_rebuilds_the_mean_of_the_newest_snapshots(copy_of_run, capsys):
    folder = RunFolder(copy_of_run)
    status, out, err = run(capsys, "average", str(copy_of_run), "--last", "2")
    assert status == 0, err
    assert out.startswith("averaged 2 snapshots (steps 15, 20): valid BLEU ")
    assert ("attnkit: precision bf16" in err) == (
        resolve_precision("auto", torch.device("cpu")).name == "bf16"
    )
    line, choice = out.splitlines()
    assert "vs best " in line
    record = json.loads(folder.choice.read_text())  # the choice made again, averaged included
    assert record["steps"]["averaged"] == 20 and choice.startswith("checkpoint auto: ")
    assert choice.startswith(f"checkpoint auto: {record['chosen']} (")
    averaged = load_checkpoint(folder.averaged)
    assert averaged.state["averaged_steps"] == [15, 20]
    expected = _snapshot_mean(folder, (15, 20))
    assert all(torch.equal(averaged.model[k], expected[k]) for k in expected)
    assert f"valid BLEU {averaged.state['valid_bleu']:.2f}" in out


def test_an_average_interrupted_before_its_choice_leaves_no_stale_choice(
    copy_of_run, capsys, monkeypatch
):
    # Ctrl-C while the checkpoints are scored again on the whole validation set: before,
    # choice.json still named the choice among the old checkpoints, and as the new averaged
    # checkpoint ends at the same step (20), --checkpoint auto followed it unchecked
    import attnkit.nmt.training.averaged as averaged_module

    folder = RunFolder(copy_of_run)
    state = load_checkpoint(snapshot_average(copy_of_run)).state  # what --last 2 writes
    by_scores = "averaged" if state["valid_bleu"] >= state["best_bleu"] else "best"
    stale = "best" if by_scores == "averaged" else "averaged"  # the old choice said otherwise
    record = {"chosen": stale, "steps": {"averaged": 20, "best": 20}, "scores": {}}
    folder.choice.write_text(json.dumps(record))
    assert folder.resolve_checkpoint("auto") == stale  # such a record is followed

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(averaged_module, "choose_checkpoint", interrupted)
    status, _, err = run(capsys, "average", str(copy_of_run), "--last", "2")
    assert status == 130 and "interrupted" in err
    assert load_checkpoint(folder.averaged).state == state
    # auto goes by the new average's own scores against best's, as for a run without a choice
    assert folder.resolve_checkpoint("auto") == by_scores


def snapshot_average(run_dir: Path) -> Path:
    """The averaged record ``average --last 2`` writes, made in a copy of ``run_dir``."""
    other = Path(shutil.copytree(run_dir, run_dir.with_name("other")))
    assert main(["average", str(other), "--last", "2"]) == 0
    return RunFolder(other).averaged


def test_average_defaults_to_every_kept_snapshot(copy_of_run, capsys):
    folder = RunFolder(copy_of_run)
    folder.averaged.unlink()
    status, out, err = run(capsys, "average", str(copy_of_run))
    assert status == 0, err
    assert out.startswith("averaged 3 snapshots (steps 10, 15, 20)")
    averaged = load_checkpoint(folder.averaged).model
    expected = _snapshot_mean(folder, (10, 15, 20))
    assert all(torch.equal(averaged[k], expected[k]) for k in expected)


def test_average_of_a_missing_run_folder_is_one_clear_error(tmp_path, capsys):
    status, _, err = run(capsys, "average", str(tmp_path / "nowhere"))
    assert status == 2
    assert_one_line_error(err, "average", "run folder")
    assert "not found" in err


def test_average_without_snapshots_says_how_to_keep_them(copy_of_run, capsys):
    shutil.rmtree(RunFolder(copy_of_run).snapshots.folder)
    status, _, err = run(capsys, "average", str(copy_of_run))
    assert status == 2
    assert_one_line_error(err, "average", "keeps 0 snapshot(s)")
    assert "train with --train.average_last N" in err


def test_average_of_more_snapshots_than_kept_is_refused(run_dir, capsys):
    status, _, err = run(capsys, "average", str(run_dir), "--last", "5")
    assert status == 2
    assert_one_line_error(err, "average", "--last 5 is more than the 3 snapshots")
    assert "(steps 10, 15, 20)" in err


def test_average_of_one_snapshot_is_refused(run_dir, capsys):
    status, _, err = run(capsys, "average", str(run_dir), "--last", "1")
    assert status == 2
    assert_one_line_error(err, "average", "--last must be >= 2")


def test_translate_with_the_averaged_checkpoint_uses_its_weights(run_dir, capsys):
    status, out, err = run(
        capsys, "translate", str(run_dir), "s1 s2 s3", "--checkpoint", "averaged"
    )
    assert status == 0, err
    assert len(out.splitlines()) == 1
    from attnkit.nmt.runs.loaded_run import load_run

    loaded = load_run(run_dir, checkpoint="averaged").model.state_dict()
    saved = load_checkpoint(RunFolder(run_dir).averaged).model
    assert all(torch.equal(loaded[k], saved[k]) for k in saved)


def test_translate_without_an_averaged_checkpoint_says_how_to_make_it(copy_of_run, capsys):
    RunFolder(copy_of_run).averaged.unlink()
    status, _, err = run(capsys, "translate", str(copy_of_run), "s1", "--checkpoint", "averaged")
    assert status == 2
    assert_one_line_error(err, "translate", "averaged.json")
    assert f"'attnkit average {copy_of_run}'" in err


def test_without_snapshots_the_missing_averaged_checkpoint_names_the_training_option(
    copy_of_run, capsys
):
    folder = RunFolder(copy_of_run)
    folder.averaged.unlink()
    shutil.rmtree(folder.snapshots.folder)
    status, _, err = run(capsys, "translate", str(copy_of_run), "s1", "--checkpoint", "averaged")
    assert status == 2
    assert "keeps 0" in err and "--train.average_last N" in err


@pytest.mark.parametrize(
    "command", ["translate", "evaluate", "align", "inspect", "export", "serve"]
)
def test_every_checkpoint_option_accepts_averaged(command, capsys):
    from attnkit.cli import build_parser

    parser = build_parser()
    args = parser.parse_args([command, "RUN", "--checkpoint", "averaged"])
    assert args.checkpoint == "averaged"
