"""The token store: ids read back through the memory map equal direct tokenization; builds
that are cut short, damaged or stale are detected and rebuilt; concurrent builders agree."""

import json
import multiprocessing
import os
import random
import re

import numpy as np
import pytest
import torch

from attnkit.atomic import WriteError
from attnkit.nmt.data.batching import Examples, bucket_batches, make_batch
from attnkit.nmt.data.chunk_packing import PairEncoder
from attnkit.nmt.data.corpus import bundled_multi30k
from attnkit.nmt.data.store import TokenStore, file_identity, fingerprint, id_dtype
from attnkit.nmt.data.store_build import build_store, open_or_build
from attnkit.nmt.data.tokenizer import SentencePieceTokenizer, WordTokenizer


@pytest.fixture(scope="module")
def corpus():
    return bundled_multi30k("valid")  # 1,014 real caption pairs


@pytest.fixture(scope="module")
def spm(corpus):
    return SentencePieceTokenizer.train([*corpus.src, *corpus.tgt], vocab_size=500)


def _build(folder, pairs, tok, key="a", workers=1, **limits):
    return build_store(
        folder,
        iter(pairs),
        PairEncoder(tok.encode_batch, tok.encode_batch),
        vocab_size=tok.vocab_size,
        fingerprint=fingerprint({"key": key}),
        workers=workers,
        **limits,
    )


def test_ids_from_the_store_equal_direct_tokenization(tmp_path, corpus, spm):
    pairs = list(zip(corpus.src, corpus.tgt, strict=True))
    store = _build(tmp_path / "store", pairs, spm)
    reopened = TokenStore.open(tmp_path / "store")
    assert len(reopened) == len(pairs) == reopened.counts.pairs
    for i in random.Random(0).sample(range(len(pairs)), 200):
        assert reopened.src[i] == spm.encode(pairs[i][0])
        assert reopened.tgt[i] == spm.encode(pairs[i][1])
    assert reopened.src[-1] == spm.encode(pairs[-1][0])
    assert isinstance(reopened.src.flat, np.memmap) and reopened.src.flat.dtype == np.uint16
    lengths = [len(spm.encode(s)) for s, _ in pairs]
    assert reopened.src.lengths().tolist() == lengths
    assert store.counts.src_tokens == sum(lengths)


def test_the_lengths_are_stored_and_mapped_beside_the_offsets(tmp_path, corpus, spm):
    pairs = list(zip(corpus.src, corpus.tgt, strict=True))
    store = _build(tmp_path / "store", pairs, spm)
    for side in (store.src, store.tgt):
        lengths = side.lengths()
        assert isinstance(lengths, np.memmap) and lengths.dtype == np.uint16
        assert lengths.tolist() == np.diff(side.offsets).tolist()
    tok = WordTokenizer.train(["a b"])
    long = _build(tmp_path / "long", [("a " * 70_000, "b"), ("a", "b b")], tok)
    assert long.src.lengths().dtype == np.uint32 and long.src.lengths().tolist() == [70_000, 1]
    assert long.tgt.lengths().tolist() == [1, 2]


def test_damaged_lengths_are_detected_and_the_store_rebuilt(tmp_path):
    tok = WordTokenizer.train(["a b"])
    _rebuild_reason(tmp_path, tok)
    lengths = tmp_path / "s" / "src.lengths"
    lengths.write_bytes(np.array([7], np.uint16).tobytes())  # right size, wrong sum
    with pytest.raises(ValueError, match=r"src\.lengths: does not add up to src\.ids"):
        TokenStore.open(tmp_path / "s")
    store, built, heard = _rebuild_reason(tmp_path, tok)
    assert built == [1] and "damaged" in heard[0] and store.src.lengths().tolist() == [1]


def test_a_store_of_the_first_layout_is_rebuilt_saying_so(tmp_path):
    tok = WordTokenizer.train(["a b"])
    _rebuild_reason(tmp_path, tok)
    meta = tmp_path / "s" / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "version": 1}))
    (tmp_path / "s" / "src.lengths").unlink()
    store, built, heard = _rebuild_reason(tmp_path, tok)
    assert built == [1] and "another layout" in heard[0] and "v1" in heard[0]
    assert store.src.lengths().tolist() == [1]


