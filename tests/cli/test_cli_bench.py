"""attnkit bench finds the checkout's benchmarks without editing sys.path, or fails in one line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import benchmarks
from attnkit.cli import bench
from cli_helpers import assert_one_line_error, run

CHECKOUT = Path(benchmarks.__file__).resolve().parents[1]


@pytest.fixture
def no_benchmarks_imported(monkeypatch):
    """Forget the imported benchmarks package for one test (restored afterwards)."""
    for name in [n for n in sys.modules if n == "benchmarks" or n.startswith("benchmarks.")]:
        monkeypatch.delitem(sys.modules, name)


def test_bench_without_the_benchmarks_folder_is_a_one_line_error(
    capsys, monkeypatch, tmp_path, no_benchmarks_imported
):
    monkeypatch.setattr(bench, "_CHECKOUT", tmp_path)  # as when installed from a wheel
    status, out, err = run(capsys, "bench", "--quick")
    assert status == 2 and not out
    assert_one_line_error(err, "bench", "run `python -m benchmarks.run` from the root of a clone")
    assert str(tmp_path) not in err  # a wheel's site-packages/../benchmarks means nothing to a user


def test_bench_loads_the_checkouts_benchmarks_by_path_without_touching_sys_path(
    no_benchmarks_imported,
):
    before = list(sys.path)
    runner = bench._benchmarks_runner()
    assert Path(runner.__file__).resolve() == CHECKOUT / "benchmarks" / "run.py"
    assert {"attention", "train", "decode", "transformer", "distributed"} <= set(runner.SUITES)
    # torch.utils.benchmark's own imports may add setuptools' vendored folder; the checkout
    # itself is never added
    added = [p for p in sys.path if p not in before]
    assert [p for p in added if "site-packages" not in p] == []


def test_benchmarks_run_as_a_module_from_a_checkout_takes_the_bench_options():
    command = [sys.executable, "-m", "benchmarks.run", "--only", "nosuch"]
    env_path = str(Path(bench.__file__).parents[2])  # the attnkit under test
    proc = subprocess.run(
        command,
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": env_path},
    )
    assert proc.returncode == 2 and not proc.stdout
    assert_one_line_error(proc.stderr, "bench", "--only: unknown suite(s) nosuch; choose from")


@pytest.mark.parametrize("where", ["folder", "missing folder"])
def test_bench_refuses_an_unwritable_json_file_in_one_line_before_running(capsys, tmp_path, where):
    target = tmp_path if where == "folder" else tmp_path / "nosuch" / "b.json"
    status, out, err = run(capsys, "bench", "--only", "deploy", "--json", str(target))
    assert status == 2 and not out  # refused before any suite ran
    assert_one_line_error(err, "bench", "--json: ")
    assert str(target if where == "folder" else target.parent) in err


def test_bench_json_dash_is_refused_before_running_not_written_to_a_file_named_dash(
    capsys, tmp_path, monkeypatch
):
    # `bench --json -` ran every suite (minutes) and then left the figures in a file named "-"
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, "bench", "--only", "deploy", "--json", "-")
    assert status == 2 and not out  # refused before any suite ran
    assert_one_line_error(err, "bench", "--json -: '-' is no file name here")
    assert not (tmp_path / "-").exists()


def test_bench_writes_the_figures_as_json(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("ATTNKIT_DEPLOY_RUN", raising=False)
    monkeypatch.chdir(tmp_path)  # no runs/transformer here: deploy says "no run"
    target = tmp_path / "b.json"
    status, out, _ = run(capsys, "bench", "--only", "deploy", "--json", str(target))
    figures = json.loads(target.read_text())
    assert status == 0 and "no run" in out
    assert figures["quick"] is False and figures["ratios"] == {}
    assert [t["title"] for t in figures["tables"]] == ["deploy"]


def test_bench_help_names_every_suite(capsys):
    from benchmarks.run import SUITES

    with pytest.raises(SystemExit):
        run(capsys, "bench", "--help")
    help_text = " ".join(capsys.readouterr().out.split())
    listed = help_text.split("run only these suites (")[1].split(")")[0]
    assert listed.split(", ") == list(SUITES)
