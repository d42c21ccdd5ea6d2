"""translate streams: stdin in buffers, answers while the pipe stays open, memory follows
the buffer; --show-attention off stdout, --attention-json (+ --n-best) readable by
`plot weights --index`, --plot clears its old heatmaps."""

import gzip
import io
import json
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import attnkit
from attnkit.cli import main
from attnkit.nmt.data.tokenizer import WordTokenizer
from attnkit.nmt.decoding.streaming import LineSplitter, read_buffers, split_input
from attnkit.nmt.decoding.translate import translate_lines
from attnkit.nmt.runs.loaded_run import load_run
from benchmarks.stream_memory import peak_rss_kib
from cli_helpers import assert_one_line_error, run
from conftest_nmt import make_run

WORDS = ["ein Mann mit einem Hut", "zwei Hunde laufen schnell", "eine Frau liest ein Buch"]
# lengths vary so that length sorting inside a buffer reorders them
LINES = ["ein Mann", "zwei Hunde laufen schnell heute", "", "eine", "Frau liest ein Buch"] * 3
ENV = {**os.environ, "PYTHONPATH": str(Path(attnkit.__file__).parents[1])}


@pytest.fixture(scope="module")
def word_run(tmp_path_factory):
    tok = WordTokenizer.train(WORDS)
    return make_run(tmp_path_factory.mktemp("stream"), tok, data={"max_src_len": 4})


def test_read_buffers_fills_buffers_and_numbers_lines_across_them():
    warnings = []
    data = b"\xef\xbb\xbfa\nb\nc\nd\n\xffe\nf\r\ng"
    buffers = list(read_buffers(io.BytesIO(data), 2, warn=warnings.append))
    assert buffers == [["a", "b"], ["c", "d"], ["\ufffde", "f"], ["g"]]
    assert len(warnings) == 1 and warnings[0].startswith("line 5: invalid UTF-8")


def test_a_byte_order_mark_split_across_chunks_is_still_dropped():
    splitter = LineSplitter()
    assert splitter.feed(b"\xef") == [] and splitter.feed(b"\xbb") == []
    assert splitter.feed(b"\xbfa\nb") == ["a"] and splitter.close() == ["b"]


def test_a_long_line_in_many_chunks_is_read_whole():
    # 16 MiB in 64 KiB chunks, a chunk boundary inside characters, and 200 KiB a byte
    # at a time: the unfinished line grows in place and is split only when a chunk
    # brings a newline (it was copied and rescanned at every chunk: quadratic time,
    # about 11 s for this test; the figures are in the commit, not asserted here).
    long_line = "é" * (8 << 20)
    data = f"{long_line}\nnext".encode()
    assert list(read_buffers(io.BytesIO(data), 10)) == [[long_line, "next"]]
    splitter, line = LineSplitter(), b"ab" * (100 << 10)
    lines = [row for k in range(len(line)) for row in splitter.feed(line[k : k + 1])]
    assert lines == [] and splitter.feed(b"\r\n") == [line.decode()] and splitter.close() == []


def test_gzipped_input_is_read_as_its_text_as_corpus_files_are():
    # `attnkit translate RUN < test.de.gz` translated the compressed bytes: a few lines of
    # U+FFFD for a file of many; evaluate --src and the corpus readers decompress it
    text = "\ufeffein Mann\r\nzwei Hunde\n\neine Frau"
    member = gzip.compress(text.encode())
    assert list(read_buffers(io.BytesIO(member), 3)) == [
        ["ein Mann", "zwei Hunde", ""],
        ["eine Frau"],
    ]
    splitter = LineSplitter()  # a byte at a time, two members back to back (cat a.gz b.gz)
    data = member + gzip.compress(b"\nletzte\n")
    lines = [row for k in range(len(data)) for row in splitter.feed(data[k : k + 1])]
    assert lines + splitter.close() == ["ein Mann", "zwei Hunde", "", "eine Frau", "letzte"]
    assert split_input(b"\x1f") == ["\x1f"]  # one byte that only starts like gzip
    with pytest.raises(ValueError, match="gzip.*ends early"):
        split_input(member[:-5])


def test_read_buffers_yields_what_arrived_while_the_pipe_stays_open():
    read_end, write_end = os.pipe()
    closed = threading.Event()

    def close_later():  # a safety net: a broken reader would otherwise wait forever
        time.sleep(20)
        closed.set()
        os.close(write_end)

    threading.Thread(target=close_later, daemon=True).start()
    os.write(write_end, b"ein Mann\nzwei")
    with os.fdopen(read_end, "rb", buffering=0) as stream:
        first = next(read_buffers(stream, 100))
        assert first == ["ein Mann"] and not closed.is_set()


