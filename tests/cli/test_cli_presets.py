"""Presets shipped in the package: found by name (``attnkit train quick``) with no checkout,
the same files as the checkout's ``configs/``, and needing no file outside attnkit."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attnkit.cli import run_dir
from attnkit.nmt.config import RunConfig
from attnkit.nmt.config.presets import (
    PRESETS,
    config_path,
    linked_config,
    preset_names,
    preset_path,
)
from cli_helpers import assert_one_line_error, run

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ["copy", "copy_transformer", "multi30k", "quick", "reverse", "reverse_transformer"]
SHIPPED += ["transformer"]


def test_the_presets_that_need_no_outside_files_are_shipped():
    assert preset_names() == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_the_checkout_configs_are_the_shipped_files(name):
    # links in a checkout (text files naming the preset without symbolic links), copies in
    # the sdist: the same text either way
    config = REPO / "configs" / f"{name}.yaml"
    assert (linked_config(config) or config).read_bytes() == preset_path(name).read_bytes()


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_preset_reads_only_bundled_or_generated_data(name):
    config = RunConfig.load(preset_path(name))
    assert config.name == name
    assert config.data.train is None and config.train.guided_alignment is None
    assert (config.data.bundled == "multi30k") != (config.data.toy is not None)


def test_the_wheel_carries_the_presets():
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    package_data = re.search(r"^attnkit = \[(.*)\]$", pyproject, re.M)
    assert package_data and '"presets/*.yaml"' in package_data.group(1)
    assert PRESETS == REPO / "src" / "attnkit" / "presets"


def test_a_config_argument_is_a_path_first_then_a_preset_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert config_path("quick") == PRESETS / "quick.yaml"
    assert config_path("configs/quick.yaml") == Path("configs/quick.yaml")  # the loader names it
    assert config_path("mine.yaml") == Path("mine.yaml")
    (tmp_path / "quick.yaml").write_text("name: mine\n")  # the preset, copied to be edited
    assert config_path("quick") == Path("quick.yaml")  # a file here wins over the preset
    (tmp_path / "quick").write_text("name: mine\n")
    assert config_path("quick") == Path("quick")  # the very name first


def test_a_preset_name_has_no_folder_in_it():
    assert preset_path("quick") == PRESETS / "quick.yaml"
    assert preset_path("../presets/quick") is None and preset_path("") is None


def test_an_unknown_bare_name_lists_the_presets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="config file not found: quik") as caught:
        config_path("quik")
    assert ", ".join(SHIPPED) in str(caught.value)


def test_a_missing_configs_path_of_a_shipped_preset_names_the_preset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no checkout here: the README's configs/copy.yaml is absent
    with pytest.raises(FileNotFoundError) as caught:
        RunConfig.load("configs/copy.yaml")
    assert str(caught.value) == (
        "config file not found: configs/copy.yaml (attnkit ships a preset of that name: "
        "give it as copy, e.g. attnkit train copy or RunConfig.preset('copy'))"
    )
    with pytest.raises(FileNotFoundError) as caught:
        RunConfig.load("configs/align.yaml")
    assert str(caught.value) == "config file not found: configs/align.yaml"


def test_train_a_missing_configs_path_of_a_shipped_preset_is_one_line_naming_it(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, "train", "configs/reverse_transformer.yaml")
    assert status == 2 and out == ""
    assert_one_line_error(err, "train", "give it as reverse_transformer, e.g. attnkit train")


def test_a_configs_link_written_as_text_reads_the_preset_it_names(capsys, tmp_path, monkeypatch):
    """A clone without symbolic links (core.symlinks=false, Git for Windows) writes the link
    configs/reverse.yaml as a file holding its target's path: the README's
    'attnkit train configs/reverse.yaml' said 'the top level must be a mapping of sections'."""
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "reverse.yaml").write_bytes(preset_path("reverse").read_bytes())
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "reverse.yaml").write_text("../presets/reverse.yaml")
    monkeypatch.chdir(tmp_path)
    config = RunConfig.load("configs/reverse.yaml")
    assert config == RunConfig.load(preset_path("reverse"))
    status, out, err = run(
        capsys, "prepare", "configs/reverse.yaml", "--data.toy.train_size", "200"
    )
    assert status == 0, err
    assert out == "prepared: runs/reverse\n"


def test_a_config_naming_a_missing_file_is_still_refused(tmp_path):
    (tmp_path / "mine.yaml").write_text("../presets/none.yaml\n")
    with pytest.raises(ValueError, match="the top level must be a mapping of sections"):
        RunConfig.load(tmp_path / "mine.yaml")


def test_prepare_a_preset_by_name_outside_a_checkout(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, "prepare", "reverse", "--data.toy.train_size", "200")
    assert status == 0, err
    assert out == "prepared: runs/reverse\n"  # the folder is named after the preset
    prepared = json.loads((tmp_path / "runs/reverse/prepared.json").read_text())
    assert prepared["total"] == 200


def test_a_bad_preset_name_is_one_usage_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, "train", "quik")
    assert status != 0 and out == ""
    assert_one_line_error(err, "train", "nor a preset of that name; the presets: copy,")


def test_a_missing_run_outside_the_checkout_names_the_shipped_preset(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, _, err = run(capsys, "evaluate", "runs/multi30k")
    assert status == 2
    assert "'attnkit train multi30k' makes it" in err


def test_a_missing_run_of_a_checkout_only_preset_names_its_file(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, _, err = run(capsys, "evaluate", "runs/align")
    assert status == 2
    assert f"'attnkit train {REPO / 'configs' / 'align.yaml'}' makes it" in err
    monkeypatch.setattr(run_dir, "_CHECKOUT_CONFIGS", tmp_path / "no_checkout")  # a wheel
    status, _, err = run(capsys, "evaluate", "runs/align")
    assert "'attnkit train CONFIG.yaml --out runs/align' makes one" in err


def test_a_preset_named_as_the_other_architecture_points_to_its_sibling_by_name(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    argv = ["prepare", "reverse", "--model.arch", "transformer", "--data.toy.train_size", "100"]
    status, _, err = run(capsys, *argv)
    assert status == 0, err
    assert "; a preset tuned for it: reverse_transformer\n" in err
    argv = ["prepare", "reverse_transformer", "--model.arch", "rnn", "--out", "runs/back"]
    status, _, err = run(capsys, *argv, "--data.toy.train_size", "100")
    assert status == 0, err
    assert "; a preset tuned for it: reverse\n" in err
