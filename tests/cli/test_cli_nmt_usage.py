"""Usage mistakes on the translator commands: each is one line on stderr, exit 2.

Bad devices for every command that takes one, a misspelt config key (in
``--set`` or as an option), ``translate`` without arguments, and a run folder
without the checkpoint asked for.
"""

import shutil
from pathlib import Path

import pytest

from attnkit.nmt.data.tokenizer import WordTokenizer
from attnkit.nmt.runs.checkpoint import load_checkpoint, save_checkpoint
from cli_helpers import assert_one_line_error, run
from conftest_nmt import make_run

REVERSE = str(Path(__file__).resolve().parents[2] / "configs" / "reverse.yaml")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tok = WordTokenizer.train(["s1 s2 s3", "s4 s5"])
    return make_run(tmp_path_factory.mktemp("usage"), tok)


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("foo", "--device must be one of auto, cpu, cuda, cuda:N or mps, got 'foo'"),
        ("meta", "--device must be one of auto, cpu, cuda, cuda:N or mps, got 'meta'"),
        ("cuda:99", "--device is 'cuda:99' but"),
    ],
)
@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_bad_device_is_one_line(run_dir, capsys, command, device, message):
    argv = [command, str(run_dir), *(["s1"] if command == "translate" else []), "--device", device]
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert_one_line_error(err, command, message)


def test_train_device_without_cuda_is_one_line_and_writes_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    out_dir = tmp_path / "run"
    status, out, err = run(
        capsys, "train", REVERSE, "--out", str(out_dir), "--train.device", "cuda"
    )
    assert status == 2 and out == ""
    assert_one_line_error(err, "train", "train.device is 'cuda' but no CUDA device is available")
    assert not out_dir.exists()


def test_misspelt_set_key_blames_the_override(capsys):
    status, out, err = run(capsys, "train", REVERSE, "--set", "model.hiden_size=128")
    assert status == 2 and out == "" and "Traceback" not in err
    first, problem = err.splitlines()
    assert first == "attnkit train: error: invalid override model.hiden_size=128:"
    assert problem.startswith("  model.hiden_size: unknown key (allowed here: arch,")
    assert "reverse.yaml" not in err


def test_misspelt_option_key_shows_train_usage_and_a_suggestion(capsys):
    with pytest.raises(SystemExit) as exit_:
        run(capsys, "train", REVERSE, "--model.hiden_size", "128")
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    usage, message = err.splitlines()
    assert usage.startswith("usage: attnkit train ")
    assert message == (
        "attnkit train: error: unrecognized arguments: --model.hiden_size 128 "
        "(did you mean --model.hidden_size?)"
    )


def test_translate_without_arguments_asks_only_for_the_run_folder(capsys):
    with pytest.raises(SystemExit) as exit_:
        run(capsys, "translate")
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert err.splitlines()[-1] == (
        "attnkit translate: error: the following arguments are required: run_dir"
    )


def test_missing_best_checkpoint_points_to_last(run_dir, capsys, tmp_path):
    folder = tmp_path / "stopped"
    shutil.copytree(run_dir, folder)
    save_checkpoint(folder, "last", load_checkpoint(folder / "best.json").model, {})
    (folder / "best.json").unlink()
    status, out, err = run(capsys, "translate", str(folder), "s1")
    assert status == 2 and out == ""
    assert_one_line_error(err, "translate", f"checkpoint not found: {folder / 'best.json'}")
    assert "last.json exists: use checkpoint 'last' (--checkpoint last)" in err
    status, out, err = run(capsys, "translate", str(folder), "s1", "--checkpoint", "last")
    assert status == 0 and len(out.splitlines()) == 1 and err == ""


def test_no_checkpoint_at_all_says_so(run_dir, capsys, tmp_path):
    folder = tmp_path / "empty"
    shutil.copytree(run_dir, folder)
    (folder / "best.json").unlink()
    status, out, err = run(capsys, "translate", str(folder), "s1", "--checkpoint", "last")
    assert status == 2 and out == ""
    assert_one_line_error(err, "translate", "there is no best.json either")
    assert f"attnkit train --resume {folder}" in err


def test_the_suggested_commands_quote_a_folder_with_a_space(run_dir, capsys, tmp_path):
    """A run folder 'my runs/empty': the resume and average commands the errors give paste
    into a shell as they are (unquoted, the folder split into two arguments)."""
    folder = tmp_path / "my runs" / "empty"
    shutil.copytree(run_dir, folder)
    (folder / "best.json").unlink()
    _, _, err = run(capsys, "translate", str(folder), "s1", "--checkpoint", "last")
    assert f"or resume training: attnkit train --resume '{folder}'" in err
    _, _, err = run(capsys, "translate", str(folder), "s1", "--checkpoint", "averaged")
    assert f"or run 'attnkit average '{folder}'' once snapshots are kept" in err
    _, _, err = run(capsys, "translate", str(tmp_path / "my runs" / "none"), "x")
    assert f"'attnkit train CONFIG.yaml --out '{tmp_path}/my runs/none'' makes one" in err


@pytest.mark.parametrize("command", ["translate", "evaluate", "inspect", "align"])
def test_threads_below_one_is_one_line(run_dir, capsys, command, tmp_path):
    (tmp_path / "pairs.txt").write_text("s1 s2 ||| s2 s1\n")
    given = {"translate": ["s1"], "align": ["--bitext", str(tmp_path / "pairs.txt")]}
    argv = [command, str(run_dir), *given.get(command, []), "--threads", "0"]
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert_one_line_error(err, command, "--threads must be >= 1, got 0")


@pytest.mark.parametrize("command", ["translate", "inspect"])
def test_threads_sets_the_threads_of_the_model_s_work(run_dir, capsys, command):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    words = ["s1 s2"] if command == "translate" else ["--split", "valid"]
    try:
        status, out, _ = run(capsys, command, str(run_dir), *words, "--threads", "1")
        assert status == 0 and out
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("command", ["translate", "evaluate", "inspect"])
def test_batch_size_below_one_is_one_line(run_dir, capsys, command):
    argv = [command, str(run_dir), *(["s1"] if command == "translate" else [])]
    status, out, err = run(capsys, *argv, "--batch-size", "0")
    assert status == 2 and out == ""
    assert_one_line_error(err, command, "--batch-size must be >= 1, got 0")


def test_batch_size_sets_the_sentences_searched_together(run_dir, capsys, monkeypatch):
    import attnkit.nmt.decoding.search as search

    sizes = []
    beam_search_n_best = search.beam_search_n_best

    def recorded(model, src, *args):
        sizes.append(src.shape[0])
        return beam_search_n_best(model, src, *args)

    monkeypatch.setattr(search, "beam_search_n_best", recorded)
    lines = ["s1 s2", "s3", "s4 s5 s1", "s2 s2"]
    outputs = {}
    for batch_size in ("1", "3"):
        sizes.clear()
        status, out, _ = run(
            capsys, "translate", str(run_dir), *lines, "--beam", "2", "--batch-size", batch_size
        )
        assert status == 0
        outputs[batch_size] = (out, list(sizes))
    assert outputs["1"][1] == [1, 1, 1, 1] and outputs["3"][1] == [3, 1]
    assert outputs["1"][0] == outputs["3"][0]
