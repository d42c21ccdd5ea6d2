"""attnkit.plot.check_path / save: what can be written is checked before any work."""

import pytest

from attnkit import plot


def test_check_path_accepts_new_folders_and_rejects_what_cannot_be_written(tmp_path):
    target = tmp_path / "new" / "deeper" / "w.svg"
    assert plot.check_path(target) == target and not (tmp_path / "new").exists()
    (tmp_path / "file.txt").write_text("x")
    for bad, message in [
        (tmp_path / "w.jpg", "cannot save a picture as 'w.jpg'"),
        (tmp_path / "file.txt" / "w.png", "cannot write in"),
    ]:
        with pytest.raises(ValueError, match=message):
            plot.check_path(bad)
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(ValueError, match="it is a folder"):
        plot.check_path(tmp_path / "dir.png")
    with pytest.raises(ValueError, match=r"'new.png/': it names a folder"):
        plot.check_path("new.png/")  # Path() would drop the '/' and write a file new.png
