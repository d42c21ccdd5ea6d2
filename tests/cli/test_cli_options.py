"""One option name across commands, and a did-you-mean on every subcommand."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from attnkit.cli import build_parser
from attnkit.cli.errors import UsageError
from attnkit.cli.run_dir import warn_threads_over_cores
from cli_helpers import assert_one_line_error, run

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("argv", "suggestion"),
    [
        (["evaluate", "runs/x", "--refs", "r.en"], "--ref"),
        (["inspect", "runs/x", "--target", "r.en"], "--tgt"),
        (["align", "runs/x", "--target", "t.fr"], "--tgt"),
        (["translate", "runs/x", "--beam-size", "3"], "--beam"),
        (["explain", "--querry", "1,0"], "--query"),  # before argparse asks for --query
        (["saturation", "--dimz", "4"], "--dims"),
        (["plot", "weights", "w.json", "--idx", "2"], "--index"),
        (["serve", "runs/x", "--prot", "8000"], "--port"),
        (["train", "configs/reverse.yaml", "--train.treads", "1"], "--train.threads"),
        # a config key without its section: --lr was "did you mean --help?", --seed "--set?"
        (["train", "configs/reverse.yaml", "--lr", "0.1"], "--train.lr"),
        (["train", "configs/reverse.yaml", "--seed", "3"], "--data.toy.seed or --train.seed"),
        (["prepare", "configs/reverse.yaml", "--max-train-pairs", "9"], "--data.max_train_pairs"),
    ],
)
def test_every_subcommand_suggests_the_option_it_has(capsys, argv, suggestion):
    with pytest.raises(SystemExit) as exit_:
        run(capsys, *argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert err.splitlines()[-1].endswith(f"(did you mean {suggestion}?)"), err


def test_an_option_with_no_close_match_points_to_help(capsys):
    with pytest.raises(SystemExit):
        run(capsys, "translate", "runs/x", "--zzz")
    assert "(see 'attnkit translate --help' for its options)" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["evaluate", "inspect", "align"])
@pytest.mark.parametrize("option", ["--tgt", "--ref"])
def test_tgt_and_ref_are_one_option_everywhere(command, option):
    args = build_parser().parse_args([command, "runs/x", "--src", "a.de", option, "b.en"])
    assert args.tgt == "b.en"


@pytest.mark.parametrize("command", ["translate", "evaluate", "inspect"])
def test_a_missing_run_named_like_a_preset_says_which_train_makes_it(capsys, monkeypatch, command):
    monkeypatch.chdir(REPO)
    status, out, err = run(
        capsys, command, "runs/multi30k", *(["x"] if command == "translate" else [])
    )
    assert status == 2 and out == ""
    assert_one_line_error(
        err, command, "run folder runs/multi30k not found; 'attnkit train configs/multi30k.yaml'"
    )


def test_a_missing_run_elsewhere_names_its_out_folder(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    folder = tmp_path / "reverse"
    status, _, err = run(capsys, "evaluate", str(folder))
    assert status == 2
    assert f"'attnkit train configs/reverse.yaml --out {folder}' makes it" in err


def test_a_missing_run_with_no_preset_says_how_to_make_one(capsys, tmp_path):
    status, _, err = run(capsys, "translate", str(tmp_path / "mine"), "x")
    assert status == 2
    assert f"'attnkit train CONFIG.yaml --out {tmp_path / 'mine'}' makes one" in err


def test_switching_a_presets_architecture_notes_the_dropped_keys(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    argv = ["prepare", "configs/reverse.yaml", "--model.arch", "transformer", "--no-progress"]
    status, _, err = run(capsys, *argv, "--out", str(tmp_path / "rev"))
    assert status == 0, err
    note = next(line for line in err.splitlines() if "note:" in line)
    assert note == (
        "attnkit prepare: note: model.arch transformer: dropped the rnn keys model.embed_dim, "
        "model.hidden_size, model.score, model.query_timing (transformer has no such keys); "
        "a preset tuned for it: configs/reverse_transformer.yaml"
    )


@pytest.mark.parametrize(
    ("overrides", "lr"),
    [
        (["--train.lr", "2e-3", "--set", "train.lr=1e-3"], 1e-3),
        (["--set", "train.lr=1e-3", "--train.lr", "2e-3"], 2e-3),
        (["--train.lr", "2e-3", "--set", "train={lr: 4e-3, epochs: 2}"], 4e-3),
    ],
)
def test_overrides_apply_in_command_line_order(tmp_path, overrides, lr):
    # the --SECTION.KEY options were applied after every --set, wherever they were typed:
    # a later --set train.lr=1e-3 was silently dropped
    from attnkit.cli.train import _config_and_folder

    argv = ["train", str(REPO / "configs/reverse.yaml"), "--out", str(tmp_path / "run")]
    config, _ = _config_and_folder(build_parser().parse_args([*argv, *overrides]))
    assert config.train.lr == lr


def test_more_threads_than_cores_warns_once(capsys, monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    warn_threads_over_cores(3, "train.threads")
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "warning: train.threads 3 is more than the 2 CPU core(s)" in err
    for fine in (2, 0, "auto"):
        warn_threads_over_cores(fine, "train.threads")
    assert capsys.readouterr().err == ""


def test_threads_per_process_of_a_torchrun_job_are_checked_against_the_shared_cores(
    capsys, monkeypatch
):
    # 2 processes x train.threads 2 on 2 cores: 4 threads fought over 2 cores, unsaid
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    warn_threads_over_cores(2, "train.threads", processes=2)
    assert capsys.readouterr().err == (
        "attnkit: warning: train.threads 2 is per process: the 2 processes on this machine "
        "ask for 4 threads, more than the 2 CPU core(s) they share; threads beyond the cores "
        "wait for each other and slow the work down (use 1, or 'auto')\n"
    )
    for threads, processes in ((1, 2), (1, 3), ("auto", 2), (2, 1)):
        warn_threads_over_cores(threads, "train.threads", processes=processes)
    assert capsys.readouterr().err == ""


def stop_before_training(monkeypatch) -> None:
    """``attnkit train`` ends with ``error: stopped before training`` (status 2) once its
    config notes and warnings are out: no data is read, no model built."""

    def before_training(*args, **kwargs):
        raise ValueError("stopped before training")

    monkeypatch.setattr("attnkit.nmt.training.loop.train", before_training)


@pytest.mark.parametrize("rank", ["0", "1"])
def test_under_torchrun_only_rank_0_prints_the_warnings_before_training(
    capsys, monkeypatch, tmp_path, rank
):
    # every rank printed each config note and warning: one copy per process
    stop_before_training(monkeypatch)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    for name, value in (("WORLD_SIZE", "2"), ("RANK", rank), ("LOCAL_WORLD_SIZE", "2")):
        monkeypatch.setenv(name, value)
    argv = ["copy", "--train.threads", "2", "--train.min_lr", "0.01"]
    status, _, err = run(capsys, "train", *argv, "--out", str(tmp_path / "run"))
    assert status == 2 and err.endswith(f"error: rank {rank} of 2: stopped before training\n")
    warnings = [line for line in err.splitlines() if "warning:" in line]
    if rank == "1":
        assert warnings == []
    else:
        assert [w.split(":")[2].split(" is ")[0] for w in warnings] == [
            " train.threads 2",
            " train.min_lr 0.01",
        ]


def test_a_step_budget_inside_the_inverse_sqrt_warm_up_warns_once(capsys):
    from attnkit.cli import train
    from attnkit.nmt.config import TrainConfig

    train._warn_budget_inside_warmup(
        TrainConfig(lr_schedule="inverse_sqrt", max_steps=300, warmup_steps=4000)
    )
    assert capsys.readouterr().err == (
        "attnkit: warning: train.max_steps 300 ends inside the warm-up of train.warmup_steps "
        "4000: the learning rate climbs to 8% of train.lr and no further (lower "
        "warmup_steps, e.g. --train.warmup_steps 30)\n"
    )
    train._warn_budget_inside_warmup(
        TrainConfig(lr_schedule="inverse_sqrt", max_steps=10, warmup_steps=4000)
    )
    assert "climbs to 0.25% of train.lr" in capsys.readouterr().err  # not "0%"
    for fine in (
        TrainConfig(lr_schedule="inverse_sqrt", max_steps=300, warmup_steps=200),
        TrainConfig(lr_schedule="inverse_sqrt", max_steps=None),
        TrainConfig(max_steps=300, warmup_steps=4000),  # plateau: no warm-up
    ):
        train._warn_budget_inside_warmup(fine)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("argv", "warning"),
    [
        (
            ["quick", "--train.lr", "5e-6"],  # fine-tuning rate under the default min_lr 1e-5
            "attnkit: warning: train.min_lr 1e-05 is not below train.lr 5e-06: the linear "
            "schedule never lowers the rate (lower min_lr, e.g. --train.min_lr 5e-08)",
        ),
        (
            ["copy", "--train.min_lr", "0.003"],
            "attnkit: warning: train.min_lr 0.003 is not below train.lr 0.003: the plateau "
            "schedule never lowers the rate (lower min_lr, e.g. --train.min_lr 3e-05)",
        ),
        (["copy"], None),
        (["copy", "--train.lr_schedule", "inverse_sqrt", "--train.lr", "1e-6"], None),
    ],
)
def test_a_min_lr_not_below_lr_warns_that_the_rate_never_falls(
    capsys, monkeypatch, tmp_path, argv, warning
):
    # the linear line and the plateau decay stop at min_lr: the rate stayed at lr unsaid
    stop_before_training(monkeypatch)
    status, _, err = run(capsys, "train", *argv, "--out", str(tmp_path / "run"))
    assert status == 2 and err.endswith("error: stopped before training\n")
    warnings = [line for line in err.splitlines() if "warning:" in line]
    assert warnings == ([warning] if warning else [])


@pytest.mark.parametrize(
    ("argv", "warning"),
    [
        (
            ["copy", "--train.warmup_steps", "1000"],  # plateau has no warm-up
            "attnkit: warning: train.warmup_steps 1000: not used by train.lr_schedule plateau",
        ),
        (
            ["copy_transformer", "--train.min_lr", "0.001", "--train.lr_patience", "2"],
            "attnkit: warning: train.lr_patience 2, train.min_lr 0.001: not used by "
            "train.lr_schedule inverse_sqrt",
        ),
        (
            ["quick", "--train.lr_decay", "0.3"],
            "attnkit: warning: train.lr_decay 0.3: not used by train.lr_schedule linear",
        ),
        (["copy", "--train.lr_decay", "0.3", "--train.min_lr", "1e-4"], None),
        (["quick", "--train.warmup_steps", "50", "--train.min_lr", "1e-4"], None),
        (
            ["copy", "--tokenizer.model_type", "bpe"],  # copy splits words at whitespace
            "attnkit: warning: tokenizer.model_type bpe: not used by tokenizer.kind word",
        ),
        (
            ["copy", "--tokenizer.normalization", "identity"],
            "attnkit: warning: tokenizer.normalization identity: not used by tokenizer.kind word",
        ),
        (["quick", "--tokenizer.model_type", "bpe"], None),
    ],
)
def test_a_setting_the_run_does_not_read_is_warned_about(
    capsys, monkeypatch, tmp_path, argv, warning
):
    # train.warmup_steps with lr_schedule plateau trained without a warm-up, and
    # tokenizer.model_type bpe with tokenizer.kind word whitespace words, unsaid
    stop_before_training(monkeypatch)
    status, _, err = run(capsys, "train", *argv, "--out", str(tmp_path / "run"))
    assert status == 2 and err.endswith("error: stopped before training\n")
    warnings = [line for line in err.splitlines() if "warning:" in line]
    if warning is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and warnings[0].startswith(warning)


def test_a_whole_saved_config_copied_to_start_a_run_warns_of_no_unused_key(
    capsys, monkeypatch, tmp_path
):
    """A run's config.yaml gives every key, defaults included: copied to start a new run
    it warned that warmup_steps 4000 goes unread by the plateau schedule."""
    from attnkit.nmt.config import RunConfig

    stop_before_training(monkeypatch)
    whole = tmp_path / "copied.yaml"
    whole.write_text(RunConfig.preset("copy").to_yaml())
    status, _, err = run(capsys, "train", str(whole), "--out", str(tmp_path / "run"))
    assert status == 2 and "warning:" not in err, err


def test_a_vocabulary_smaller_than_asked_is_said_once_at_tokenizer_training(
    capsys, monkeypatch, tmp_path
):
    monkeypatch.chdir(REPO)
    argv = ["prepare", "configs/reverse.yaml", "--no-progress", "--out", str(tmp_path / "r")]
    status, _, err = run(capsys, *argv, "--tokenizer.vocab_size", "4000")
    assert status == 0, err
    said = [line for line in err.splitlines() if "tokenizer.vocab_size" in line]
    assert said == [
        "tokenizer: vocabulary of 24 tokens, not tokenizer.vocab_size 4000: "
        "the training text has no more distinct words"
    ]


def test_prepare_given_a_run_folder_asks_for_a_config_and_offers_no_resume(capsys, tmp_path):
    status, _, err = run(capsys, "prepare", str(tmp_path))
    assert status == 2
    assert err == (
        f"attnkit prepare: error: {tmp_path} is a folder; prepare takes a CONFIG.yaml "
        f"(and --out {tmp_path} to prepare that folder)\n"
    )
    with pytest.raises(SystemExit):
        run(capsys, "prepare", "--help")
    assert "--resume" not in capsys.readouterr().out  # prepare has no such option


def test_resuming_a_folder_prepare_made_says_how_to_start_training_in_it(
    capsys, tmp_path, monkeypatch
):
    def hint(out: str, config: str, name: str) -> str:
        return (
            f"attnkit train: error: {out} holds prepared data (attnkit prepare of config {name}) "
            f"but no run to resume; start training in it with: attnkit train {config} --out {out}\n"
        )

    monkeypatch.chdir(REPO)
    out = str(tmp_path / "r")
    assert run(capsys, "prepare", "configs/reverse.yaml", "--no-progress", "--out", out)[0] == 0
    status, _, err = run(capsys, "train", "--resume", out)
    assert status == 2
    assert err == hint(out, "configs/reverse.yaml", "reverse")
    monkeypatch.chdir(tmp_path)  # no configs/ here: the shipped preset, by name
    assert run(capsys, "train", "--resume", out)[2] == hint(out, "reverse", "reverse")

    mine = tmp_path / "mine.yaml"  # a config of the user's own: its path is not recorded
    mine.write_text((REPO / "configs" / "reverse.yaml").read_text(encoding="utf-8"))
    other = str(tmp_path / "m")
    assert run(capsys, "prepare", str(mine), "--no-progress", "--out", other)[0] == 0
    assert run(capsys, "train", "--resume", other)[2] == hint(other, "CONFIG.yaml", "mine")


@pytest.mark.parametrize("command", [["translate", "ein Hund"], ["evaluate"], ["export"]])
def test_using_a_folder_prepare_made_as_a_run_says_it_is_not_trained_yet(
    capsys, tmp_path, monkeypatch, command
):
    monkeypatch.chdir(REPO)
    out = str(tmp_path / "r")
    assert run(capsys, "prepare", "configs/reverse.yaml", "--no-progress", "--out", out)[0] == 0
    status, _, err = run(capsys, command[0], out, *command[1:])
    assert status == 2
    assert err == (
        f"attnkit {command[0]}: error: {out} holds prepared data (attnkit prepare of config "
        f"reverse) but no trained run; start training in it with: attnkit train "
        f"configs/reverse.yaml --out {out}\n"
    )


def test_resuming_a_run_whose_config_was_deleted_names_the_file(capsys, tmp_path, monkeypatch):
    from attnkit.nmt.runs.checkpoint import save_checkpoint

    monkeypatch.chdir(REPO)
    out = str(tmp_path / "r")
    assert run(capsys, "prepare", "configs/reverse.yaml", "--no-progress", "--out", out)[0] == 0
    save_checkpoint(out, "last", {"w": torch.zeros(1)}, {"step": 1})  # a run, then config.yaml lost
    status, _, err = run(capsys, "train", "--resume", out)
    assert status == 2
    assert err == (
        f"attnkit train: error: {out} holds a run's checkpoints but not its config.yaml; "
        f"restore it, or resume with the run's config: attnkit train CONFIG.yaml --out {out} "
        "--resume\n"
    )


def test_resuming_a_folder_that_does_not_exist_says_so(capsys, tmp_path):
    missing = tmp_path / "runs" / "nonexist"
    for argv in (["--resume", str(missing)], [str(missing), "--resume"]):
        status, _, err = run(capsys, "train", *argv)
        assert status == 2
        assert err == (
            f"attnkit train: error: no run folder {missing} to resume; "
            "give a run folder 'attnkit train' wrote\n"
        )


def test_prepare_warns_of_more_threads_than_cores_as_train_does(capsys, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0}, raising=False)
    threads = torch.get_num_threads()
    try:
        config, out = str(REPO / "configs" / "copy.yaml"), str(tmp_path / "r")
        status, _, err = run(
            capsys, "prepare", config, "--out", out, "--train.threads", "2", "--no-progress"
        )
    finally:
        torch.set_num_threads(threads)
    assert status == 0, err
    assert "warning: train.threads 2 is more than the 1 CPU core(s)" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["align", "runs/x", "--bitext", "pairs.txt", "--out", "-"],
        ["inspect", "runs/x", "--json", "-"],
        ["translate", "runs/x", "s1", "--show-attention", "--attention-out", "-"],
        ["translate", "runs/x", "s1", "--html", "-"],
    ],
)
def test_a_dash_output_is_refused_not_written_to_a_file_named_dash(
    capsys, monkeypatch, tmp_path, argv
):
    # `align --out -` (stdout to most tools) left stdout empty and the alignments in a file
    # named "-", as inspect --json -, --attention-out - and --html - did
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    option = argv[-2]
    message = f"{option} -: '-' is no file name here (stdout is not written through it)"
    assert_one_line_error(err, argv[0], message)
    assert not (tmp_path / "-").exists()


def _options_of(parser, name="attnkit"):
    """``(command, action)`` for every option of every (sub)command."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                yield from _options_of(sub, f"{name} {command}")
        elif action.option_strings:
            yield name, action


