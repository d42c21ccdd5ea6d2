"""attnkit explain | saturation: output, exit statuses, one-line errors."""

import io
import json
import sys

import pytest
import torch
from matplotlib.image import imread

from attnkit import lessons, scaled_dot_product_attention
from attnkit.cli import main
from attnkit.lessons import AttentionTrace
from cli_helpers import LESSON, assert_one_line_error, run


def test_explain_prints_the_lessons_worked_example(capsys):
    status, out, err = run(capsys, *LESSON)
    assert status == 0 and not err
    for piece in (
        "scores = [2, 0, 1]",
        "= [1.155, 0.000, 0.577]",
        "exp(1.155) = 3.174",
        "= 5.955",
        "= [0.533, 0.168, 0.299]",
        "ok, the weights sum to 1",
    ):
        assert piece in out, piece


def test_no_scale_gives_softmax_of_the_raw_scores(capsys):
    status, out, _ = run(capsys, *LESSON, "--no-scale")
    assert status == 0 and "= [0.665, 0.090, 0.245]" in out


def test_json_output_round_trips_and_matches_the_core(capsys):
    status, out, _ = run(capsys, *LESSON[:2], "2,0,1;0.5,-1,2", *LESSON[3:], "--format", "json")
    assert status == 0
    trace = AttentionTrace.from_dict(json.loads(out))
    q = torch.tensor([[2.0, 0.0, 1.0], [0.5, -1.0, 2.0]], dtype=torch.float64)
    k = torch.eye(3, dtype=torch.float64)
    context, weights = scaled_dot_product_attention(q, k, k, return_weights=True)
    for ours, core in ((trace.weights, weights), (trace.context, context)):
        torch.testing.assert_close(
            torch.tensor(ours, dtype=torch.float64), core, rtol=1e-12, atol=0
        )
    assert AttentionTrace.from_dict(trace.to_dict()) == trace


def test_values_mask_causal_markdown_and_precision(capsys):
    status, out, _ = run(
        capsys, *LESSON, "--values", "1,2;3,4;5,6", "--mask", "1,0,1", "--format", "markdown"
    )
    assert status == 0 and "| k2 | [0, 1, 0] | [3, 4] |" in out and "| masked |" in out
    status, out, _ = run(capsys, *LESSON, "--precision", "5")
    assert "[0.53290, 0.16794, 0.29916]" in out
    status, out, _ = run(capsys, "explain", "--query", "1,0;0,1", "--keys", "1,0;0,1", "--causal")
    assert status == 0 and "k2 masked" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--query", "2,0,1", "--keys", "1,0,0;0,1;0,0,1"], "--keys rows have different lengths"),
        (["--query", "2,x,1", "--keys", "1,0,0"], "--query row 1, entry 2: 'x' is not a number"),
        (["--query", "", "--keys", "1,0,0"], "--query is empty"),
        (["--query", "2,,1", "--keys", "1,0,0"], "--query row 1, entry 2 is empty"),
        (["--query", "2,0,1", "--keys", "1,0,0;"], "--keys row 2 is empty"),
        (["--query", "2,0,nan", "--keys", "1,0,0"], "not a finite number"),
        (["--query", "2,0", "--keys", "1,0,0"], "--keys has Dk=3 but query has Dq=2"),
        (["--query", "2,0,1", "--keys", "1,0,0", "--mask", "yes"], "'yes' is not 1/0"),
        (["--query", "2,0,1", "--keys", "1,0,0", "--values", "1;2"], "--values has Tk=2"),
        (["--query", "2,0,1", "--keys", "1,0,0;0,1,0", "--mask", "1,1,1"], "--mask has shape"),
        (["--query", "2,0,1", "--keys", "1,0,0", "--precision", "-1"], "--precision must be"),
    ],
)
def test_malformed_input_is_a_one_line_error_with_status_2(capsys, argv, message):
    status, out, err = run(capsys, "explain", *argv)
    assert status == 2 and not out
    assert_one_line_error(err, "explain", message)


