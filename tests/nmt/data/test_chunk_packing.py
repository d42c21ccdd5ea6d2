"""A store built from raw lines (decoded and cleaned in the workers) is byte for byte the
store built from the pair reader, with the same counts and the same errors, on one worker
or two, for odd corpora: blank sides, a byte order mark, CRLF, TSV, gzip, a first-N cut,
invalid UTF-8, a TSV line without a tab, files of different lengths, a corrupt gzip."""

import gzip
import re

import pytest

from attnkit.nmt.config import DataConfig
from attnkit.nmt.data.chunk_packing import PairEncoder
from attnkit.nmt.data.corpus import stream_split
from attnkit.nmt.data.store_build import build_store, build_store_from_lines
from attnkit.nmt.data.tokenizer import WordTokenizer
from attnkit.nmt.data.training_split import train_line_files

SOURCE = [
    "\ufeffein Haus",
    "",
    "der Hund\r",
    "  \t ",
    "ein sehr sehr langer Satz hier",
    "die Katze",
    "\u200b",
    "ein Hund  ",
    "zwei Hunde",
    "ein Haus am See",
    "der See",
    "die Katze",
    "\ufeffein Hund",
]
TARGET = [
    "a house",
    "empty source",
    "the dog\r",
    "empty",
    "a long one",
    "",
    "invisible",
    " a dog",
    "two dogs",
    "a house by the lake",
    "the lake",
    "the cat",
    "a dog",
]


@pytest.fixture
def tok():
    words = " ".join(SOURCE + TARGET).split()
    return WordTokenizer.train(words)


def _write(path, lines, *, gz=False, end="\n"):
    data = (end.join(lines) + end).encode("utf-8") if isinstance(lines, list) else lines
    path.write_bytes(gzip.compress(data) if gz else data)
    return str(path)


def _parallel(tmp_path, src=SOURCE, tgt=TARGET, gz=False, **data):
    return DataConfig(
        train={
            "src": _write(tmp_path / "s", src, gz=gz),
            "tgt": _write(tmp_path / "t", tgt, gz=gz),
        },
        valid={"src": str(tmp_path / "s"), "tgt": str(tmp_path / "t")},
        max_src_len=4,
        **data,
    )


def _tsv(tmp_path, lines, **data):
    path = _write(tmp_path / "train.tsv", lines, end="\r\n")
    return DataConfig(train={"tsv": path}, valid={"tsv": path}, max_src_len=4, **data)


def _outcome(build, folder):
    """('ok', every file's bytes) or ('error', type, message) of one build."""
    try:
        build(folder)
    except (ValueError, FileNotFoundError) as err:
        return ("error", type(err), str(err))
    return ("ok", {p.name: p.read_bytes() for p in sorted(folder.iterdir())})


def _both(tmp_path, data, tok, workers):
    """The outcome of the pair reader's build and of the line reader's."""
    encoder = PairEncoder(tok.encode_batch, tok.encode_batch)
    common = {
        "vocab_size": tok.vocab_size,
        "fingerprint": "f",
        "max_src_len": data.max_src_len,
        "max_tgt_len": data.max_tgt_len,
    }

    def from_pairs(folder):
        pairs = stream_split(data, "train")
        build_store(folder, pairs, encoder, skipped=lambda: pairs.skipped, **common)

    def from_lines(folder):
        files = train_line_files(data)
        build_store_from_lines(
            folder, files, encoder, max_pairs=data.max_train_pairs, workers=workers, **common
        )

    return _outcome(from_pairs, tmp_path / "pairs"), _outcome(from_lines, tmp_path / "lines")


@pytest.fixture(params=[1, 2], ids=["1-worker", "2-workers"])
def workers(request, monkeypatch):
    monkeypatch.setattr("attnkit.nmt.data.store_build.CHUNK_PAIRS", 3)  # chunks of 3 lines
    return request.param


@pytest.mark.parametrize("max_train_pairs", [None, 1, 5, 8])
def test_parallel_files_give_the_store_of_the_pair_reader(tmp_path, tok, workers, max_train_pairs):
    pairs, lines = _both(
        tmp_path, _parallel(tmp_path, max_train_pairs=max_train_pairs), tok, workers
    )
    assert pairs[0] == "ok" and lines == pairs


