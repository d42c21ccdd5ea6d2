"""Translate odd input: empty lines, very long lines (truncated with a warning), unseen
characters, other scripts, binary junk on stdin. Always one output line per input
line, never a crash."""

import io
import json
import os

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from attnkit.cli import main
from attnkit.nmt.data.line_chunks import GZIP_MAGIC, UTF16_BOMS, other_compression
from attnkit.nmt.data.tokenizer import SentencePieceTokenizer, WordTokenizer
from attnkit.nmt.decoding.streaming import split_input
from attnkit.nmt.decoding.translate import translate_lines
from attnkit.nmt.runs.loaded_run import load_run
from conftest_nmt import make_run

GERMAN = ["ein Mann mit einem Hut", "zwei Hunde laufen", "eine Frau liest ein Buch"] * 10
ODD = [
    "",
    "   ",
    "\x00\x01\x1b[31m",
    "漢字テスト",
    "emoji 😀 🚀",
    "עברית שלום",
    "\ufffd\u200b",
    "lone \udcff surrogate",
    "x\u2028y\x85z",
    "ein Mann",
]


@pytest.fixture(scope="module")
def word_run(tmp_path_factory):
    tok = WordTokenizer.train(GERMAN)
    return make_run(tmp_path_factory.mktemp("word"), tok, data={"max_src_len": 6})


@pytest.fixture(scope="module")
def spm_run(tmp_path_factory):
    tok = SentencePieceTokenizer.train(GERMAN, vocab_size=40)
    return make_run(tmp_path_factory.mktemp("spm"), tok, decode={"max_input_len": 40})


@pytest.mark.parametrize("kind", ["word", "spm"])
def test_odd_lines_each_give_one_single_line_translation(kind, word_run, spm_run):
    run = load_run(word_run if kind == "word" else spm_run)
    warnings = []
    lines = [*ODD, "ein Mann " * 300]
    results = translate_lines(run, lines, warn=warnings.append)
    assert len(results) == len(lines)
    assert results[0].text == results[1].text == "" and results[0].weights is None
    for result in results:
        assert result.text == result.text.strip("\n") and len(result.text.splitlines()) <= 1
        if result.weights is not None:
            assert torch.isfinite(result.weights).all()
            assert result.weights.shape[1] == len(result.src_pieces)
    limit = 6 if kind == "word" else 40
    long = results[-1]
    assert long.truncated_from > limit and long.weights.shape[1] == limit + 1  # + EOS
    assert warnings == [
        f"line {len(lines)}: {long.truncated_from} tokens, truncated to the model's limit "
        f"of {limit}"
    ]
    assert all(r.truncated_from is None for r in results[:-1])


def test_split_input_keeps_line_count_and_reports_bad_utf8():
    warnings = []
    data = b"one\r\n\xff\xfe junk\n\x00\n\ncaf\xc3\xa9 \xe2\x80\xa8 tail"
    lines = split_input(data, warn=warnings.append)
    assert lines == ["one", "\ufffd\ufffd junk", "\x00", "", "café \u2028 tail"]
    assert warnings == [
        "line 2: invalid UTF-8 at byte 0 (invalid start byte); undecodable bytes replaced by U+FFFD"
    ]
    assert split_input(b"") == [] and split_input(b"\n") == [""]


class BinaryStdin:
    def __init__(self, data):
        self.buffer = io.BytesIO(data)


def test_binary_junk_on_stdin_gives_aligned_output_and_warnings(word_run, capsys, monkeypatch):
    junk = bytes(b for b in range(256) if b != ord("\n")) * 3  # every other byte value
    data = b"ein Mann\n" + junk + b"\n\n" + b"ein " * 40 + b"\nzwei Hunde"
    expected = len(split_input(data))
    monkeypatch.setattr("sys.stdin", BinaryStdin(data))
    assert main(["translate", str(word_run)]) == 0
    captured = capsys.readouterr()
    assert captured.out.count("\n") == expected
    assert captured.out.split("\n")[expected - 3] == ""  # the empty input line
    assert "Traceback" not in captured.err
    assert "line 2: invalid UTF-8" in captured.err
    assert "line 4: 40 tokens, truncated to the model's limit of 6" in captured.err


