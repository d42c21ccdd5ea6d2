"""Run configs: presets validate, errors name key/value/allowed, overrides, paths."""

import os
import stat
from pathlib import Path

import pytest
import yaml

from attnkit.nmt.config import RunConfig, apply_overrides, leaf_keys

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TOY = {"data": {"toy": {"task": "reverse"}}}


@pytest.mark.parametrize("name", ["quick", "multi30k", "copy", "reverse"])
def test_presets_are_valid(name):
    config = RunConfig.load(CONFIGS / f"{name}.yaml")
    assert config.name == name


def test_defaults_are_teacher_forcing_lr_1e_3_and_hidden_512():
    config = RunConfig.from_dict(TOY)
    assert config.train.teacher_forcing == 1.0
    assert config.train.lr == 1e-3
    assert config.model.hidden_size == 512


def error_of(raw, overrides=()):
    with pytest.raises(ValueError) as info:
        RunConfig.from_dict(raw, overrides)
    return str(info.value)


def test_bound_error_names_key_rule_and_value():
    message = error_of(TOY, ["model.hidden_size=0"])
    assert "model.hidden_size: must be > 0, got 0" in message


def test_unknown_key_lists_allowed_keys():
    message = error_of({**TOY, "train": {"learning_rate": 0.1}})
    assert "train.learning_rate: unknown key (allowed here: batch_size, lr," in message


def test_literal_error_lists_choices():
    message = error_of(TOY, ["model.rnn=transformer"])
    assert "model.rnn: must be 'gru' or 'lstm', got 'transformer'" in message


def test_several_errors_are_all_reported():
    message = error_of(TOY, ["train.lr=-1", "train.label_smoothing=1.5"])
    assert "train.lr: must be > 0, got -1" in message
    assert "train.label_smoothing: must be < 1, got 1.5" in message


def test_direction_names_the_languages_or_the_toy_task():
    assert RunConfig.from_dict(TOY).data.direction == "toy reverse task"
    bundled = {"data": {"bundled": "multi30k", "src_lang": "en", "tgt_lang": "de"}}
    assert RunConfig.from_dict(bundled).data.direction == "en → de"


def test_cross_field_rules():
    assert "no data source: set data.bundled, data.toy or data.train" in error_of({"data": {}})
    two = error_of({"data": {"bundled": "multi30k", "train": {"tsv": "pairs.tsv"}}})
    assert "got both data.bundled and data.train (set only one data source)" in two
    message = error_of({"data": {"train": {"src": "a.de"}}})
    assert "data.train: give either both 'src' and 'tgt' files or one 'tsv' file" in message
    files = {"src": "t.de", "tgt": "t.en"}
    message = error_of({"data": {"bundled": "multi30k", "test": files}})
    assert "got both data.bundled and data.test (data.test files go with data.train" in message
    message = error_of({"data": {"toy": {"task": "copy"}, "valid": files}})
    assert "got both data.toy and data.valid" in message
    message = error_of({"data": {"bundled": "multi30k", "src_lang": "fr"}})
    assert "multi30k has languages de and en" in message
    message = error_of(TOY, ["model.input_feeding=true"])
    assert "input_feeding=True needs query_timing='current'" in message


def test_overrides_parse_yaml_values_and_create_sections():
    raw = apply_overrides(TOY, ["train.lr=3e-4", "train.clip=null", "model.rnn=lstm"])
    config = RunConfig.from_dict(raw)
    assert config.train.lr == 3e-4 and config.train.clip is None and config.model.rnn == "lstm"
    assert TOY == {"data": {"toy": {"task": "reverse"}}}  # input untouched


def test_bad_override_syntax():
    assert "must look like section.key=value" in error_of(TOY, ["model.hidden_size"])
    assert "data.toy.task is a value" in error_of(TOY, ["data.toy.task.x=1"])


def test_load_resolves_relative_paths_and_reports_yaml_errors(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        yaml.safe_dump({"data": {"train": {"tsv": "c/pairs.tsv"}, "valid": {"tsv": "v.tsv"}}})
    )
    config = RunConfig.load(path)
    assert config.name == "mine"
    assert config.data.train.tsv == str(tmp_path / "c" / "pairs.tsv")
    path.write_text("data: [unclosed")
    with pytest.raises(ValueError, match="not valid YAML"):
        RunConfig.load(path)
    with pytest.raises(FileNotFoundError, match="missing.yaml"):
        RunConfig.load(tmp_path / "missing.yaml")