def test_sentences_are_read_from_the_files_and_a_file_cut_since_is_named(tmp_path, corpus, spm):
    pairs = list(zip(corpus.src, corpus.tgt, strict=True))
    store = _build(tmp_path / "store", pairs, spm)
    for i in (0, 17, len(pairs) - 1):  # read with pread, as the map would give them
        assert (
            store.tgt[i] == store.tgt.flat[store.tgt.offsets[i] : store.tgt.offsets[i + 1]].tolist()
        )
    ids = tmp_path / "store" / "tgt.ids"
    ids.write_bytes(ids.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"tgt\.ids: 0 bytes at byte \d+, expected \d+"):
        store.tgt[len(pairs) - 1]


def test_length_limits_drop_pairs_and_count_them(tmp_path):
    tok = WordTokenizer.train(["a b c d e"])
    pairs = [("a b", "c"), ("a b c d", "e"), ("a", "b c d e"), ("e", "d")]
    store = _build(tmp_path / "s", pairs, tok, max_src_len=3, max_tgt_len=3, skipped=5)
    assert (store.counts.pairs, store.counts.dropped, store.counts.skipped) == (2, 2, 5)
    assert [store.src[0], store.src[1]] == [tok.encode("a b"), tok.encode("e")]


def test_batches_from_a_store_equal_batches_from_lists(tmp_path, corpus, spm):
    pairs = list(zip(corpus.src, corpus.tgt, strict=True))
    store = _build(tmp_path / "store", pairs, spm)
    lists = Examples([spm.encode(s) for s, _ in pairs], [spm.encode(t) for _, t in pairs])
    mapped = Examples(store.src, store.tgt)
    a = bucket_batches(lists, 16, generator=torch.Generator().manual_seed(1))
    b = bucket_batches(mapped, 16, generator=torch.Generator().manual_seed(1))
    assert [x.tolist() for x in a] == [x.tolist() for x in b]
    for field in ("src", "src_lengths", "tgt_in", "tgt_out"):
        assert torch.equal(
            getattr(make_batch(lists, a[3]), field), getattr(make_batch(mapped, b[3]), field)
        )


def test_the_smallest_dtype_that_holds_the_vocabulary():
    assert id_dtype(65_536) == np.uint16 and id_dtype(65_537) == np.uint32


def test_a_build_that_fails_leaves_the_old_store_and_no_temporary_folder(tmp_path):
    tok = WordTokenizer.train(["a b"])
    old = _build(tmp_path / "s", [("a", "b")], tok)

    def broken():
        yield ("a", "b")
        raise ValueError("train.de, line 2: invalid UTF-8")

    with pytest.raises(ValueError, match="line 2"):
        _build(tmp_path / "s", broken(), tok, key="b")
    assert TokenStore.open(tmp_path / "s").fingerprint == old.fingerprint
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def _rebuild_reason(tmp_path, tok, key="a"):
    heard = []
    built = []

    def build():
        built.append(1)
        return _build(tmp_path / "s", [("a", "b")], tok, key=key)

    store = open_or_build(tmp_path / "s", fingerprint({"key": key}), build, heard.append)
    return store, built, heard


def test_a_matching_store_is_reused_and_a_changed_one_rebuilt(tmp_path):
    tok = WordTokenizer.train(["a b"])
    _, built, heard = _rebuild_reason(tmp_path, tok)
    assert built == [1] and heard == []  # the first build says nothing
    _, built, heard = _rebuild_reason(tmp_path, tok)
    assert built == [] and heard == []
    _, built, heard = _rebuild_reason(tmp_path, tok, key="other tokenizer")
    assert built == [1] and "changed" in heard[0]