def _read_lines(stream, count: int, seconds: float) -> list[bytes]:
    """Up to ``count`` lines from a pipe, waiting at most ``seconds`` in all."""
    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)
    data, deadline = b"", time.monotonic() + seconds
    while data.count(b"\n") < count and time.monotonic() < deadline:
        if selector.select(timeout=max(0.0, deadline - time.monotonic())):
            chunk = os.read(stream.fileno(), 4096)
            if not chunk:
                break
            data += chunk
    return data.splitlines()


def test_translate_answers_two_lines_before_the_pipe_closes(word_run):
    command = [sys.executable, "-m", "attnkit", "translate", str(word_run)]
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV
    )
    try:
        proc.stdin.write(b"ein Mann\nzwei Hunde\n")
        proc.stdin.flush()
        answered = _read_lines(proc.stdout, 2, seconds=30)  # stdin still open
    finally:
        proc.stdin.close()
    rest = proc.stdout.read()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and "Traceback" not in err
    assert len(answered) == 2 and all(answered) and rest == b""
    expected = [t.text for t in translate_lines(load_run(word_run), ["ein Mann", "zwei Hunde"])]
    assert [line.decode() for line in answered] == expected


def test_output_order_equals_input_order_across_buffer_boundaries(word_run, capsys, monkeypatch):
    data = ("\n".join(LINES) + "\n").encode()
    outputs = {}
    for size in (3, 1000):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
        status, out, err = run(capsys, "translate", str(word_run), "--buffer-size", str(size))
        assert status == 0 and "Traceback" not in err
        outputs[size] = out.split("\n")[:-1]
        long_lines = [i + 1 for i, line in enumerate(LINES) if len(line.split()) > 4]
        assert [f"line {n}: 5 tokens" in err for n in long_lines] == [True] * len(long_lines)
    assert outputs[3] == outputs[1000]
    run_ = load_run(word_run)
    alone = [translate_lines(run_, [line])[0].text for line in LINES]  # each on its own
    assert outputs[3] == alone


def test_memory_follows_the_buffer_not_the_input(word_run):
    small, written = peak_rss_kib(word_run, 1_000, buffer_size=100)
    large, written_large = peak_rss_kib(word_run, 20_000, buffer_size=100)
    assert (written, written_large) == (1_000, 20_000)
    assert large - small < 8 * 1024, (small, large)  # KiB; in one buffer the 20,000 take more


def test_show_attention_goes_to_stderr_or_to_a_file(word_run, capsys, tmp_path):
    status, out, err = run(
        capsys, "translate", str(word_run), "ein Mann", "", "zwei", "--show-attention"
    )
    assert status == 0 and "Traceback" not in err
    assert out.count("\n") == 3 and out.split("\n")[1] == ""
    assert err.startswith("line 1: ") and "line 3: " in err and "line 2: " not in err
    assert "<-" in err
    aligned = tmp_path / "align.txt"
    argv = ["ein Mann", "zwei", "--show-attention", "--attention-out", str(aligned)]
    status, out2, err2 = run(capsys, "translate", str(word_run), *argv)
    assert status == 0 and err2 == "" and out2.count("\n") == 2
    assert aligned.read_text().startswith("line 1: ") and "<-" in aligned.read_text()


def test_attention_json_holds_each_line_and_its_n_best(word_run, capsys, tmp_path):
    records = tmp_path / "attention.jsonl"
    argv = ["ein Mann mit", "", "zwei Hunde", "--attention-json", str(records), "--n-best", "3"]
    status, out, err = run(capsys, "translate", str(word_run), *argv, "--beam", "3")
    assert status == 0 and "Traceback" not in err and out.count("\n") == 3
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert [r["line"] for r in lines] == [1, 2, 3]
    first, empty = lines[0], lines[1]
    assert first["source"] == "ein Mann mit" and first["translation"] == out.split("\n")[0]
    assert first["src_tokens"] == ["ein", "Mann", "mit", "</s>"]
    assert len(first["weights"]) == len(first["tgt_tokens"])
    assert all(len(row) == 4 and abs(sum(row) - 1) < 1e-4 for row in first["weights"])
    hyps = first["hypotheses"]
    assert 1 <= len(hyps) <= 3 and hyps[0]["score"] >= hyps[-1]["score"]
    assert hyps[0]["tgt_tokens"] == first["tgt_tokens"]  # the 1-best is the translation
    assert all(len(h["weights"]) == len(h["tgt_tokens"]) for h in hyps)
    assert empty["weights"] is None and empty["translation"] == "" and empty["hypotheses"] == []