def test_undecodable_bytes_in_a_sentence_argument_are_read_as_on_stdin(word_run, capsys, tmp_path):
    out = tmp_path / "a.jsonl"
    argument = os.fsdecode(b"ein \xff Mann")  # as Python hands argv over: "ein \udcff Mann"
    assert (
        main(["translate", str(word_run), "zwei Hunde", argument, "--attention-json", str(out)])
        == 0
    )
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["source"] for r in records] == ["zwei Hunde", "ein \ufffd Mann"]  # one per byte
    warning = "line 2: invalid UTF-8 at byte 4 (invalid start byte); undecodable bytes replaced"
    assert warning in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["word", "spm"])
@pytest.mark.parametrize(
    "line",
    ["\ufeff", "\u200b", "\u200e", " \u200b\u200e\ufeff "],
    ids=["bom", "zwsp", "lrm", "mix"],
)
def test_a_line_that_only_looks_empty_gives_an_empty_line(
    kind, line, word_run, spm_run, capsys, monkeypatch
):
    data = f"{line}\nein Mann\n{line}\n\nzwei Hunde\n".encode()  # first: a BOM-only stdin
    monkeypatch.setattr("sys.stdin", BinaryStdin(data))
    assert main(["translate", str(word_run if kind == "word" else spm_run)]) == 0
    out = capsys.readouterr().out.split("\n")
    assert len(out) == 6 and out[0] == out[2] == out[3] == "" and out[5] == ""
    results = translate_lines(load_run(word_run if kind == "word" else spm_run), [line])
    assert results[0].text == "" and results[0].weights is None  # the model never ran


def test_a_leading_byte_order_mark_on_stdin_is_dropped():
    assert split_input(b"\xef\xbb\xbfein Mann\nzwei\n") == ["ein Mann", "zwei"]
    assert split_input(b"\xef\xbb\xbf") == [] and split_input(b"\xef\xbb\xbf\n") == [""]
    assert split_input(b"a\n\xef\xbb\xbfb\n") == ["a", "\ufeffb"]  # only at the very start


@settings(max_examples=25, deadline=None)
@given(st.binary(max_size=120))
@example(b"\xfe\xff")  # UTF-16 (big-endian) byte order mark: refused by name since 8ed32b8
def test_random_bytes_never_crash_and_stay_aligned(word_run_cached, data):
    try:
        lines = split_input(data)
    except ValueError:  # compressed input that is cut short or not ours, or UTF-16: refused
        named = data[:2] in (GZIP_MAGIC, *UTF16_BOMS) or other_compression(data[:10]) is not None
        assert named, data
        return
    results = translate_lines(word_run_cached, lines)
    assert len(results) == len(lines)
    assert all("\n" not in r.text and "\r" not in r.text for r in results)


@pytest.fixture(scope="module")
def word_run_cached(word_run):
    return load_run(word_run)


def test_undecodable_arguments_and_dollar_signs_in_plots(spm_run, capsys, tmp_path):
    sentences = ["ein \udcff Mann $\\frac$", "漢字"]  # $\frac$ is invalid matplotlib mathtext
    plots = tmp_path / "plots"
    assert main(["translate", str(spm_run), *sentences, "--plot", str(plots)]) == 0
    captured = capsys.readouterr()
    assert captured.out.count("\n") == 2 and "Traceback" not in captured.err
    assert (plots / "sentence_001.png").read_bytes()[:4] == b"\x89PNG"
    # DejaVu Sans has no CJK: one line per picture naming the characters, not one
    # matplotlib UserWarning (with a source path) per character
    said = [line for line in captured.err.splitlines() if "no glyph" in line]
    assert said and all(line.startswith("attnkit: warning: sentence_002") for line in said), said
    assert "漢" in said[0] and "字" in said[0] and "UserWarning" not in captured.err


def test_a_transformer_reads_no_more_source_than_its_positions(tmp_path):
    """No ``data.max_src_len``: the default limit (256) would overrun 16 positions."""
    tok = WordTokenizer.train(["ein Mann", "zwei Hunde"])
    model = {"arch": "transformer", "max_positions": 16, "d_model": 8, "heads": 2,
             "encoder_layers": 1, "decoder_layers": 1, "ff_dim": 16}  # fmt: skip
    folder = make_run(
        tmp_path, tok, data={"max_src_len": None}, model=model,
        decode={"max_len_a": 1.0, "max_len_b": 40},
    )  # fmt: skip
    warnings = []
    (result,) = translate_lines(load_run(folder), ["ein Mann " * 50], warn=warnings.append)
    assert warnings == ["line 1: 100 tokens, truncated to the model's limit of 15"]
    assert result.weights.shape[1] == 15 + 1 and result.weights.shape[0] <= 16  # + EOS


