"""Cutting corpus files into chunks of raw lines: every line once, in order, as bytes; what
only the reader sees (files of different lengths, alignments too short or too long)
travels in the chunk that ends at it."""

import gzip
import lzma
import os
import threading

import pytest

from attnkit.nmt.data.corpus import read_lines
from attnkit.nmt.data.line_chunks import LineFiles, read_chunks


def _write(path, text):
    path.write_bytes(text)
    return path


def test_chunks_hold_every_line_once_in_order_as_bytes(tmp_path):
    src = _write(tmp_path / "s", b"a\nb\r\n\xffc\nd\ne\nf")  # bad UTF-8 is the workers' to see
    tgt = _write(tmp_path / "t", b"1\n2\n3\n4\n5\n6\n")
    chunks = list(read_chunks(LineFiles((src, tgt)), 4))
    assert [(c.first, c.count, c.error) for c in chunks] == [(1, 4, None), (5, 2, None)]
    assert b"".join(c.blocks[0] for c in chunks) == src.read_bytes()
    assert b"".join(c.blocks[1] for c in chunks) == tgt.read_bytes()


def test_files_of_different_lengths_end_the_last_chunk_with_the_error(tmp_path):
    src = _write(tmp_path / "s", b"a\nb\nc\nd\ne\n")
    tgt = _write(tmp_path / "t", b"1\n2\n3\n")
    *_, last = read_chunks(LineFiles((src, tgt)), 2)
    assert (last.first, last.count) == (3, 1)
    assert str(last.error) == (
        f"line counts differ: {src} has 5 lines but {tgt} has 3 ({src}, line 4 has no "
        "partner); parallel files must be line-aligned"
    )


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
def test_a_shorter_file_with_lone_cr_line_endings_is_named_with_the_fix(tmp_path, gzipped):
    lone_cr = b"1\r2\r3\r4\r5\r"
    tgt = _write(tmp_path / "t", gzip.compress(lone_cr) if gzipped else lone_cr)
    src = _write(tmp_path / "s", b"a\nb\nc\nd\ne\n")
    *_, last = read_chunks(LineFiles((src, tgt)), 2)
    assert str(last.error).endswith(
        f"line-aligned; {tgt} ends its lines with a lone CR (old Mac style), which is not "
        f"a line break here: convert it first (tr '\\r' '\\n' < {tgt} > fixed)"
    )


def test_crlf_line_endings_are_no_lone_cr(tmp_path):
    src = _write(tmp_path / "s", b"a\nb\nc\n")
    tgt = _write(tmp_path / "t", b"1\r\n2\r\n")
    *_, last = read_chunks(LineFiles((src, tgt)), 2)
    assert str(last.error).endswith("parallel files must be line-aligned")


def test_a_stray_cr_inside_the_lines_of_a_shorter_file_gets_no_lone_cr_hint(tmp_path):
    # an LF file (one line missing) with a CR inside a line, as crawled text has: the
    # "convert it with tr" hint would split that line in two and misalign the pair
    src = _write(tmp_path / "s", b"a\nb\nc\nd\n")
    tgt = _write(tmp_path / "t", b"1\n2 \r 2\n3\n")
    *_, last = read_chunks(LineFiles((src, tgt)), 2)
    assert str(last.error).endswith("parallel files must be line-aligned")


@pytest.mark.parametrize(
    ("align", "count", "message"),
    [
        (b"0-0\n0-0\n", 2, "has 2 lines but the corpus {where} has more (line 3 has no"),
        (b"0-0\n\n0-0\n\n0-0\n", 4, "has 5 lines but the corpus {where} has 4;"),
    ],
    ids=["short", "long"],
)
def test_an_alignment_file_of_another_length_is_named(tmp_path, align, count, message):
    tsv = _write(tmp_path / "c.tsv", b"a\t1\nb\t2\nc\t3\nd\t4\n")
    files = LineFiles((tsv,), (0, 1), _write(tmp_path / "c.align", align))
    chunks = list(read_chunks(files, 3))
    assert sum(c.count for c in chunks) == count and chunks[-1].blocks[1].count(b"\n") <= 3
    assert message.format(where=tsv) in str(chunks[-1].error)
    assert all(c.error is None for c in chunks[:-1])


def test_a_missing_file_is_named_at_the_first_chunk(tmp_path):
    with pytest.raises(FileNotFoundError, match="corpus file not found: .*nope"):
        next(read_chunks(LineFiles((tmp_path / "nope",), (0, 1)), 3))


@pytest.mark.parametrize(
    ("data", "name"),
    [
        (lzma.compress(b"a\nb\n"), "xz"),
        (b"\x28\xb5\x2f\xfd" + bytes(20), "zstd"),
        (b"PK\x03\x04" + bytes(20), "zip"),
    ],
    ids=["xz", "zstd", "zip"],
)
def test_a_file_of_another_compressor_is_named_not_read_as_bad_utf8(tmp_path, data, name):
    src = _write(tmp_path / "s", b"a\nb\n")
    tgt = _write(tmp_path / "t", data)
    with pytest.raises(ValueError, match=f"{tgt} is compressed with {name}, which attnkit does"):
        next(read_chunks(LineFiles((src, tgt)), 5))
    with pytest.raises(ValueError, match="decompress it first .* or recompress it with gzip"):
        read_lines(tgt)


def test_text_that_starts_like_a_magic_number_is_read_as_text(tmp_path):
    text = _write(tmp_path / "s", b"BZh9 is not bzip2\nPK is a word\n")
    assert read_lines(text) == ["BZh9 is not bzip2", "PK is a word"]


def _fifo_fed_with(path, data: bytes):
    """A named pipe at ``path`` that a thread fills with ``data`` (what ``<(zcat f)`` gives)."""
    os.mkfifo(path)

    def feed():
        with open(path, "wb") as pipe:
            pipe.write(data)

    threading.Thread(target=feed, daemon=True).start()
    return path


@pytest.mark.parametrize("gzipped", [False, True])
def test_named_pipes_are_read_whole_gzip_or_not(tmp_path, gzipped):
    text = "ein Hund\nzwei Katzen\n"
    data = gzip.compress(text.encode()) if gzipped else text.encode()
    assert read_lines(_fifo_fed_with(tmp_path / "src", data)) == ["ein Hund", "zwei Katzen"]
    src = _fifo_fed_with(tmp_path / "s2", b"a\nb\n")
    tgt = _fifo_fed_with(tmp_path / "t2", data)
    chunks = list(read_chunks(LineFiles((src, tgt)), 5))
    assert [c.count for c in chunks] == [2] and chunks[0].blocks[1] == text.encode()


def test_a_folder_is_named_as_one(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"corpus file {tmp_path} is a folder"):
        read_lines(tmp_path)


# a whole member, then one whose deflate data starts with a block of the reserved type 3
DAMAGED_GZIP = gzip.compress(b"a\nb\n") + b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff\x07" + bytes(8)


def test_damaged_deflate_data_is_a_read_error_naming_the_file_not_a_zlib_traceback(tmp_path):
    src = _write(tmp_path / "s.gz", DAMAGED_GZIP)
    tgt = _write(tmp_path / "t", b"1\n2\n3\n")
    with pytest.raises(ValueError, match=r"s\.gz: cannot read after line 2: .*invalid block type"):
        read_lines(src)
    *_, last = read_chunks(LineFiles((src, tgt)), 10)
    assert last.count == 2 and b"".join(last.blocks[:1]) == b"a\nb\n"
    assert "s.gz: cannot read after line 2: " in str(last.error)