def test_explain_precision_given_a_number_format_names_the_mix_up(capsys):
    # translate's --precision bf16 typed here gave "invalid int value: 'bf16'"
    with pytest.raises(SystemExit):
        run(capsys, "explain", "--query", "1,0", "--keys", "1,0;0,1", "--precision", "bf16")
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(
        "attnkit explain: error: argument --precision: explain's --precision is the number "
        "of decimals shown, got 'bf16'; the worked example is computed in float64"
    )


def test_saturation_table_and_plot(capsys, tmp_path):
    path = tmp_path / "sat.png"
    argv = ["saturation", "--dims", "4,64,256", "--trials", "200", "--seed", "1"]
    status, out, _ = run(capsys, *argv, "--plot", str(path))
    assert status == 0 and "max w, unscaled" in out and f"wrote {path} (900 x 360 px)" in out
    assert imread(path).shape[:2] == (360, 900)
    status, out, _ = run(capsys, *argv, "--format", "json")
    data = json.loads(out)
    assert data["max_weight_unscaled"][2] > 0.9 and data["seed"] == 1
    status, _, err = run(capsys, "saturation", "--dims", "4,x")
    assert status == 2 and "--dims: 'x' is not a whole number" in err


def test_negative_vectors_are_read_as_typed(capsys):
    status, out, err = run(capsys, "explain", "--query", "-1.5,2", "--keys", "-1,0;0,1")
    assert status == 0 and not err
    assert "query  q = [-1.500, 2.000]" in out and "key    k1 = [-1, 0]" in out
    assert run(capsys, "explain", "--query=-1.5,2", "--keys=-1,0;0,1") == (status, out, err)
    status, out, err = run(capsys, "saturation", "--dims", "-4")
    assert status == 2 and not out
    assert_one_line_error(err, "saturation", "--dims: -4 is below the minimum of 1")


def test_saturation_checks_the_picture_path_before_computing(capsys, tmp_path, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("the table was computed before the path was checked")

    monkeypatch.setattr(lessons, "saturation", never)
    (tmp_path / "file").write_text("x")
    for path, message in [
        (tmp_path / "sat.jpg", "cannot save a picture as 'sat.jpg': use a .png, .svg, .pdf file"),
        (tmp_path / "file" / "sat.png", f"cannot write in '{tmp_path / 'file'}'"),
    ]:
        status, out, err = run(capsys, "saturation", "--plot", str(path))
        assert status == 2 and not out
        assert_one_line_error(err, "saturation", message)


@pytest.mark.parametrize(
    "argv, lines",
    [
        (
            [*LESSON, "--values", "1,2;3,4;5,6"],
            ["  q.k1 = 2*1 + 0*0 + 1*0 = 2", "  c = 0.533*[1, 2] + 0.168*[3, 4] + 0.299*[5, 6]"],
        ),
        ([*LESSON, "--format", "markdown"], ["Context c = sum_j w_j v_j = [0.533, 0.168, 0.299]."]),
        (
            ["saturation", "--dims", "4", "--trials", "10"],
            ["   d_k    var(q.k)   var(q.k)/d_k  max w, unscaled  max w, scaled"],
        ),
    ],
    ids=["text", "markdown", "saturation"],
)
def test_an_ascii_stdout_gets_the_symbols_in_ascii(argv, lines, monkeypatch):
    """LC_ALL=C or PYTHONIOENCODING=ascii: explain and saturation failed with status 2
    ('ascii' codec can't encode '·'); a '?' for each symbol would leave '2?1'."""
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="ascii", write_through=True)
    monkeypatch.setattr(sys, "stdout", stdout)
    assert main(argv) == 0
    said = stdout.buffer.getvalue().decode("ascii").splitlines()
    assert all(line in said for line in lines), said
    assert not any("?" in line for line in said)


def test_a_typeset_minus_sign_reads_as_a_minus(capsys):
    # "−1" (U+2212, as lessons and web pages typeset it) was "'−1' is not a number"
    typed = run(capsys, "explain", "--query", "-1.5,2", "--keys", "-1,0;0,1")
    assert run(capsys, "explain", "--query", "\u22121.5,2", "--keys", "\u22121,0;0,1") == typed
