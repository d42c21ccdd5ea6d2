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


@pytest.mark.parametrize("block", _python_blocks())
def test_every_examples_imports_resolve(block):
    """Even the blocks that need a trained run: their ``import`` lines run as written."""
    imports = [line for line in block.splitlines() if re.match(r"(from \S+ )?import ", line)]
    exec("\n".join(imports), {})  # noqa: S102


@pytest.mark.parametrize("block", [b for b in _python_blocks() if "Attention(score)" in b])
def test_the_attention_layer_example_takes_a_key_mask(block):
    namespace: dict = {}
    exec("import torch\nimport attnkit\n" + block, namespace)  # noqa: S102
    assert namespace["weights"].shape == (2, 1, 6)
    assert namespace["context"].shape == (2, 1, 1024)
    assert bool((namespace["weights"][1, 0, 4:] == 0).all())


def _bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_every_readme_command_uses_a_run_that_make_run_or_a_line_above_makes():
    """``runs/quick`` comes from ``make run``; any other run from a ``train`` line before it."""
    lacking = []
    for block in _bash_blocks():
        made = {"runs/quick"}
        for line in block.splitlines():
            words = line.split("#")[0].split()
            if "attnkit" not in " ".join(words[:2]):
                continue
            command = words[words.index(next(w for w in words if w.endswith("attnkit"))) + 1]
            if command == "train":
                config = next((w for w in words if w.endswith(".yaml")), None)
                out = words[words.index("--out") + 1] if "--out" in words else None
                made.add(out or f"runs/{Path(config).stem}" if config else out)
                continue
            used = [w for w in words if w.startswith("runs/")]
            lacking += [f"{line.strip()} (needs {run})" for run in used if run not in made]
    assert lacking == []


def test_the_makefile_run_target_makes_runs_quick():
    makefile = (README.parent / "Makefile").read_text(encoding="utf-8")
    assert "attnkit train configs/quick.yaml --out runs/quick" in makefile


def test_every_test_file_the_docs_name_exists():
    root = README.parent
    named = {
        path
        for page in [README, *sorted((root / "docs").glob("*.md"))]
        for path in re.findall(r"tests/[\w/]+\.py", page.read_text(encoding="utf-8"))
    }
    assert named and sorted(p for p in named if not (root / p).is_file()) == []


def test_the_readme_gives_the_input_limit_of_a_run_without_length_limits():
    """A toy run (``data.max_src_len: null``) cuts a translated line at 256 tokens; the
    README named only ``decode.max_input_len`` and ``data.max_src_len``."""
    from attnkit.nmt import RunConfig
    from attnkit.nmt.decoding.translate import input_limit

    config = RunConfig.preset("copy")
    assert config.data.max_src_len is None and config.decode.max_input_len is None
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert f"default `data.max_src_len` (else {input_limit(config)}), are truncated" in text
