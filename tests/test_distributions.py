"""The sdist and the wheel, built from a copy of the checkout: the sdist carries the test
suite and the files it reads, and the wheel built from that sdist carries what attnkit
reads at run time (bundled data, presets, the explorer's page) and nothing else."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from attnkit.nmt.config.presets import preset_names

pytest.importorskip("setuptools.build_meta")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
# what a checkout holds beside its source (its top level), and caches anywhere
_TOP_NOT_SOURCE = shutil.ignore_patterns(".git", ".venv*", "runs", "build", "dist", ".*cache")
_NOT_SOURCE = shutil.ignore_patterns("__pycache__", "*.egg-info", ".hypothesis")


def _source_only(folder: str, names: list[str]) -> set[str]:
    top = Path(folder) == REPO
    return _NOT_SOURCE(folder, names) | (_TOP_NOT_SOURCE(folder, names) if top else set())


def _build(kind: str, source: Path, out: Path) -> Path:
    """Build ``kind`` (sdist or wheel) of the project in ``source`` into ``out``, as a
    build frontend would without isolation."""
    code = f"from setuptools import build_meta as b; print(b.build_{kind}({str(out)!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=source, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out / done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    tree = tmp_path_factory.mktemp("checkout") / "attnkit"
    shutil.copytree(REPO, tree, symlinks=True, ignore=_source_only)
    return _build("sdist", tree, tmp_path_factory.mktemp("sdist"))


@pytest.fixture(scope="module")
def wheel(sdist, tmp_path_factory) -> Path:
    unpacked = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(sdist) as tar:
        # the "data" filter where this Python has it (3.10.12, 3.11.4 and later)
        tar.extractall(unpacked, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (top,) = unpacked.iterdir()
    return _build("wheel", top, tmp_path_factory.mktemp("wheel"))


def _sdist_files(sdist: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(sdist) as tar:
        return {m.name.split("/", 1)[1]: m for m in tar.getmembers() if "/" in m.name}


def test_the_sdist_carries_the_test_suite_and_the_files_it_reads(sdist):
    files = _sdist_files(sdist)
    suite = {str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("*.py")}
    assert {"tests/conftest.py", "tests/cli/test_cli_presets.py"} <= suite
    assert not suite - files.keys()  # setuptools alone takes only tests/test*.py
    read = ["Makefile", "constraints.txt", "docs/serve.md", "benchmarks/__init__.py"]
    assert not set(read) - files.keys()
    for name in preset_names():  # configs/ links to the presets; the sdist has the files
        assert files[f"configs/{name}.yaml"].isfile()


def test_the_wheel_from_the_sdist_carries_what_attnkit_reads_at_run_time(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    dist_info = "-".join(wheel.name.split("-")[:2]) + ".dist-info/"  # attnkit-0.1.0.dist-info/
    data = "attnkit/data/multi30k/"
    splits = ("train", "val", "test_2016_flickr")
    needed = {f"{data}{split}.{lang}.gz" for split in splits for lang in ("de", "en")}
    needed |= {f"{data}README.md", "attnkit/py.typed"}  # the data's terms and citation
    needed |= {f"attnkit/presets/{name}.yaml" for name in preset_names()}
    needed |= {f"attnkit/serve/static/{page}" for page in ("index.html", "app.js", "app.css")}
    needed |= {f"{dist_info}licenses/LICENSE"}
    needed |= {f"{dist_info}licenses/src/{data}README.md"}  # the data's terms, not MIT
    assert not needed - names
    stray = {n for n in names if not n.startswith(("attnkit/", dist_info))}
    assert stray == set()  # no tests/, benchmarks/ or configs/ as top-level packages
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
