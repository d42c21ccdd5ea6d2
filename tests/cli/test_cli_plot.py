"""attnkit plot mask | plot weights: pictures written, exit statuses, one-line errors."""

import json

from matplotlib.image import imread

from attnkit.cli import main
from cli_helpers import LESSON, assert_one_line_error, run


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


def test_plot_weights_draws_tex_labels_and_the_saved_mask(capsys, tmp_path):
    saved = tmp_path / "w.json"
    saved.write_text(
        json.dumps(
            {
                "weights": [[1.0, 0.0], [0.4, 0.6]],
                "row_labels": ["$x^$", "a_b"],
                "col_labels": ["c^d", "e\\f"],
                "mask": [[True, False], [True, True]],
            }
        )
    )
    out_path = tmp_path / "w.png"
    argv = ["plot", "weights", str(saved), "--xlabel", "source ($)", "--ylabel", "target"]
    status, out, err = run(capsys, *argv)
    assert status == 0 and not err and out.startswith(f"wrote {out_path} (")
    assert imread(out_path).shape[2] in (3, 4)


def test_plot_commands_check_the_output_path_before_drawing(capsys, tmp_path):
    weights = tmp_path / "w.json"
    weights.write_text(json.dumps({"weights": [[1.0]]}))
    for argv in (
        ["plot", "mask", "--causal", "3", "-o", str(tmp_path / "mask.jpg")],
        ["plot", "weights", str(weights), "-o", str(tmp_path / "w.gif")],
        ["plot", "weights", str(tmp_path / "missing.json"), "-o", str(tmp_path / "w.bmp")],
    ):
        status, out, err = run(capsys, *argv)
        assert status == 2 and not out
        assert_one_line_error(err, "plot", "cannot save a picture as '")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.json"]
