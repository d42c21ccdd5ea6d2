"""attnkit plot mask | plot weights: pictures written, exit statuses, one-line errors."""

import json

from matplotlib.image import imread

from attnkit.cli import main
from cli_helpers import LESSON, run


def test_plot_mask_causal_and_lengths(capsys, tmp_path):
    for flag, value in (("--causal", "5"), ("--lengths", "3,5")):
        path = tmp_path / f"{flag[2:]}.png"
        status, out, _ = run(capsys, "plot", "mask", flag, value, "-o", str(path))
        assert status == 0 and out.startswith(f"wrote {path}")
        width, height = (int(n) for n in out.split("(")[1].split(" px")[0].split(" x "))
        assert imread(path).shape[:2] == (height, width)
    status, _, err = run(capsys, "plot", "mask", "--causal", "0")
    assert status == 2 and "--causal needs a positive size" in err


def test_plot_weights_from_json_and_from_explain_output(capsys, tmp_path):
    plain = tmp_path / "w.json"
    plain.write_text(
        json.dumps({"weights": [[0.9, 0.1]], "row_labels": ["le"], "col_labels": ["the", "cat"]})
    )
    status, out, _ = run(capsys, "plot", "weights", str(plain))
    assert status == 0 and (tmp_path / "w.png").exists()
    trace = tmp_path / "trace.json"
    main([*LESSON[:2], "2,0,1;0,1,0", *LESSON[3:], "--format", "json"])
    trace.write_text(capsys.readouterr().out)
    status, out, _ = run(capsys, "plot", "weights", str(trace), "-o", str(tmp_path / "t.svg"))
    assert status == 0 and (tmp_path / "t.svg").read_text().lstrip().startswith("<?xml")


def test_plot_weights_errors_are_one_line(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"weights": [[0.5, 0.5]], "row_labels": ["a", "b"]}))
    status, _, err = run(capsys, "plot", "weights", str(bad))
    assert status == 2 and "row_labels has 2 labels but the matrix has 1 rows" in err
    status, _, err = run(capsys, "plot", "weights", str(tmp_path / "missing.json"))
    assert status == 2 and err.count("\n") == 1
