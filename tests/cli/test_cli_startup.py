"""Start-up cost of the ``attnkit`` command: parsing loads no heavy library.

The parser is built from the config keys (``attnkit train --train.lr``), so the
config package must validate without torch; torch, matplotlib, sentencepiece
and the web stack are imported only by the commands that use them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "numpy", "matplotlib", "sentencepiece", "sacrebleu", "starlette", "uvicorn")

_PROBE = """
import json, sys
from attnkit.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)), file=sys.stderr)
"""


def _heavy_modules_after(argv: list[str]) -> list[str]:
    code = _PROBE.format(argv=argv, heavy=HEAVY)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["train", "--help"],
        ["translate", "--help"],
        ["average", "--help"],
        ["--version"],
    ],
)
def test_help_loads_no_heavy_library(argv):
    assert _heavy_modules_after(argv) == []


def test_explain_loads_only_numpy():
    """The worked example computes in numpy: `attnkit explain` starts in about 0.4 s of CPU."""
    argv = ["explain", "--query", "2,0,1", "--keys", "1,0,0;0,1,0;0,0,1", "--causal"]
    assert _heavy_modules_after(argv) == ["numpy"]


def test_config_validates_without_torch():
    code = (
        "import sys\n"
        "from attnkit.nmt.config import RunConfig\n"
        "RunConfig.load('configs/reverse.yaml', ['model.arch=transformer'])\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.stdout.strip() == "False", done.stderr


def test_the_server_package_names_the_web_stacks_classes_without_loading_it():
    """``attnkit.serve`` hands on create_app, ServedRun and MissingRun on first use (as
    ``attnkit`` and ``attnkit.nmt`` do): dir() lists them before the web stack loads."""
    code = (
        "import sys, attnkit.serve as s\n"
        "print(sorted({'create_app', 'ServedRun', 'MissingRun'} & set(dir(s))))\n"
        "print('attnkit.serve.app' in sys.modules, 'starlette' in sys.modules)\n"
        "print(s.create_app.__module__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.stdout.splitlines() == [
        "['MissingRun', 'ServedRun', 'create_app']",
        "False False",
        "attnkit.serve.app",
    ], done.stderr