def test_a_key_given_twice_is_an_error_not_the_last_one_silently(tmp_path):
    # PyYAML keeps the last of two train: sections: lr 0.5 was dropped without a word
    path = tmp_path / "twice.yaml"
    path.write_text("data:\n  toy: {task: copy}\ntrain:\n  lr: 0.5\ntrain:\n  epochs: 2\n")
    with pytest.raises(ValueError, match=r"twice.yaml: .*'train' is given twice .* lines 3 and 5"):
        RunConfig.load(path)
    path.write_text("data:\n  toy: {task: copy, seed: 1, seed: 2}\n")
    with pytest.raises(ValueError, match=r"'seed' is given twice .* lines 2 and 2"):
        RunConfig.load(path)
    # a key merged in from an anchor may be set again beside the merge
    path.write_text(
        "data:\n  train: &files {src: a.de, tgt: a.en}\n  valid: {<<: *files, src: b.de}\n"
    )
    config = RunConfig.load(path)
    assert config.data.valid.src == str(tmp_path / "b.de")
    assert config.data.valid.tgt == str(tmp_path / "a.en")


def test_exponent_notation_is_a_number_in_files_and_overrides(tmp_path):
    # PyYAML (YAML 1.1) reads 1e4 as the text '1e4': max_steps: 1e4 was "unable to parse
    # string as an integer"
    path = tmp_path / "exp.yaml"
    path.write_text("data:\n  toy: {task: copy}\ntrain:\n  max_steps: 1e4\n  lr: 3e-4\n")
    config = RunConfig.load(path, ["train.warmup_steps=4E3", "tokenizer.sample_sentences=1.0e6"])
    assert config.train.max_steps == 10_000 and config.train.lr == 3e-4
    assert config.train.warmup_steps == 4000 and config.tokenizer.sample_sentences == 10**6
    with pytest.raises(ValueError, match=r"train.max_steps: must be a valid integer"):
        RunConfig.load(path, ["train.max_steps=1e-3"])  # a fraction is still refused
    assert RunConfig.load(path, ["name=1e4"]).name == "1e4"  # a text key keeps the text


def test_a_saved_config_whose_text_reads_as_a_number_loads_back(tmp_path):
    # a run named after 5e4.yaml was saved as "name: 5e4", which the loader reads as the
    # number 50000.0: --resume and translate refused the run's own config.yaml
    path = tmp_path / "5e4.yaml"
    path.write_text("data:\n  toy: {task: copy}\n")
    config = RunConfig.load(path, ["data.src_lang=1e3"])
    assert (config.name, config.data.src_lang) == ("5e4", "1e3")
    saved = tmp_path / "run" / "config.yaml"
    saved.parent.mkdir()
    saved.write_text(config.to_yaml())
    assert "name: '5e4'" in saved.read_text()
    assert RunConfig.load(saved) == config


def test_override_paths_are_relative_to_the_current_folder(tmp_path, monkeypatch):
    # the file's own paths mean the config's folder; paths typed on the command line, cwd
    (tmp_path / "configs").mkdir()
    path = tmp_path / "configs" / "mine.yaml"
    path.write_text(yaml.safe_dump({"data": {"train": {"tsv": "pairs.tsv"}}}))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    overrides = ["data.valid.src=va é.de", "data.valid.tgt=/abs/va.en", "train.lr=0.5"]
    config = RunConfig.load(Path("../configs/mine.yaml"), overrides)
    assert config.data.train.tsv == str(tmp_path / "configs" / "pairs.tsv")
    assert config.data.valid.src == str(work / "va é.de")
    assert config.data.valid.tgt == "/abs/va.en"
    assert config.train.lr == 0.5


def test_paths_in_a_section_override_are_relative_to_the_current_folder(tmp_path, monkeypatch):
    # switching a split from two files to a TSV takes the whole section,
    # --set 'data.train={tsv: pairs.tsv}': its paths were typed on the command line too
    (tmp_path / "configs").mkdir()
    path = tmp_path / "configs" / "mine.yaml"
    path.write_text(yaml.safe_dump({"data": {"train": {"src": "a.de", "tgt": "a.en"}}}))
    monkeypatch.chdir(tmp_path)
    overrides = [
        "data.train={tsv: here/pairs.tsv, src_column: 1, tgt_column: 0}",
        "data.valid={src: va.de, tgt: /abs/va.en}",
    ]
    config = RunConfig.load(path, overrides)
    assert config.data.train.tsv == str(tmp_path / "here" / "pairs.tsv")
    assert (config.data.train.src, config.data.train.src_column) == (None, 1)
    assert config.data.valid.src == str(tmp_path / "va.de")
    assert config.data.valid.tgt == "/abs/va.en"


