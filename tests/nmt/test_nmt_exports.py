"""attnkit.nmt's names: both architectures, training a preset, and the road from a run folder
to translations."""

import subprocess
import sys

import pytest

import attnkit.nmt as nmt
from attnkit.nmt.models.rnn import RNNTranslator
from attnkit.nmt.models.transformer import TransformerTranslator


def test_every_exported_name_resolves_and_both_architectures_are_there():
    for name in nmt.__all__:
        assert getattr(nmt, name) is not None, name
    assert nmt.RNNTranslator is RNNTranslator
    assert nmt.TransformerTranslator is TransformerTranslator
    assert {"load_run", "translate_lines", "TransformerConfig"} <= set(nmt.__all__)


def test_importing_the_package_loads_no_torch():
    code = "import sys, attnkit.nmt; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_shipped_preset_trains_from_python(tmp_path):
    small = ["data.toy.train_size=64", "data.toy.valid_size=8", "data.toy.test_size=8"]
    small += ["model.embed_dim=8", "model.hidden_size=8", "train.max_steps=2"]
    small += ["train.threads=1", "train.valid_every=null"]
    config = nmt.RunConfig.preset("reverse", small)
    assert config.name == "reverse" and config.data.toy.task == "reverse"
    summary = nmt.train(config, tmp_path / "run", progress_bar=False, echo=lambda _: None)
    assert summary.progress.step == 2
    translated = nmt.translate_lines(nmt.load_run(tmp_path / "run"), ["s1 s2"])
    assert len(translated) == 1


def test_an_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match=r"no preset 'quik'; the presets: copy, copy_transformer"):
        nmt.RunConfig.preset("quik")