def test_a_build_cut_short_and_a_damaged_store_are_rebuilt(tmp_path):
    tok = WordTokenizer.train(["a b"])
    _rebuild_reason(tmp_path, tok)
    (tmp_path / "s" / "meta.json").unlink()  # as if killed before the record was written
    store, built, heard = _rebuild_reason(tmp_path, tok)
    assert built == [1] and "cut short" in heard[0] and store.src[0] == tok.encode("a")
    ids = tmp_path / "s" / "tgt.ids"
    ids.write_bytes(ids.read_bytes()[:1])
    store, built, heard = _rebuild_reason(tmp_path, tok)
    assert built == [1] and "damaged" in heard[0] and "tgt.ids" in heard[0]
    assert store.tgt[0] == tok.encode("b")


def test_a_missing_file_of_the_store_is_named_as_missing(tmp_path):
    tok = WordTokenizer.train(["a b"])
    _rebuild_reason(tmp_path, tok)
    (tmp_path / "s" / "src.ids").unlink()  # deleted by hand
    with pytest.raises(ValueError, match=r"src\.ids: missing, expected 2 bytes$"):
        TokenStore.open(tmp_path / "s")


def test_a_record_of_another_format_is_an_error_naming_it(tmp_path):
    tok = WordTokenizer.train(["a b"])
    _build(tmp_path / "s", [("a", "b")], tok)
    meta = tmp_path / "s" / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "version": 99}))
    with pytest.raises(ValueError, match="meta.json"):
        TokenStore.open(tmp_path / "s")


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("dtype", "bogus", "dtype must be one of uint16, uint32, got 'bogus'"),
        ("dtype", "int16", "dtype must be one of uint16, uint32, got 'int16'"),
        ("length_dtype", ["x"], "length_dtype must be one of uint16, uint32, got ['x']"),
        ("pairs", "1", "pairs must be a whole number >= 0, got '1'"),
        ("src_tokens", None, "src_tokens must be a whole number >= 0, got None"),
    ],
)
def test_a_record_with_fields_no_build_writes_is_damaged_and_rebuilt(
    tmp_path, key, value, expected
):
    # numpy's TypeError ("data type 'bogus' not understood", "can only concatenate str")
    # ended the run with a traceback where a damaged store is rebuilt; int16 ids of the
    # width of uint16 were read as they were, ids past 32,767 negative
    tok = WordTokenizer.train(["a b"])
    _rebuild_reason(tmp_path, tok)
    meta = tmp_path / "s" / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), key: value}))
    with pytest.raises(ValueError, match=re.escape(expected)):
        TokenStore.open(tmp_path / "s")
    store, built, heard = _rebuild_reason(tmp_path, tok)
    assert built == [1] and "damaged" in heard[0] and store.tgt[0] == tok.encode("b")


def _concurrent_build(folder, log):
    tok = WordTokenizer.train(["a b c"])
    pairs = [("a b", "c")] * 50_000

    def build():
        with open(log, "a") as handle:
            handle.write("built\n")
        return _build(folder, pairs, tok)

    store = open_or_build(folder, fingerprint({"key": "a"}), build)
    assert store.src[49_999] == tok.encode("a b")