def test_more_n_best_than_beams_is_said_and_stdout_is_no_attention_json(word_run, capsys, tmp_path):
    records = tmp_path / "attention.jsonl"
    argv = ["ein Mann", "--attention-json", str(records), "--n-best", "4", "--beam", "2"]
    status, _, err = run(capsys, "translate", str(word_run), *argv)
    assert status == 0
    assert "warning: --n-best 4 is more than the beam (2): the search keeps 2" in err
    assert len(json.loads(records.read_text())["hypotheses"]) <= 2
    status, _, err = run(capsys, "translate", str(word_run), "ein Mann", "--attention-json", "-")
    assert status == 2
    assert_one_line_error(err, "translate", "--attention-json -: stdout carries the translations")


def test_n_best_above_the_beam_writes_at_most_the_beam(word_run, capsys, tmp_path, monkeypatch):
    """Beam search keeps every hypothesis that finished in the top K (often more than K a
    line); the warning's promise of at most K hypotheses a line holds all the same."""
    import attnkit.nmt.decoding.search as search

    real = search.beam_search_n_best
    monkeypatch.setattr(search, "beam_search_n_best", lambda *a: [h * 3 for h in real(*a)])
    records = tmp_path / "attention.jsonl"
    argv = ["ein Mann", "--attention-json", str(records), "--n-best", "5", "--beam", "2"]
    status, _, err = run(capsys, "translate", str(word_run), *argv)
    assert status == 0 and "at most 2 are written" in err
    assert len(json.loads(records.read_text())["hypotheses"]) == 2


def test_plot_weights_draws_one_entry_of_the_attention_json(word_run, capsys, tmp_path):
    records = tmp_path / "attention.jsonl"
    argv = ["ein Mann", "", "--attention-json", str(records)]
    assert run(capsys, "translate", str(word_run), *argv)[0] == 0
    picture = tmp_path / "one.png"
    status, out, err = run(
        capsys, "plot", "weights", str(records), "--index", "1", "-o", str(picture)
    )
    assert status == 0 and err == "" and out.startswith(f"wrote {picture}")
    assert picture.read_bytes()[:4] == b"\x89PNG"
    status, _, err = run(capsys, "plot", "weights", str(records), "--index", "2")
    assert status == 2
    assert_one_line_error(err, "plot", "entry 2 has no weights (an empty input line)")
    status, _, err = run(capsys, "plot", "weights", str(records), "--index", "3")
    assert status == 2
    assert_one_line_error(err, "plot", "has 2 entries; --index 3 is not one")


def test_plot_again_into_the_same_folder_leaves_no_stale_heatmaps(word_run, capsys, tmp_path):
    plots = tmp_path / "maps"
    plots.mkdir()
    (plots / "notes.png").write_bytes(b"mine")
    status, _, err = run(
        capsys, "translate", str(word_run), "ein", "zwei", "Mann", "--plot", str(plots)
    )
    assert status == 0 and "Traceback" not in err
    assert sorted(p.name for p in plots.glob("sentence_*")) == [
        "sentence_001.png",
        "sentence_002.png",
        "sentence_003.png",
    ]
    assert run(capsys, "translate", str(word_run), "eine Frau", "--plot", str(plots))[0] == 0
    assert sorted(p.name for p in plots.iterdir()) == ["notes.png", "sentence_001.png"]


def test_progress_goes_to_stderr_only(word_run, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"ein\nzwei\n")))
    status, out, err = run(capsys, "translate", str(word_run), "--progress")
    assert status == 0 and out.count("\n") == 2 and "lines" not in out
    assert "2 lines" in err and "lines/s" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--buffer-size", "0"], "--buffer-size must be >= 1, got 0"),
        (["--n-best", "2"], "--n-best needs --attention-json FILE"),
        (["--attention-out", "x.txt"], "--attention-out needs --show-attention"),
        (["--attention-json", "."], "--attention-json . is a folder; give the name of a file"),
    ],
)
def test_stream_option_errors_are_one_line(word_run, capsys, argv, message):
    status, out, err = run(capsys, "translate", str(word_run), "ein", *argv)
    assert status == 2 and out == ""
    assert_one_line_error(err, "translate", message)