def test_every_option_with_a_default_names_it_in_its_help():
    # explain/saturation --format, align --method/--merge and plot weights --xlabel/--ylabel
    # listed no default in --help
    silent = [
        f"{command} {action.option_strings[-1]}"
        for command, action in _options_of(build_parser())
        if action.default not in (None, False, [], "==SUPPRESS==")
        and "default" not in (action.help or "")
    ]
    assert silent == []


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["evaluate", "runs/x", "--output"], "--output"),
        (["align", "runs/x", "--bitext", "pairs.txt", "--out"], "--out"),
        (["inspect", "runs/x", "--json"], "--json"),
        (["translate", "runs/x", "s1", "--attention-json"], "--attention-json"),
    ],
)
def test_an_output_under_a_file_is_refused_before_the_work(
    capsys, monkeypatch, tmp_path, argv, option
):
    # `evaluate RUN --output notes.txt/hyps.txt` translated the whole test set, printed the
    # scores and only then failed to write the translations (status 74)
    monkeypatch.chdir(tmp_path)
    Path("notes.txt").write_text("kept\n")
    status, out, err = run(capsys, *argv, "notes.txt/sub/hyps.txt")
    assert status == 2 and out == ""
    message = f"{option} notes.txt/sub/hyps.txt: notes.txt is a file, not a folder"
    assert_one_line_error(err, argv[0], message)
    assert Path("notes.txt").read_text() == "kept\n"