def test_gzipped_files_and_a_tsv_give_the_store_of_the_pair_reader(tmp_path, tok, workers):
    (tmp_path / "gz").mkdir()
    pairs, lines = _both(tmp_path / "gz", _parallel(tmp_path / "gz", gz=True), tok, workers)
    assert pairs[0] == "ok" and lines == pairs
    rows = [f"{s}\t{t}" for s, t in zip(SOURCE, TARGET, strict=True)]
    rows[3] = ""  # a blank line: two blank cells
    pairs, lines = _both(tmp_path, _tsv(tmp_path, rows), tok, workers)
    assert pairs[0] == "ok" and lines == pairs


def _nul(lines, number):
    raw = (("\n".join(lines) + "\n").encode("utf-8")).split(b"\n")
    raw[number - 1] = raw[number - 1][:2] + b"\x00" + raw[number - 1][2:]
    return b"\n".join(raw)


def _bad_utf8(lines, number):
    raw = (("\n".join(lines) + "\n").encode("utf-8")).split(b"\n")
    raw[number - 1] = raw[number - 1][:2] + b"\xff\xfe" + raw[number - 1][2:]
    return b"\n".join(raw)


@pytest.mark.parametrize(
    ("src", "tgt", "expected"),
    [
        (_nul(SOURCE, 5), TARGET, r"s, line 5: a NUL byte \(U\+0000\)"),
        ("\n".join(SOURCE[2:]).encode("utf-16-le"), TARGET, r"s, line 1: a NUL byte"),  # no BOM
        (_nul(SOURCE, 12), TARGET[:-3], r"s, line 12: a NUL byte"),  # while counting
        (_bad_utf8(SOURCE, 8), TARGET, r"s, line 8: invalid UTF-8 at byte 2"),
        (SOURCE, _bad_utf8(TARGET, 1), r"t, line 1: invalid UTF-8 at byte 2"),
        (SOURCE[:-2], TARGET, r"line counts differ: .*s has 11 lines but .*t has 13"),
        (SOURCE, TARGET[:-5], r"line counts differ: .*s has 13 lines but .*t has 8"),
        (_bad_utf8(SOURCE, 12), TARGET[:-3], r"s, line 12: invalid UTF-8"),  # while counting
    ],
    ids=[
        "nul",
        "utf16-without-bom",
        "nul-in-the-rest",
        "utf8-src",
        "utf8-tgt-line-1",
        "src-shorter",
        "tgt-shorter",
        "utf8-in-the-rest",
    ],
)
def test_bad_files_give_the_errors_of_the_pair_reader(tmp_path, tok, workers, src, tgt, expected):
    pairs, lines = _both(tmp_path, _parallel(tmp_path, src, tgt), tok, workers)
    assert pairs[0] == "error" and lines == pairs and re.search(expected, lines[2])


def test_a_tsv_line_without_a_tab_and_a_corrupt_gzip_are_the_pair_readers_errors(
    tmp_path, tok, workers
):
    rows = [f"{s}\t{t}" for s, t in zip(SOURCE, TARGET, strict=True)]
    rows[6] = "no tab here"
    pairs, lines = _both(tmp_path, _tsv(tmp_path, rows), tok, workers)
    assert lines == pairs and "train.tsv, line 7: expected at least 2 tab-separated" in lines[2]
    (tmp_path / "gz").mkdir()
    data = _parallel(tmp_path / "gz", gz=True)
    (tmp_path / "gz" / "t").write_bytes((tmp_path / "gz" / "t").read_bytes()[:30])
    pairs, lines = _both(tmp_path / "gz", data, tok, workers)
    assert lines == pairs and "cannot read after line" in lines[2]


def test_a_bad_line_after_the_first_n_pairs_is_never_read(tmp_path, tok, workers):
    data = _parallel(tmp_path, _bad_utf8(SOURCE, 11), TARGET[:-1], max_train_pairs=6)
    pairs, lines = _both(tmp_path, data, tok, workers)
    assert pairs[0] == "ok" and lines == pairs