def test_two_concurrent_builders_build_once_and_both_read_the_store(tmp_path):
    context = multiprocessing.get_context("fork")
    log = tmp_path / "builds.log"
    workers = [
        context.Process(target=_concurrent_build, args=(tmp_path / "s", log)) for _ in range(2)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert [w.exitcode for w in workers] == [0, 0]
    assert log.read_text() == "built\n"
    assert len(TokenStore.open(tmp_path / "s")) == 50_000


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_store_built_on_worker_processes_is_byte_for_byte_the_serial_one(
    tmp_path, corpus, spm, monkeypatch
):
    monkeypatch.setattr("attnkit.nmt.data.store_build.CHUNK_PAIRS", 100)  # 11 chunks, 10 in workers
    pairs = list(zip(corpus.src, corpus.tgt, strict=True))
    serial = _build(tmp_path / "serial", pairs, spm, max_src_len=12)
    parallel = _build(tmp_path / "parallel", pairs, spm, max_src_len=12, workers=2)
    assert 0 < parallel.counts.dropped == serial.counts.dropped
    assert _files(tmp_path / "parallel") == _files(tmp_path / "serial")


def test_an_error_while_encoding_in_a_worker_leaves_no_store(tmp_path, monkeypatch):
    monkeypatch.setattr("attnkit.nmt.data.store_build.CHUNK_PAIRS", 2)
    tok = WordTokenizer(["<pad>", "<unk>", "<s>", "</s>", "a", "b"])
    pairs = [("a", "b")] * 5 + [("a", None)]  # the last chunk cannot be encoded
    with pytest.raises(TypeError, match="not None"):
        _build(tmp_path / "s", pairs, tok, workers=2)
    assert list(tmp_path.iterdir()) == []


def test_a_sentencepiece_tokenizer_pickles_as_its_model(spm, corpus):
    import pickle

    copy = pickle.loads(pickle.dumps(spm))
    assert copy.to_bytes() == spm.to_bytes() and copy.name == spm.name
    assert copy.encode_batch(corpus.src[:20]) == spm.encode_batch(corpus.src[:20])


def test_a_store_build_on_a_full_disk_is_a_write_error_naming_the_store(tmp_path, monkeypatch):
    tok = WordTokenizer.train(["a b"])
    old = _build(tmp_path / "s", [("a", "b")], tok)
    real_open = open

    def full_disk_open(path, mode="r", *args, **kwargs):  # every write: ENOSPC
        return real_open("/dev/full", mode, *args, **kwargs) if "w" in mode else real_open(path)

    monkeypatch.setattr("attnkit.nmt.data.store_build.open", full_disk_open, raising=False)
    with pytest.raises(WriteError) as caught:
        _build(tmp_path / "s", [("a", "b")] * 3, tok, key="b")
    assert str(caught.value) == f"cannot write {tmp_path / 's'}: No space left on device"
    assert TokenStore.open(tmp_path / "s").fingerprint == old.fingerprint
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_store_folder_has_the_mode_mkdir_gives_not_a_private_one(tmp_path):
    tok = WordTokenizer.train(["a b"])
    old = os.umask(0o022)
    try:
        _build(tmp_path / "store", [("a b", "b a")], tok)
    finally:
        os.umask(old)
    assert (tmp_path / "store").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "store" / "meta.json").stat().st_mode & 0o777 == 0o644


def test_training_data_in_a_named_pipe_is_refused_before_any_reading(tmp_path):
    os.mkfifo(tmp_path / "train.de")  # stat only: nothing opens it, so nothing blocks
    with pytest.raises(ValueError, match=r"train\.de: training data must be a regular file"):
        file_identity(tmp_path / "train.de")
    (tmp_path / "train.en").write_text("a\n")
    assert file_identity(tmp_path / "train.en")["bytes"] == 2


def test_a_missing_or_folder_training_file_is_named_as_the_other_corpus_files_are(tmp_path):
    with pytest.raises(FileNotFoundError) as caught:
        file_identity(tmp_path / "train.de")
    assert str(caught.value) == f"corpus file not found: {tmp_path / 'train.de'}"
    with pytest.raises(FileNotFoundError) as caught:
        file_identity(tmp_path)
    assert str(caught.value) == f"corpus file {tmp_path} is a folder, not a file"


def _two_ids(texts):
    return [[4, 5]] * len(texts)


def test_a_build_holds_nothing_per_pair_in_memory(tmp_path, monkeypatch):
    # the offsets and lengths go to disk chunk by chunk: before, every pair's lengths were
    # kept (int64) and turned into offsets at the end, about 48 bytes a pair at the peak
    import tracemalloc

    import attnkit.nmt.data.store_build as store_module

    monkeypatch.setattr(store_module, "CHUNK_PAIRS", 1000)
    pairs = 100_000
    tracemalloc.start()
    try:
        store = build_store(
            tmp_path / "store",
            (("a b", "c d") for _ in range(pairs)),
            PairEncoder(_two_ids, _two_ids),
            vocab_size=8,
            fingerprint="f",
            max_src_len=1 << 20,
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10 * pairs  # a chunk's worth (about 200 KB), not 4.8 MB
    assert (len(store), store.counts.src_tokens) == (pairs, 2 * pairs)
    assert store.src.lengths().dtype == np.uint16 and store.src[pairs - 1] == [4, 5]
    assert store.tgt.offsets[-3:].tolist() == [2 * pairs - 4, 2 * pairs - 2, 2 * pairs]
