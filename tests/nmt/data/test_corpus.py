"""Reading parallel corpora: files, gzip, TSV, bundled Multi30k, clear errors."""

import gzip
import logging

import pytest

from attnkit.nmt.config import DataConfig
from attnkit.nmt.data.corpus import (
    bundled_multi30k,
    load_split,
    read_lines,
    read_parallel,
    read_tsv,
)


def write(path, text, *, gz=False):
    data = text.encode("utf-8") if isinstance(text, str) else text
    if gz:
        with gzip.open(path, "wb") as handle:
            handle.write(data)
    else:
        path.write_bytes(data)
    return path


def test_reads_plain_and_gzipped_files_alike(tmp_path):
    plain = write(tmp_path / "a.txt", "eins\nzwei\r\ndrei\n")
    packed = write(tmp_path / "b.txt.gz", "one\ntwo\nthree\n", gz=True)
    corpus = read_parallel(plain, packed)
    assert corpus.src == ["eins", "zwei", "drei"]
    assert corpus.tgt == ["one", "two", "three"]
    assert corpus.skipped == 0


def test_empty_lines_are_skipped_and_counted(tmp_path, caplog):
    src = write(tmp_path / "s", "a\n\nc\nd\n")
    tgt = write(tmp_path / "t", "A\nB\n  \nD\n")
    with caplog.at_level(logging.INFO, logger="attnkit.nmt.data.corpus"):
        corpus = read_parallel(src, tgt)
    assert corpus.src == ["a", "d"] and corpus.tgt == ["A", "D"]
    assert corpus.skipped == 2
    assert "skipped 2 pair(s)" in caplog.text


def test_lines_with_only_invisible_characters_are_empty_too(tmp_path):
    src = write(tmp_path / "s", "a\n\ufeff\n\u200b\n\u200e \nb\n")
    tgt = write(tmp_path / "t", "A\nB\nC\nD\n\u200b\n")
    corpus = read_parallel(src, tgt)
    assert corpus.src == ["a"] and corpus.tgt == ["A"] and corpus.skipped == 4
    tsv = write(tmp_path / "p.tsv", "a\tA\n\u200b\n\ufeff\tB\n")
    assert read_tsv(tsv).src == ["a"] and read_tsv(tsv).skipped == 2


def test_keep_empty_keeps_every_line_with_blank_sides_as_empty_strings(tmp_path):
    src = write(tmp_path / "s", "a\n\n\u200b\nd\n")
    tgt = write(tmp_path / "t.gz", " A \nB\nC\n\ufeff\n", gz=True)
    corpus = read_parallel(src, tgt, keep_empty=True)
    assert corpus.src == ["a", "", "", "d"] and corpus.tgt == ["A", "B", "C", ""]
    assert corpus.skipped == 0
    tsv = write(tmp_path / "p.tsv", "a\tA\n\n \t B\n")
    kept = read_tsv(tsv, keep_empty=True)
    assert kept.src == ["a", "", ""] and kept.tgt == ["A", "", "B"]


def test_mismatched_line_counts_name_both_files_and_the_line(tmp_path):
    src = write(tmp_path / "src.txt", "a\nb\nc\n")
    tgt = write(tmp_path / "tgt.txt", "A\nB\n")
    with pytest.raises(ValueError, match=r"src\.txt has 3 lines but .*tgt\.txt has 2"):
        read_parallel(src, tgt)
    with pytest.raises(ValueError, match=r"src\.txt, line 3 has no partner"):
        read_parallel(tgt, src)


def test_a_lone_cr_file_read_in_memory_is_named_too(tmp_path):
    src = write(tmp_path / "src.txt", "a\rb\rc\r")
    tgt = write(tmp_path / "tgt.txt", "A\nB\nC\n")
    with pytest.raises(ValueError, match=r"src\.txt ends its lines with a lone CR"):
        read_parallel(src, tgt)