def test_a_closed_stdin_is_a_one_line_error(word_run, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", None)  # what Python gives `attnkit translate RUN <&-`
    status, out, err = run(capsys, "translate", str(word_run))
    assert status == 2 and out == ""
    assert_one_line_error(err, "translate", "no sentences given and stdin is closed")
    assert run(capsys, "translate", str(word_run), "ein Mann")[0] == 0  # arguments need none


def test_stdin_from_a_file_shows_progress_and_reads_the_descriptor(word_run, capsys, tmp_path):
    source = tmp_path / "in.de"
    source.write_bytes(b"\xef\xbb\xbfein Mann\n\xff zwei\n\neine Frau\n")
    with open(source, "rb") as stdin:
        sys_stdin = io.TextIOWrapper(stdin)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("sys.stdin", sys_stdin)
            status, out, err = run(capsys, "translate", str(word_run), "--buffer-size", "2")
    assert status == 0 and "Traceback" not in err
    assert out.count("\n") == 4 and out.split("\n")[2] == "" and "lines" not in out
    assert "line 2: invalid UTF-8" in err and "4 lines" in err and "lines/s" in err


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs a Unix socket")
def test_a_src_that_cannot_be_opened_is_a_one_line_error(word_run, capsys, tmp_path):
    # translate --src on a file it may not read (or a socket) ended in a PermissionError
    # (OSError) traceback with status 1, where evaluate --src says it in one line
    path = tmp_path / "in.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        status, out, err = run(capsys, "translate", str(word_run), "--src", str(path))
    assert status == 2 and out == ""
    assert_one_line_error(err, "translate", f"--src {path}: cannot read it (No such device")


def test_no_progress_turns_off_the_automatic_progress_of_a_file(word_run, capsys, tmp_path):
    # train and prepare take --no-progress; translate had only --progress, so a batch job's
    # `translate RUN --src FILE 2> log` could not keep the progress lines out of its log
    source = tmp_path / "in.de"
    source.write_text("ein Mann\nzwei\n")
    status, out, err = run(capsys, "translate", str(word_run), "--src", str(source))
    assert status == 0 and "2 lines" in err and "lines/s" in err
    status, quiet, err = run(
        capsys, "translate", str(word_run), "--src", str(source), "--no-progress"
    )
    assert status == 0 and quiet == out and out.count("\n") == 2 and err == ""


class TerminalStdout(io.StringIO):
    def isatty(self):
        return True


def test_a_file_translated_onto_a_terminal_shows_no_automatic_progress(
    word_run, capsys, monkeypatch, tmp_path
):
    """stdout and stderr on one terminal: the bar's redraws landed among the translations
    ('translate: 0 lines [00:00, ? lines/s]' and the first translation on one line)."""
    source = tmp_path / "in.de"
    source.write_text("ein Mann\nzwei\n")
    stdout = TerminalStdout()
    monkeypatch.setattr("sys.stdout", stdout)
    assert main(["translate", str(word_run), "--src", str(source)]) == 0
    assert stdout.getvalue().count("\n") == 2 and capsys.readouterr().err == ""
    assert main(["translate", str(word_run), "--src", str(source), "--progress"]) == 0
    assert "2 lines" in capsys.readouterr().err  # asked for, it is shown


@pytest.mark.parametrize(("magic", "name"), [(b"\xfd7zXZ\x00\x00", "xz"), (b"PK\x03\x04", "zip")])
def test_input_of_another_compressor_is_refused_by_name_not_translated_as_garbage(magic, name):
    with pytest.raises(ValueError, match=f"the input is compressed with {name}, which attnkit"):
        LineSplitter().feed(magic + b"\x00\x04\xe6\xd6\xb4\x46 binary")
    assert LineSplitter().feed(b"PK is a fine start\n") == ["PK is a fine start"]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_utf16_input_is_refused_not_translated_as_garbage(word_run, capsys, tmp_path, encoding):
    """PowerShell 5's '>' writes UTF-16: each NUL byte split off a line of its own, and two
    lines came back as three wrong translations with status 0 (evaluate and align refuse
    such a file by name)."""
    bom = b"\xfe\xff" if encoding.endswith("be") else b""  # utf-16 writes its own
    source = tmp_path / "in.de"
    source.write_bytes(bom + "ein Mann\r\nzwei\r\n".encode(encoding))
    status, out, err = run(capsys, "translate", str(word_run), "--src", str(source))
    assert status == 2 and out == ""
    assert_one_line_error(err, "translate", "the input starts with a UTF-16 byte order mark")
    assert LineSplitter().feed(b"\xff plain latin-1\n") == ["\ufffd plain latin-1"]
