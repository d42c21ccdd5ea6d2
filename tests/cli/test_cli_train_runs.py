"""``attnkit train`` run-folder behaviour: resume budgets, failed starts, threads.

Tiny word-level runs on user files (a few steps, one thread) through the CLI.
"""

import pytest
import torch

from attnkit.nmt.config import RunConfig
from cli_helpers import assert_one_line_error, run

PAIRS = [(f"a{i} b{i % 3}", f"b{i % 3} a{i}") for i in range(24)]


def write_config(folder, src_lines=PAIRS, threads=1, max_steps=2):
    """A word-level config on files in ``folder`` (every pair in train and valid)."""
    (folder / "train.src").write_text("".join(f"{s}\n" for s, _ in src_lines))
    (folder / "train.tgt").write_text("".join(f"{t}\n" for _, t in PAIRS))
    config = folder / "tiny.yaml"
    config.write_text(
        "data: {train: {src: train.src, tgt: train.tgt}, valid: {src: train.src, tgt: train.tgt}}\n"
        "tokenizer: {kind: word}\n"
        "model: {embed_dim: 8, hidden_size: 8, dropout: 0.0}\n"
        f"train: {{batch_size: 8, max_steps: {max_steps}, threads: {threads}, epochs: 5}}\n"
        "decode: {beam_size: 1, max_len_a: 1.0, max_len_b: 2}\n"
    )
    return str(config)


@pytest.fixture
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_resume_names_the_keys_that_differ(tmp_path, capsys):
    config, out = write_config(tmp_path), str(tmp_path / "run")
    assert run(capsys, "train", config, "--out", out, "--no-progress")[0] == 0
    status, stdout, err = run(capsys, "train", "--resume", out, "--model.hidden_size", "16")
    assert status == 2 and stdout == ""
    assert_one_line_error(err, "train", "(model.hidden_size: 8 in the run, 16 given)")
    assert "pass --overwrite" in err


def test_resume_with_a_raised_budget_trains_on(tmp_path, capsys):
    config, out = write_config(tmp_path), str(tmp_path / "run")
    assert run(capsys, "train", config, "--out", out, "--no-progress")[0] == 0
    status, stdout, err = run(
        capsys, "train", "--resume", out, "--train.max_steps", "4", "--train.max_minutes", "2"
    )
    assert status == 0 and f"run folder: {out}" in stdout
    assert "resuming with train.max_minutes: null in the run, 2.0 given; " in err
    assert "train.max_steps: 2 in the run, 4 given" in err
    assert "the new budget lets it go on" in err and "step 4" in err
    status, _, err = run(capsys, "train", "--resume", out, "--no-progress")
    assert status == 0 and "reusing it" in err


def test_reusing_a_finished_run_keeps_its_config(tmp_path, capsys):
    """A change --resume allows is saved only when training goes on."""
    config, out = write_config(tmp_path), str(tmp_path / "run")
    assert run(capsys, "train", config, "--out", out, "--no-progress")[0] == 0
    saved = (tmp_path / "run" / "config.yaml").read_text()
    status, _, err = run(capsys, "train", "--resume", out, "--train.max_minutes", "3")
    assert status == 0 and "resuming with train.max_minutes" in err and "reusing it" in err
    assert (tmp_path / "run" / "config.yaml").read_text() == saved
    status, _, err = run(capsys, "train", "--resume", out, "--train.max_steps", "3")
    assert status == 0 and "the new budget lets it go on" in err
    assert "max_steps: 3" in (tmp_path / "run" / "config.yaml").read_text()


