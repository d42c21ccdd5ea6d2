"""The README's Python examples run as written (those that need a trained run aside)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_the_readme_has_python_examples():
    assert len(_python_blocks()) >= 3


def test_the_attention_examples_run_in_order():
    namespace: dict = {}
    ran = 0
    for block in _python_blocks():
        if "runs/" in block:  # needs the run `make run` trains
            continue
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102
        ran += 1
    assert ran >= 3
    assert namespace["out_t"].shape == (2, 1, 512) and not namespace["out_t"].isnan().any()


@pytest.mark.parametrize("block", [b for b in _python_blocks() if "Attention(score)" in b])
def test_the_attention_layer_example_takes_a_key_mask(block):
    namespace: dict = {}
    exec("import torch\nimport attnkit\n" + block, namespace)  # noqa: S102
    assert namespace["weights"].shape == (2, 1, 6)
    assert namespace["context"].shape == (2, 1, 1024)
    assert bool((namespace["weights"][1, 0, 4:] == 0).all())
