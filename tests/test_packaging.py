"""pyproject.toml: the license as an SPDX expression, with a setuptools that reads it quietly;
the lowest torch it accepts is one attnkit runs on."""

from __future__ import annotations

import re
from pathlib import Path

PYPROJECT = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")


def test_the_license_is_an_spdx_string_not_a_table():
    # a table ({text = "MIT"}) makes setuptools >= 77 print a deprecation at every install
    assert re.search(r'^license = "MIT"$', PYPROJECT, re.M)


def test_the_build_needs_a_setuptools_that_reads_spdx_licenses():
    minimum = re.search(r'"setuptools>=(\d+)', PYPROJECT)
    assert minimum and int(minimum.group(1)) >= 77  # PEP 639 license expressions


def test_the_torch_minimum_has_the_apis_attnkit_calls():
    # torch.get_autocast_dtype / is_autocast_enabled(device_type) and fused Adam on
    # the CPU came with PyTorch 2.4: an older torch installs, then fails at run time
    minimum = re.search(r'"torch>=(\d+)\.(\d+)', PYPROJECT)
    assert minimum and (int(minimum.group(1)), int(minimum.group(2))) >= (2, 4)


def test_the_package_says_it_is_typed():
    # PEP 561: without py.typed in the wheel, mypy and pyright ignore attnkit's annotations
    # ("module is installed, but missing library stubs or py.typed marker")
    assert (Path(__file__).resolve().parents[1] / "src/attnkit/py.typed").is_file()
    package_data = re.search(r"^attnkit = \[(.*)\]$", PYPROJECT, re.M)
    assert package_data and '"py.typed"' in package_data.group(1)


def test_every_third_party_package_the_explorer_imports_is_a_dependency():
    # serve/app.py imports starlette itself; that fastapi brings it along today is not a promise
    app = (Path(__file__).resolve().parents[1] / "src/attnkit/serve/app.py").read_text()
    assert re.search(r"^from starlette\.", app, re.M)
    assert re.search(r'^    "starlette>=', PYPROJECT, re.M)


def test_the_version_is_written_once_and_the_metadata_reads_it():
    # pyproject.toml and attnkit/__init__.py each spelt "0.1.0": a release bumping one
    # would have `attnkit --version` and pip disagree
    import importlib.metadata

    import attnkit

    assert not re.search(r"^version\s*=\s*\"", PYPROJECT, re.M)
    assert re.search(r'^version = \{ attr = "attnkit.__version__" \}$', PYPROJECT, re.M)
    assert importlib.metadata.version("attnkit") == attnkit.__version__