def test_invalid_utf8_names_file_and_line(tmp_path):
    bad = write(tmp_path / "bad.de", b"gut\nauch gut\nschlecht \xff\xfe\n")
    with pytest.raises(ValueError, match=r"bad\.de, line 3: invalid UTF-8"):
        read_lines(bad)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        read_lines(tmp_path / "nope.txt")


def test_corrupt_gzip_is_a_clear_error(tmp_path):
    good = gzip.compress(b"line one\nline two\n" * 1000)
    bad = write(tmp_path / "cut.gz", good[: len(good) // 2])
    with pytest.raises(ValueError, match=r"cut\.gz: cannot read"):
        read_lines(bad)


def test_tsv_columns_choose_the_direction(tmp_path):
    tsv = write(tmp_path / "pairs.tsv", "Go.\tVa !\nRun!\tCours !\n\n")
    assert read_tsv(tsv).src == ["Go.", "Run!"]
    flipped = read_tsv(tsv, src_column=1, tgt_column=0)
    assert flipped.src == ["Va !", "Cours !"] and flipped.tgt == ["Go.", "Run!"]


def test_tsv_with_too_few_columns_names_the_line(tmp_path):
    tsv = write(tmp_path / "pairs.tsv", "a\tb\nonly one\n")
    with pytest.raises(ValueError, match=r"pairs\.tsv, line 2: expected at least 2"):
        read_tsv(tsv)


def test_bundled_multi30k_splits_and_direction():
    test = bundled_multi30k("test", "de", "en")
    assert len(test) == 1000
    valid = bundled_multi30k("valid", "en", "de")
    assert len(valid) == 1014
    assert all(s and t for s, t in zip(valid.src, valid.tgt, strict=True))
    train = bundled_multi30k("train")
    assert len(train) == 29000
    assert train.src[0] == "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."
    assert train.tgt[0] == "Two young, White males are outside near many bushes."


def test_bundled_multi30k_rejects_unknown_language():
    with pytest.raises(ValueError, match="language must be one of"):
        bundled_multi30k("train", "fr", "en")


def _holdout_data(tmp_path, holdout: int, **extra) -> DataConfig:
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"s{i}\tt{i}\n" for i in range(10)))
    return DataConfig(train={"tsv": str(path)}, valid_holdout=holdout, **extra)


def test_valid_holdout_takes_evenly_spread_pairs_out_of_training(tmp_path):
    data = _holdout_data(tmp_path, 3)
    train, valid = load_split(data, "train"), load_split(data, "valid")
    assert valid.src == ["s0", "s3", "s6"] and valid.tgt == ["t0", "t3", "t6"]
    assert len(train) == 7 and not set(train.src) & set(valid.src)


def test_valid_holdout_is_the_same_pairs_when_read_for_evaluation(tmp_path):
    # evaluate/inspect read a split with keep_empty=True; a holdout must still be the
    # pairs training held out, not every n-th line counting blank ones, which shifts
    # the stride onto pairs the model trained on
    path = tmp_path / "pairs.tsv"
    lines = [f"s{i}\tt{i}" for i in range(10)]
    lines[1] = "\t"  # a blank pair: skipped by training
    path.write_text("".join(line + "\n" for line in lines))
    data = DataConfig(train={"tsv": str(path)}, valid_holdout=3)
    train, valid = load_split(data, "train"), load_split(data, "valid")
    evaluated = load_split(data, "valid", keep_empty=True)
    assert valid.src == ["s0", "s4", "s7"]
    assert evaluated.src == valid.src and evaluated.tgt == valid.tgt
    assert not set(train.src) & set(evaluated.src)


def test_valid_holdout_needs_train_files_only_and_room_for_training(tmp_path):
    with pytest.raises(ValueError, match="valid_holdout needs 'train' files and no 'valid'"):
        _holdout_data(tmp_path, 3, valid={"tsv": "other.tsv"})
    with pytest.raises(ValueError, match="data.valid_holdout=10 leaves no training pairs"):
        load_split(_holdout_data(tmp_path, 10), "train")
