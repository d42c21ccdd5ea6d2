"""attnkit.nmt's names: both architectures and the road from a run folder to translations."""

import subprocess
import sys

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
