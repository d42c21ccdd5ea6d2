"""The training split for large corpora: a reservoir sample for the tokenizer, and a token
store whose pairs, counts and reuse follow the files and the tokenizer."""

import os
from collections import Counter

import pytest

from attnkit.nmt.config import DataConfig
from attnkit.nmt.data.batching import encode_examples
from attnkit.nmt.data.corpus import load_split
from attnkit.nmt.data.tokenizer import WordTokenizer
from attnkit.nmt.data.training_split import open_training_store, sample_pairs


def test_a_small_corpus_is_its_own_sample_in_order():
    pairs = [(f"s{i}", f"t{i}") for i in range(10)]
    sample = sample_pairs(iter(pairs), 10, seed=0)
    assert (sample.src, sample.tgt, sample.total) == (
        [s for s, _ in pairs],
        [t for _, t in pairs],
        10,
    )


def test_a_large_corpus_gives_a_bounded_seeded_uniform_sample():
    pairs = [(f"s{i}", f"t{i}") for i in range(1000)]
    a = sample_pairs(iter(pairs), 100, seed=3)
    assert len(a.src) == 100 and a.total == 1000
    assert a.src == sample_pairs(iter(pairs), 100, seed=3).src
    assert a.src != sample_pairs(iter(pairs), 100, seed=4).src
    assert all(s[1:] == t[1:] for s, t in zip(a.src, a.tgt, strict=True))  # pairs stay pairs
    # each pair is kept with probability 1/10: count the draws from each tenth of the corpus
    tenths = Counter()
    for seed in range(200):
        tenths.update(int(s[1:]) // 100 for s in sample_pairs(iter(pairs), 100, seed).src)
    assert all(1700 < n < 2300 for n in tenths.values()), tenths  # 2000 expected each


def test_sample_size_must_be_positive():
    with pytest.raises(ValueError, match="size must be > 0"):
        sample_pairs(iter([]), 0, seed=0)


@pytest.fixture
def tsv_data(tmp_path):
    lines = [
        "ein Haus\ta house",
        "\t",
        "ein sehr sehr langer Satz\ta long one",
        "der Hund\tthe dog",
    ]
    path = tmp_path / "train.tsv"
    path.write_text("\n".join(lines) + "\n")
    valid = tmp_path / "valid.tsv"
    valid.write_text("ein Haus\ta house\n")
    return DataConfig(train={"tsv": str(path)}, valid={"tsv": str(valid)}, max_src_len=3)


def test_the_store_holds_what_the_in_memory_path_keeps(tmp_path, tsv_data):
    corpus = load_split(tsv_data, "train")
    tok = WordTokenizer.train([*corpus.src, *corpus.tgt])
    expected, dropped = encode_examples(
        corpus.src, corpus.tgt, tok, tok, max_src_len=3, max_tgt_len=50
    )
    store = open_training_store(tsv_data, tmp_path / "store", tok, tok)
    assert [store.src[i] for i in range(len(store))] == expected.src
    assert [store.tgt[i] for i in range(len(store))] == expected.tgt
    assert (store.counts.dropped, store.counts.skipped) == (dropped, corpus.skipped) == (1, 1)


def test_a_changed_file_or_tokenizer_rebuilds_the_store(tmp_path, tsv_data):
    tok = WordTokenizer.train(["ein Haus der Hund a house the dog"])
    heard = []
    open_training_store(tsv_data, tmp_path / "store", tok, tok, echo=heard.append)
    open_training_store(tsv_data, tmp_path / "store", tok, tok, echo=heard.append)
    assert heard == []
    path = tsv_data.train.tsv
    with open(path, "a") as handle:
        handle.write("das Haus\tthe house\n")
    os.utime(path, ns=(1, 1))
    store = open_training_store(tsv_data, tmp_path / "store", tok, tok, echo=heard.append)
    assert len(heard) == 1 and "changed" in heard[0] and len(store) == 3
    other = WordTokenizer.train(["Haus house"])
    store = open_training_store(tsv_data, tmp_path / "store", other, other, echo=heard.append)
    assert len(heard) == 2 and store.src[0] == other.encode("ein Haus")


def test_a_store_keyed_by_the_whole_data_section_is_still_reused(tmp_path, tsv_data):
    # stores built before the key left out valid/test were keyed by the whole section
    from attnkit.nmt.data.training_split import store_fingerprint

    tok = WordTokenizer.train(["ein Haus der Hund a house the dog"])
    old = store_fingerprint(tsv_data, tok, tok, legacy=True)
    assert old != store_fingerprint(tsv_data, tok, tok)
    open_training_store(tsv_data, tmp_path / "store", tok, tok)
    meta = tmp_path / "store" / "meta.json"
    meta.write_text(meta.read_text().replace(store_fingerprint(tsv_data, tok, tok), old))
    heard = []
    store = open_training_store(tsv_data, tmp_path / "store", tok, tok, echo=heard.append)
    assert heard == [] and store.fingerprint == old


def test_a_training_file_gone_leaves_the_built_store_as_it_is(tmp_path, tsv_data):
    # a scratch disk purged after prepare: the store was 'corpus file not found', unusable
    tok = WordTokenizer.train(["ein Haus der Hund a house the dog"])
    built = open_training_store(tsv_data, tmp_path / "store", tok, tok)
    os.remove(tsv_data.train.tsv)
    heard = []
    store = open_training_store(tsv_data, tmp_path / "store", tok, tok, echo=heard.append)
    assert [store.src[i] for i in range(len(store))] == [built.src[i] for i in range(2)]
    assert store.counts == built.counts and store.fingerprint == built.fingerprint
    assert heard == [
        f"note: corpus file not found: {tsv_data.train.tsv}; the token store "
        f"{tmp_path / 'store'} built from it is used as it is (2 pairs): without the file "
        "it can be neither checked nor rebuilt"
    ]
    with pytest.raises(FileNotFoundError, match="corpus file not found: .*train.tsv"):
        open_training_store(tsv_data, tmp_path / "other", tok, tok)  # nothing to fall back on
