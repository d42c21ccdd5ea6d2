"""Odd corpora through ``attnkit train``: a clear error naming the file (and line), exit
status 2 and no traceback, or a documented skip whose count reaches the log."""

import bz2
import gzip
import json
import lzma

import pytest

from attnkit.cli import main

CONFIG = """
data:
  train: {src: train.de, tgt: train.en}
  valid: {src: valid.de, tgt: valid.en}
tokenizer: {kind: word, vocab_size: 50}
model: {embed_dim: 8, hidden_size: 8, dropout: 0.0, score: dot}
train: {batch_size: 4, max_steps: 2, valid_every: 2, threads: 1}
decode: {beam_size: 1}
"""
GOOD = {
    "train.de": "ein Haus\nein Hund\nder Hund\n",
    "train.en": "a house\na dog\nthe dog\n",
    "valid.de": "ein Haus\n",
    "valid.en": "a house\n",
}


def write_run(folder, **changes):
    """A config plus corpus files; ``changes`` maps file names (dots as _) to bytes/str/None."""
    files = {**GOOD, **{name.replace("_", "."): data for name, data in changes.items()}}
    for name, data in files.items():
        if data is None:
            continue
        path = folder / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    (folder / "run.yaml").write_text(CONFIG)
    return ["train", str(folder / "run.yaml"), "--out", str(folder / "out"), "--no-progress"]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"train_en": "a house\na dog\n"}, "train.de has 3 lines but {dir}/train.en has 2"),
        (
            {"train_en": b"a house\na \xff dog\nthe dog\n"},
            "{dir}/train.en, line 2: invalid UTF-8 at byte 2 (invalid start byte); iconv -f UTF-8 "
            "-t UTF-8 -c drops undecodable bytes and keeps the lines",
        ),
        ({"valid_de": None}, "corpus file not found: {dir}/valid.de"),
        (
            {"train_de": "\n \n\n", "train_en": "a\n\n\n"},
            "no train sentence pairs in {dir}/train.de",
        ),
        (
            {"valid_en": gzip.compress(b"a house\n")[:15]},
            "{dir}/valid.en: cannot read after line 0",
        ),
        (  # Windows Notepad's "Unicode": the bare UTF-8 message did not say what was wrong
            {"train_en": "a house\na dog\nthe dog\n".encode("utf-16")},
            "{dir}/train.en, line 1: invalid UTF-8 at byte 0 (invalid start byte); the file "
            "starts with a UTF-16 byte order mark: save it as UTF-8",
        ),
        (
            {"valid_de": b"\xfe\xff" + "ein Haus\n".encode("utf-16-be")},
            "{dir}/valid.de, line 1: invalid UTF-8 at byte 0 (invalid start byte); the file "
            "starts with a UTF-16 byte order mark",
        ),
        (  # read as text, it was "invalid UTF-8 ... iconv -c", advice that ruins the file
            {"train_de": lzma.compress(b"ein Haus\nein Hund\nder Hund\n")},
            "{dir}/train.de is compressed with xz, which attnkit does not read (plain or "
            "gzipped UTF-8 text only): decompress it first (xz -d {dir}/train.de)",
        ),
        (
            {"valid_en": bz2.compress(b"a house\n")},
            "{dir}/valid.en is compressed with bzip2, which attnkit does not read",
        ),
    ],
    ids=[
        "line-counts",
        "utf8",
        "missing",
        "all-empty",
        "bad-gzip",
        "utf16-le",
        "utf16-be",
        "xz",
        "bzip2",
    ],
)
def test_bad_corpus_is_a_clear_error_naming_the_file(tmp_path, capsys, changes, expected):
    argv = write_run(tmp_path, **changes)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.splitlines()[-1].startswith("attnkit train: error: ")
    assert expected.format(dir=tmp_path) in err


def test_tsv_with_too_few_columns_names_file_and_line(tmp_path, capsys):
    argv = write_run(tmp_path)
    (tmp_path / "train.tsv").write_text("ein Haus\ta house\nein Hund a dog\n")
    config = CONFIG.replace("{src: train.de, tgt: train.en}", "{tsv: train.tsv}")
    (tmp_path / "run.yaml").write_text(config)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}/train.tsv, line 2: expected at least 2 tab-separated columns, got 1" in err


def test_empty_lines_bom_and_crlf_are_handled_and_counted_in_the_log(tmp_path, capsys):
    argv = write_run(
        tmp_path,
        train_de=b"\xef\xbb\xbfein Haus\r\n\r\nein Hund\r\nder Hund\r\n  \r\n",
        train_en="a house\nlost\na dog\nthe dog\nlost too\n",
    )
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "3 training pairs (0 longer than the length limits dropped, 2 with an empty side " in err
    vocab = json.loads((tmp_path / "out" / "vocab.json").read_text())
    assert "ein" in vocab and "lost" not in vocab  # BOM gone, skipped pairs unused
    assert not any("\ufeff" in word or "\r" in word for word in vocab)


def test_a_run_resumes_from_its_token_store_when_its_training_files_are_gone(tmp_path, capsys):
    # it was 'corpus file not found' (checking the prepared tokenizers and the store)
    argv = write_run(tmp_path)
    assert main(argv) == 0
    (tmp_path / "train.de").unlink()
    resume = ["train", "--resume", str(tmp_path / "out"), "--no-progress"]
    assert main([*resume, "--train.max_steps", "4"]) == 0
    err = capsys.readouterr().err
    assert f"note: corpus file not found: {tmp_path}/train.de; the token store " in err
    assert "data: 3 training pairs" in err.split("note:")[-1]
    rows = (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(row)["step"] for row in rows][-1] == 4
