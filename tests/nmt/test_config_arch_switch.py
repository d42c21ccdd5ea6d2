"""Switching ``model.arch`` on a preset from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnkit.nmt.config import RunConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("preset", ["reverse", "copy", "quick", "multi30k"])
def test_an_rnn_preset_trains_as_a_transformer_with_one_note(preset):
    notes: list[str] = []
    config = RunConfig.load(CONFIGS / f"{preset}.yaml", ["model.arch=transformer"], notes=notes)
    assert config.model.arch == "transformer"
    assert len(notes) == 1
    assert notes[0].startswith("model.arch transformer: dropped the rnn keys model.embed_dim, ")
    assert "model.hidden_size" in notes[0] and "model.dropout" not in notes[0]


def test_the_transformer_preset_trains_as_an_rnn():
    notes: list[str] = []
    config = RunConfig.load(CONFIGS / "transformer.yaml", ["model.arch=rnn"], notes=notes)
    assert config.model.arch == "rnn" and config.model.dropout == 0.2  # shared keys stay
    assert "model.d_model" in notes[0] and "model.heads" in notes[0]


def test_null_removes_a_key_the_architecture_does_not_have():
    notes: list[str] = []
    overrides = ["model.arch=transformer", "model.embed_dim=null"]
    config = RunConfig.load(CONFIGS / "reverse.yaml", overrides, notes=notes)
    assert config.model.arch == "transformer"
    assert "model.embed_dim" not in notes[0] and "model.hidden_size" in notes[0]


def test_a_key_set_on_the_command_line_is_still_checked():
    with pytest.raises(ValueError, match="model.hidden_size: unknown key"):
        RunConfig.load(CONFIGS / "reverse.yaml", ["model.arch=transformer", "model.hidden_size=8"])


def test_the_files_own_keys_are_still_checked(tmp_path):
    text = (
        (CONFIGS / "reverse.yaml").read_text().replace("model:\n", "model:\n  arch: transformer\n")
    )
    (tmp_path / "mixed.yaml").write_text(text)
    with pytest.raises(ValueError, match="model.embed_dim: unknown key"):
        RunConfig.load(tmp_path / "mixed.yaml")


def test_no_switch_no_note():
    notes: list[str] = []
    RunConfig.load(CONFIGS / "reverse.yaml", ["model.arch=rnn", "train.lr=0.01"], notes=notes)
    assert notes == []


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["model.heads=4"], "model.heads: unknown key for model.arch rnn, a key of model.arch "),
        (
            ["model.arch=transformer", "model.embed_dim=8"],
            "model.embed_dim: unknown key for model.arch transformer, a key of model.arch rnn (",
        ),
    ],
)
def test_a_key_of_the_other_architecture_is_named_as_one(overrides, expected):
    # "unknown key" alone reads as a misspelling; the key is right, the architecture is not
    with pytest.raises(ValueError) as err:
        RunConfig.load(CONFIGS / "reverse.yaml", overrides)
    assert expected in str(err.value)
    with pytest.raises(ValueError) as err:
        RunConfig.load(CONFIGS / "reverse.yaml", ["model.hiden_size=8"])
    assert "model.hiden_size: unknown key (allowed here: arch," in str(err.value)