def test_a_target_vocabulary_smaller_than_asked_is_said_when_the_source_is_full(capsys, tmp_path):
    """With separate vocabularies only the larger was compared: a small target side next
    to a full source side went unmentioned."""
    pairs = "".join(f"s{i} s{i + 1}\tt{i % 3}\n" for i in range(60))
    (tmp_path / "pairs.tsv").write_text(pairs)
    config = tmp_path / "sep.yaml"
    config.write_text(
        "data: {train: {tsv: pairs.tsv}, valid: {tsv: pairs.tsv}}\n"
        "tokenizer: {kind: word, vocab_size: 30, joint: false}\n"
        "model: {embed_dim: 8, hidden_size: 8}\n"
    )
    argv = ["prepare", str(config), "--no-progress", "--out", str(tmp_path / "r")]
    status, _, err = run(capsys, *argv)
    assert status == 0, err
    said = [line for line in err.splitlines() if "tokenizer.vocab_size" in line]
    assert len(said) == 1 and " target tokens, not tokenizer.vocab_size 30" in said[0], said
    assert "source" not in said[0]


def test_an_output_that_is_a_device_is_not_refused_for_its_folder(monkeypatch, tmp_path):
    # /dev/stdout and /dev/null are written into (atomic_write_bytes, the sinks), never
    # replaced; /dev is root's, so for any other user the folder check refused them all
    from attnkit.cli import outputs

    real_access = os.access
    readonly = {Path("/dev"), tmp_path / "ro"}

    def access(path, mode, *args, **kwargs):  # as a user who may not write in those folders
        if Path(path) in readonly and mode & os.W_OK:
            return False
        return real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr(outputs.os, "access", access)
    for device in ("/dev/null", "/dev/stdout"):
        outputs.check_output("--attention-out", device)
        outputs.check_output("--out", device, {"--src": "in.txt"})
    # a regular file there is still refused: it is replaced, beside it
    (tmp_path / "ro").mkdir()
    with pytest.raises(UsageError, match="no permission to write in"):
        outputs.check_output("--out", str(tmp_path / "ro" / "x.txt"))
    # a link is followed to the file it names, which the writers replace
    (tmp_path / "rw").mkdir()
    (tmp_path / "ro" / "link.txt").symlink_to(tmp_path / "rw" / "x.txt")
    outputs.check_output("--out", str(tmp_path / "ro" / "link.txt"))


def test_translate_threads_over_the_cores_warn_as_train_threads_do(capsys, monkeypatch):
    # `translate --threads 5000` set 5,000 threads on 2 cores without a word
    from attnkit.cli.run_dir import apply_threads

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    apply_threads(5000)
    assert capsys.readouterr().err == (
        "attnkit: warning: --threads 5000 is more than the 2 CPU core(s) this process may use; "
        "threads beyond the cores wait for each other and slow the work down "
        "(use 2, or leave it out)\n"
    )
    apply_threads(2)
    assert capsys.readouterr().err == ""