def test_an_override_of_a_text_key_is_the_text_typed(tmp_path, monkeypatch):
    # read as YAML, "no" (Norwegian) was False, 2024 a number and " #2.de" a comment, and
    # the shell's quotes are gone before attnkit sees the value, so it could not be quoted
    path = tmp_path / "mine.yaml"
    path.write_text(
        yaml.safe_dump({"data": {"train": {"tsv": "t.tsv"}, "valid": {"tsv": "v.tsv"}}})
    )
    monkeypatch.chdir(tmp_path)
    overrides = ["data.src_lang=no", "data.tgt_lang=on", "name=2024", "data.valid.tsv=va #2.tsv"]
    config = RunConfig.load(path, overrides)
    assert (config.data.src_lang, config.data.tgt_lang, config.name) == ("no", "on", "2024")
    assert config.data.valid.tsv == str(tmp_path / "va #2.tsv")
    # YAML still speaks where asked: a quoted value, a null, and every key that is no text
    overrides = ["data.src_lang='x: y'", "name=~", "train.lr=1e-3", "tokenizer.joint=no"]
    config = RunConfig.load(path, overrides)
    assert config.data.src_lang == "x: y" and config.name == "mine"  # null: the file's name
    assert config.train.lr == 1e-3 and config.tokenizer.joint is False


@pytest.mark.skipif(not Path("/dev/fd").is_dir(), reason="no /dev/fd")
def test_a_process_substitution_path_stays_the_pipe_it_names(tmp_path):
    # <(zcat train.de.gz) is /dev/fd/N; resolving it gives /proc/PID/fd/pipe:[INODE], a name
    # that does not exist, so reading it said "No such file" instead of "not a regular file"
    path = tmp_path / "mine.yaml"
    path.write_text(
        yaml.safe_dump({"data": {"train": {"tsv": "t.tsv"}, "valid": {"tsv": "v.tsv"}}})
    )
    read, write = os.pipe()
    try:
        config = RunConfig.load(path, [f"data.train.tsv=/dev/fd/{read}"])
        assert config.data.train.tsv == f"/dev/fd/{read}"
        assert stat.S_ISFIFO(Path(config.data.train.tsv).stat().st_mode)
    finally:
        os.close(read)
        os.close(write)


def test_yaml_dump_round_trips():
    config = RunConfig.load(CONFIGS / "quick.yaml")
    again = RunConfig.from_dict(yaml.safe_load(config.to_yaml()))
    assert again == config


def test_leaf_keys_cover_nested_sections():
    keys = set(leaf_keys())
    assert {"model.hidden_size", "train.lr", "data.toy.task", "data.train.tsv", "name"} <= keys
    assert "data.toy" not in keys


def test_a_transformer_s_length_limits_fit_its_position_table():
    table = ["model.arch=transformer", "model.max_positions=16"]
    config = RunConfig.from_dict(TOY, [*table, "data.max_src_len=null", "data.max_tgt_len=40"])
    assert (config.data.max_src_len, config.data.max_tgt_len) == (15, 15)  # </s> takes one
    config = RunConfig.from_dict(TOY, [*table, "data.max_src_len=9"])
    assert (config.data.max_src_len, config.data.max_tgt_len) == (9, 15)  # 50 by default
    assert RunConfig.from_dict(TOY, ["data.max_src_len=null"]).data.max_src_len is None  # RNN


def test_an_empty_section_means_its_defaults(tmp_path):
    # every key under train: and model: commented out: YAML reads each section as null
    path = tmp_path / "c.yaml"
    path.write_text("data:\n  toy: {task: copy}\nmodel:\n  # hidden_size: 64\ntrain:\ndecode:\n")
    config = RunConfig.load(path)
    plain = RunConfig.from_dict({"name": "c", "data": {"toy": {"task": "copy"}}})
    assert config.model_dump() == plain.model_dump()
    path.write_text("data:\n")
    with pytest.raises(ValueError, match="data: no data source: set data.bundled"):
        RunConfig.load(path)


def test_tsv_columns_beside_two_files_are_an_error_not_silently_ignored():
    # '--set data.train.src_column=1 --set data.train.tgt_column=0' (as docs/align.md flips
    # a TSV preset) on a split of two files trained the same direction as before
    files = {"src": "a.de", "tgt": "a.en"}
    raw = {"data": {"train": {**files, "src_column": 1, "tgt_column": 0}, "valid": files}}
    message = error_of(raw)
    assert "src_column=1 and tgt_column=0 pick the columns of a 'tsv' file" in message
    assert "swap the files" in message
    kept = RunConfig.from_dict({"data": {"train": {**files, "src_column": 0}, "valid": files}})
    assert (kept.data.train.src_column, kept.data.train.tgt_column) == (0, 1)