def test_translate_lines_decodes_in_the_runs_precision(word_run):
    """A run loaded in bf16 searches under bf16 autocast: near the fp32 weights, not equal."""
    lines = ["ein Mann", "zwei Hunde ein Mann"]
    fp32 = translate_lines(load_run(word_run), lines)
    bf16 = translate_lines(load_run(word_run, precision="bf16"), lines)
    for a, b in zip(fp32, bf16, strict=True):
        assert a.weights.dtype == b.weights.dtype == torch.float32
        if a.weights.shape == b.weights.shape:
            torch.testing.assert_close(b.weights, a.weights, atol=0.05, rtol=0)
    assert any(
        a.weights.shape != b.weights.shape or not torch.equal(a.weights, b.weights)
        for a, b in zip(fp32, bf16, strict=True)
    )


def test_one_sentence_as_a_str_is_refused_not_translated_letter_by_letter(word_run):
    # a str is a Sequence[str] of its characters: each would be translated as a line
    with pytest.raises(TypeError, match=r"lines must be a sequence of lines, got a str"):
        translate_lines(load_run(word_run), "ein Mann")


def test_lines_from_an_open_file_or_a_generator_are_all_translated(word_run, tmp_path):
    run = load_run(word_run)
    lines = ["ein Mann mit einem Hut", "", "zwei Hunde laufen"]
    expected = [t.text for t in translate_lines(run, lines)]
    path = tmp_path / "src.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with path.open(encoding="utf-8") as f:  # an iterator: read once, by the type check
        assert [t.text for t in translate_lines(run, f)] == expected
    assert [t.text for t in translate_lines(run, (line for line in lines))] == expected


def test_a_line_that_is_not_text_and_a_bad_n_best_are_named(word_run):
    run = load_run(word_run)
    for bad, shown in [(None, "NoneType"), (b"ein Mann", "bytes"), (float("nan"), "float")]:
        with pytest.raises(TypeError, match=rf"line 2 is a {shown}, not a str"):
            translate_lines(run, ["ein Mann", bad])  # bytes, or a NaN from an empty cell
    with pytest.raises(ValueError, match=r"n_best must be >= 0 .*got -1"):
        translate_lines(run, ["ein Mann"], n_best=-1)
    with pytest.raises(TypeError, match=r"n_best must be an int, got float 2.5"):
        translate_lines(run, ["ein Mann"], n_best=2.5)


@pytest.mark.parametrize("control", ["\x85", "\x1c"])
def test_a_source_is_tokenized_as_the_same_line_of_training_text(control, tmp_path):
    # U+0085 (cp1252's "…" read as Latin-1) is a piece of its own to sentencepiece, U+001C
    # a character it deletes; translation read both as a space, training as they are
    line = f"ein Mann{control}liest"
    tok = SentencePieceTokenizer.train([*GERMAN, line] * 3, vocab_size=40)
    run = load_run(make_run(tmp_path, tok))
    trained_on = tok.encode(line)  # what the token store holds for the line
    assert trained_on != tok.encode(line.replace(control, " "))
    (result,) = translate_lines(run, [line])
    assert result.src_ids == trained_on
    assert result.source == "ein Mann liest"  # shown on one line, as before


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_newline_inside_a_source_is_a_space_for_a_tokenizer_that_keeps_it(newline, tmp_path):
    # a sentence argument or an API line may hold "\n", which no line of training text
    # does; sentencepiece's identity normalization keeps it: "ein" <unk> "M" "a" "n" "n"
    tok = SentencePieceTokenizer.train(GERMAN * 3, vocab_size=40, normalization="identity")
    run = load_run(make_run(tmp_path, tok))
    (result,) = translate_lines(run, [f"ein{newline}Mann"])
    assert result.src_ids == tok.encode("ein Mann")
    assert result.source == "ein Mann"