def test_a_failed_start_does_not_block_the_retry(tmp_path, capsys):
    config, out = write_config(tmp_path, src_lines=PAIRS[:-1]), str(tmp_path / "run")
    status, stdout, err = run(capsys, "train", config, "--out", out, "--no-progress")
    assert status == 2 and stdout == "" and err.startswith("training tiny on cpu")
    error = err.splitlines(keepends=True)[-1]  # after the "training ..." progress line
    assert_one_line_error(error, "train", "line counts differ: ")
    assert "train.src has 23 lines" in error
    config = write_config(tmp_path)  # the corpus fixed, the same command again
    status, stdout, err = run(capsys, "train", config, "--out", out, "--no-progress")
    assert status == 0 and "--resume" not in err and f"run folder: {out}" in stdout


def test_default_threads_respect_omp_num_threads(tmp_path, capsys, monkeypatch, keep_threads):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    config = write_config(tmp_path, threads=0, max_steps=1)
    status, _, err = run(capsys, "train", config, "--out", str(tmp_path / "run"), "--no-progress")
    assert status == 0 and " with 1 thread(s) into " in err


def test_resume_may_change_the_threads_and_device(tmp_path, capsys, keep_threads):
    """They belong to the machine, not the run: a run goes on elsewhere, recorded in its config."""
    config, out = write_config(tmp_path, threads="auto"), str(tmp_path / "run")
    assert run(capsys, "train", config, "--out", out, "--no-progress")[0] == 0
    status, stdout, err = run(
        capsys, "train", "--resume", out, "--no-progress", "--train.max_steps", "3",
        "--train.threads", "1", "--train.device", "cpu",
    )  # fmt: skip
    assert status == 0 and f"run folder: {out}" in stdout
    assert 'train.threads: "auto" in the run, 1 given' in err
    assert 'train.device: "auto" in the run, "cpu" given' in err
    assert " with 1 thread(s) into " in err and "step 3" in err
    saved = RunConfig.load(tmp_path / "run" / "config.yaml").train
    assert (saved.threads, saved.device, saved.max_steps) == (1, "cpu", 3)


def test_a_rank_of_a_torchrun_job_names_itself_in_its_error(tmp_path, capsys, monkeypatch):
    """Every rank of a torchrun job reports its own error on the same stderr: the line
    says which rank it is, so interleaved lines can be told apart."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    status, _, err = run(capsys, "train", str(tmp_path / "missing.yaml"))
    assert status == 2
    assert_one_line_error(err, "train", "missing.yaml")
    assert err.startswith("attnkit train: error: rank 1 of 2: "), err


def test_one_process_says_no_rank(tmp_path, capsys):
    status, _, err = run(capsys, "train", str(tmp_path / "missing.yaml"))
    assert status == 2
    assert_one_line_error(err, "train", "missing.yaml")
    assert "error: rank" not in err, err


def _tsv_config(folder, train_columns: str) -> str:
    (folder / "pairs.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS))
    config = folder / "tsv.yaml"
    config.write_text(
        f"data: {{train: {{tsv: pairs.tsv{train_columns}}}, valid: {{tsv: pairs.tsv}}}}\n"
        "tokenizer: {kind: word}\n"
        "model: {embed_dim: 8, hidden_size: 8}\n"
    )
    return str(config)


def test_tsv_splits_that_read_other_columns_get_one_warning(tmp_path, capsys):
    """Flipping only data.train's columns trained fr->en and validated en->fr, silently."""
    flipped = _tsv_config(tmp_path, ", src_column: 1, tgt_column: 0")
    status, _, err = run(capsys, "prepare", flipped, "--out", str(tmp_path / "a"), "--no-progress")
    assert status == 0
    said = [line for line in err.splitlines() if "different columns" in line]
    assert said == [
        "attnkit: warning: the TSV splits read source/target from different columns "
        "(data.train 1/0, data.valid 0/1): unless their files differ in layout, set the "
        "same src_column and tgt_column in each, or validation scores the other direction"
    ]
    same = _tsv_config(tmp_path, "")
    status, _, err = run(capsys, "prepare", same, "--out", str(tmp_path / "b"), "--no-progress")
    assert status == 0 and "different columns" not in err
