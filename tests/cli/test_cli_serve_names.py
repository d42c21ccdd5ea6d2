"""``attnkit serve`` names each run after the folder given, as docs/serve.md says."""

from __future__ import annotations

from attnkit.cli.serve import run_names


def test_a_run_given_through_a_link_is_named_after_the_link(tmp_path, monkeypatch):
    (tmp_path / "2026-12-07").mkdir()
    (tmp_path / "quick").symlink_to(tmp_path / "2026-12-07")
    monkeypatch.chdir(tmp_path)
    assert run_names(["quick", str(tmp_path / "quick/")]) == ["quick", "quick-2"]


def test_dot_folders_are_named_after_the_folder_they_mean(tmp_path, monkeypatch):
    (tmp_path / "quick" / "sub").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "quick")
    assert run_names([".", "sub/.."]) == ["quick", "quick-2"]
