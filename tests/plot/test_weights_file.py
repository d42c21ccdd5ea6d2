"""attnkit.plot.read_weights: the documented JSON format, explain's JSON, and loud errors."""

import json

import numpy as np
import pytest
from plot_helpers import WEIGHTS

from attnkit import explain, plot


def test_read_weights_accepts_the_documented_format_and_explain_json(tmp_path):
    plain = tmp_path / "w.json"
    plain.write_text(json.dumps({"weights": WEIGHTS, "row_labels": ["a", "b"]}))
    assert plot.read_weights(plain) == (WEIGHTS, ["a", "b"], None, None)
    trace = tmp_path / "trace.json"
    t = explain([[2.0, 0.0, 1.0], [0.0, 1.0, 0.0]], np.eye(3), causal=True)
    trace.write_text(json.dumps(t.to_dict()))
    saved = plot.read_weights(trace)
    assert saved == (t.weights, ["q1", "q2"], ["k1", "k2", "k3"], t.mask)
    assert saved.mask == [[True, True, False], [True, True, True]]


def test_read_weights_errors(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ValueError, match="is not valid JSON"):
        plot.read_weights(broken)
    broken.write_text('{"w": []}')
    with pytest.raises(ValueError, match='has no "weights" key'):
        plot.read_weights(broken)
    with pytest.raises(FileNotFoundError):
        plot.read_weights(tmp_path / "missing.json")


def test_read_weights_reads_one_entry_of_json_lines(tmp_path):
    lines = tmp_path / "attention.jsonl"
    entries = [{"weights": [[1.0]], "row_labels": ["a"]}, {"weights": None}, {"weights": WEIGHTS}]
    lines.write_text("\n".join(json.dumps(e) for e in entries) + "\n\n")
    assert plot.read_weights(lines, index=1) == ([[1.0]], ["a"], None, None)
    assert plot.read_weights(lines, index=3).weights == WEIGHTS
    with pytest.raises(ValueError, match="entry 2 has no weights .an empty input line."):
        plot.read_weights(lines, index=2)
    with pytest.raises(ValueError, match="has 3 entries; --index 4 is not one"):
        plot.read_weights(lines, index=4)


def test_read_weights_labels_become_text_and_must_be_lists(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"weights": WEIGHTS, "row_labels": [1, 2], "col_labels": "abc"}))
    with pytest.raises(ValueError, match="col_labels must be a list, got str"):
        plot.read_weights(path)
    path.write_text(json.dumps({"weights": WEIGHTS, "row_labels": [1, 2]}))
    assert plot.read_weights(path).row_labels == ["1", "2"]


def test_json_lines_without_an_index_say_so_and_which_indexes_exist(tmp_path):
    lines = tmp_path / "att.jsonl"
    lines.write_text("\n".join(json.dumps({"weights": WEIGHTS}) for _ in range(3)) + "\n")
    with pytest.raises(ValueError) as err:
        plot.read_weights(lines)
    message = str(err.value)
    assert "is JSON Lines (3 entries" in message and "--index N, N from 1 to 3" in message
    assert "Extra data" not in message
    with pytest.raises(ValueError, match=r"entries count from 1: 1 to 3"):
        plot.read_weights(lines, index=0)


def test_an_index_for_one_json_document_says_to_leave_it_out(tmp_path):
    trace = tmp_path / "trace.json"  # explain --format json: one document over many lines
    trace.write_text(json.dumps({"weights": WEIGHTS}, indent=2))
    with pytest.raises(ValueError, match=r"is one JSON document, not JSON Lines: --index 1"):
        plot.read_weights(trace, index=1)
    assert plot.read_weights(trace).weights == WEIGHTS
    one_line = tmp_path / "one.jsonl"  # JSON Lines with a single entry still takes --index 1
    one_line.write_text(json.dumps({"weights": WEIGHTS}) + "\n")
    assert plot.read_weights(one_line, index=1).weights == WEIGHTS


def test_read_weights_drops_a_byte_order_mark_and_names_a_file_that_is_not_utf8(tmp_path):
    # PowerShell's `Out-File -Encoding utf8` and Notepad write a BOM; `>` in Windows
    # PowerShell 5 writes UTF-16: the first was refused as invalid JSON, the second
    # failed with the codec's message alone, naming no file.
    path = tmp_path / "w.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"weights": WEIGHTS}).encode())
    assert plot.read_weights(path).weights == WEIGHTS
    lines = tmp_path / "att.jsonl"
    lines.write_bytes(
        b"\xef\xbb\xbf" + b"\n".join(json.dumps({"weights": WEIGHTS}).encode() for _ in range(2))
    )
    assert plot.read_weights(lines, index=1).weights == WEIGHTS
    path.write_text(json.dumps({"weights": WEIGHTS}), encoding="utf-16")
    with pytest.raises(ValueError, match=r"w\.json is not UTF-8 text .invalid byte at 0"):
        plot.read_weights(path)
