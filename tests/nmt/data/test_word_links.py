"""Guided-alignment labels: Pharaoh lines, words onto pieces, the token store's links and
their filtering, fingerprint, and errors that name the file and the line."""

import os

import pytest

from attnkit.nmt.config import DataConfig
from attnkit.nmt.data.batching import Examples, make_batch
from attnkit.nmt.data.corpus import stream_split
from attnkit.nmt.data.tokenizer import SentencePieceTokenizer, WordTokenizer
from attnkit.nmt.data.training_split import open_training_store, store_fingerprint
from attnkit.nmt.data.word_links import (
    AlignedEncoder,
    encode_words,
    parse_pharaoh,
    range_links,
    split_word_pieces,
)
from attnkit.nmt.vocab_ids import UNK


def test_pharaoh_lines_parse_sorted_and_deduplicated():
    assert parse_pharaoh("2-1 0-0  0-0 1-2", "a.txt", 3, 3, 3) == [(0, 0), (1, 2), (2, 1)]
    assert parse_pharaoh("", "a.txt", 1, 0, 0) == []


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("0-0 1p1", r"al\.txt, line 7: '1p1' is not a link 'i-j'"),
        ("0-0 -1-2", r"al\.txt, line 7: '-1-2' is not a link"),
        ("0-0 x", r"al\.txt, line 7: 'x' is not a link"),
        ("0-\u00b9", r"al\.txt, line 7: '0-\u00b9' is not a link"),
        ("2-0", r"al\.txt, line 7: link '2-0' is outside the sentence pair \(2 source words"),
        ("0-3", r"al\.txt, line 7: link '0-3' is outside .*3 target words"),
    ],
)
def test_a_malformed_or_out_of_range_link_names_file_and_line(line, message):
    with pytest.raises(ValueError, match=message):
        parse_pharaoh(line, "al.txt", 7, 2, 3)


def test_words_map_onto_pieces_and_share_their_links():
    pieces = {"un": [5], "chat": [6, 7], "noir": [8, 9, 10], "a": [11], "black": [12], "cat": [13]}
    ids, word_of = encode_words(lambda ws: [pieces[w] for w in ws], ["un", "chat", "noir"])
    assert (ids, word_of) == ([5, 6, 7, 8, 9, 10], [0, 1, 1, 2, 2, 2])
    # source: a black cat (one piece each); target: un chat noir (1 + 2 + 3 pieces)
    tgt_pieces = [range(0, 1), range(1, 3), range(3, 6)]  # the words of word_of above
    links = range_links(
        [(0, 0), (1, 2), (2, 1)], [range(0, 1), range(1, 2), range(2, 3)], tgt_pieces
    )
    assert links == [(0, 0), (1, 3), (1, 4), (1, 5), (2, 1), (2, 2)]
    # a word without pieces keeps one <unk>, so indices stay in step
    ids, word_of = encode_words(
        lambda ws: [[] if w == "\u200b" else [4] for w in ws], ["a", "\u200b"]
    )
    assert (ids, word_of) == ([4, UNK], [0, 1])


@pytest.fixture
def aligned_data(tmp_path):
    lines = [
        "ein Haus\ta house",  # kept
        "\t",  # blank: skipped by the reader
        "ein sehr sehr langer Satz\ta long one",  # 5 source words > max_src_len 3: dropped
        "der Hund\tthe dog",  # kept, no alignment
        "Hund\tdog",  # kept
    ]
    path = tmp_path / "train.tsv"
    path.write_text("\n".join(lines) + "\n")
    valid = tmp_path / "valid.tsv"
    valid.write_text("ein Haus\ta house\n")
    align = tmp_path / "train.align"
    align.write_text("0-0 1-1\n\n0-0 4-2\n\n0-0\n")
    data = DataConfig(train={"tsv": str(path)}, valid={"tsv": str(valid)}, max_src_len=3)
    tok = WordTokenizer.train(["ein Haus der Hund sehr langer Satz a house the dog long one"])
    return data, align, tok


def test_the_store_keeps_the_links_of_the_pairs_it_keeps(tmp_path, aligned_data):
    data, align, tok = aligned_data
    store = open_training_store(data, tmp_path / "store", tok, tok, alignments=align)
    assert len(store) == 3 and (store.counts.skipped, store.counts.dropped) == (1, 1)
    assert [store.links[i] for i in range(3)] == [[0, 0, 1, 1], [], [0, 0]]
    batch = make_batch(Examples(store.src, store.tgt, store.links), [0, 1, 2])
    assert batch.align.shape == (3, 3, 3)  # (B, T incl. </s>, S incl. </s>)
    assert batch.align[0].tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 0]]  # </s> row/col empty
    assert batch.align[1].sum() == 0 and batch.align[2].tolist()[0] == [1, 0, 0]
    plain = open_training_store(data, tmp_path / "plain", tok, tok)
    assert plain.links is None and [plain.src[i] for i in range(3)] == [
        store.src[i] for i in range(3)
    ]


def test_a_changed_alignment_file_changes_the_fingerprint_and_rebuilds(tmp_path, aligned_data):
    data, align, tok = aligned_data
    first = store_fingerprint(data, tok, tok, align)
    assert first != store_fingerprint(data, tok, tok)
    heard = []
    open_training_store(data, tmp_path / "store", tok, tok, alignments=align, echo=heard.append)
    align.write_text("1-1 0-0\n\n0-0 4-2\n\n0-0\n")
    os.utime(align, ns=(1, 1))
    assert store_fingerprint(data, tok, tok, align) != first
    store = open_training_store(
        data, tmp_path / "store", tok, tok, alignments=align, echo=heard.append
    )
    assert len(heard) == 1 and "rebuilding" in heard[0] and store.links[0] == [0, 0, 1, 1]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "0-0 1-1\n\n0-0 4-2\n\n",
            r"train\.align has 4 lines but the corpus .* has more "
            r"\(line 5 has no alignment\)",
        ),  # fmt: skip
        ("0-0\n\n\n\n0-0\n0-0\n", r"train\.align has 6 lines but the corpus .* has 5"),
        ("0-0 1-1\n\n0-0 4-2\n\n1-0\n", r"train\.align, line 5: link '1-0' is outside"),
        ("0-0 1:1\n\n\n\n\n", r"train\.align, line 1: '1:1' is not a link"),
    ],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_a_misaligned_alignment_file_is_an_error_naming_file_and_line(
    tmp_path, aligned_data, text, message, threads, monkeypatch
):
    monkeypatch.setattr("attnkit.nmt.data.store_build.CHUNK_PAIRS", 2)  # with 2 threads: workers
    data, align, tok = aligned_data
    align.write_text(text)
    with pytest.raises(ValueError, match=message):
        open_training_store(data, tmp_path / "store", tok, tok, alignments=align, threads=threads)
    assert not (tmp_path / "store").exists()


def test_links_stored_by_worker_processes_are_the_serial_ones(tmp_path, aligned_data, monkeypatch):
    monkeypatch.setattr("attnkit.nmt.data.store_build.CHUNK_PAIRS", 1)
    data, align, tok = aligned_data
    serial = open_training_store(data, tmp_path / "serial", tok, tok, alignments=align)
    parallel = open_training_store(
        data, tmp_path / "parallel", tok, tok, alignments=align, threads=2
    )
    assert [parallel.links[i] for i in range(3)] == [serial.links[i] for i in range(3)]
    assert [parallel.src[i] for i in range(3)] == [serial.src[i] for i in range(3)]


def test_a_missing_alignment_file_is_named(tmp_path, aligned_data):
    data, _, tok = aligned_data
    with pytest.raises(FileNotFoundError, match="alignment file not found: .*nope"):
        open_training_store(data, tmp_path / "store", tok, tok, alignments=tmp_path / "nope")


# ---------------------------------------------------------------- punctuation-split words


@pytest.mark.parametrize(
    ("token", "pieces", "ranges"),
    [
        ("chat.", ["\u2581chat", "."], [range(0, 1), range(1, 2)]),
        # "t." is a tie (1 character each): the earlier word owns it; "." shares it
        ("chat.", ["\u2581cha", "t."], [range(0, 2), range(1, 2)]),
        # "at." is mostly "chat": "." has no piece of its own and shares it
        ("chat.", ["\u2581ch", "at."], [range(0, 2), range(1, 2)]),
        # a lone word-start marker covers no character: the word at its position
        ("«Oui»", ["\u2581", "«", "Oui", "»"], [range(0, 2), range(2, 3), range(3, 4)]),
        ("l'homme", ["\u2581l", "'", "hom", "me"], [range(0, 2), range(2, 4)]),
        # a word tokenizer's one piece: both words share it
        ("chat.", ["chat."], [range(0, 1), range(0, 1)]),
        # a decomposed (NFD) token, whose pieces sentencepiece composed: read in NFC
        ("e\u0301te\u0301.", ["\u2581", "é", "t", "é", "."], [range(0, 4), range(4, 5)]),
        ("cafe\u0301.", ["\u2581caf", "é."], [range(0, 2), range(1, 2)]),
        # pieces that do not spell the token (<unk>): every word shares all of them
        ("ﬁn.", ["\u2581fin", "."], [range(0, 2), range(0, 2)]),
        ("chat.", ["<unk>"], [range(0, 1), range(0, 1)]),
    ],
)
def test_each_piece_belongs_to_the_split_word_covering_most_of_it(token, pieces, ranges):
    got = split_word_pieces(token, pieces)
    assert got == ranges
    owners = [w for w, r in enumerate(got) for _ in r]
    assert all(len(r) > 0 for r in got)
    assert sorted(set(p for r in got for p in r)) == list(range(len(pieces)))
    assert owners == sorted(owners)  # non-decreasing


@pytest.fixture(scope="module")
def french_english():
    """A tiny sentencepiece model that keeps ``.`` and ``,`` as pieces of their own."""
    lines = ["Le chat.", "The cat.", "Le chien, le chat.", "The dog, the cat.", "Oui."] * 20
    return SentencePieceTokenizer.train(lines, vocab_size=40)


def _encode_one(tok, src, tgt, line, words):
    encoder = AlignedEncoder(
        tok.encode_batch, tok.encode_batch, "al.txt", words, tok.pieces, tok.pieces
    )
    (s_ids,), (t_ids,), (flat,) = encoder([(src, tgt, (line, 3))])
    links = list(zip(flat[::2], flat[1::2], strict=True))
    return tok.pieces(s_ids), tok.pieces(t_ids), links


def test_punctuation_words_link_the_full_stop_to_the_full_stop_only(french_english):
    tok = french_english
    src, tgt, links = _encode_one(tok, "Le chat.", "The cat.", "0-0 1-1 2-2", "punctuation")
    assert src[-1] == "." and tgt[-1] == "."  # "chat." -> ... "."
    dot_s, dot_t = len(src) - 1, len(tgt) - 1
    assert [s for s, t in links if t == dot_t] == [dot_s]  # "." attends to "." alone
    assert all(t < dot_t for s, t in links if s < dot_s)
    assert "".join(src).replace("\u2581", " ").strip() == "Le chat."
    # the pieces are the line's own: the same ids as encoding the whole line
    assert src == tok.pieces(tok.encode("Le chat."))
    # whitespace words: "cat." is one word, so its "." is linked to both pieces of "chat."
    _, _, old = _encode_one(tok, "Le chat.", "The cat.", "0-0 1-1", "whitespace")
    chat = len(tok.encode("chat."))
    assert [s for s, t in old if t == dot_t] == list(range(len(src) - chat, len(src)))


def test_a_link_past_the_split_words_names_file_line_and_rule(french_english):
    with pytest.raises(ValueError, match=r"al\.txt, line 3: link '3-0' .*3 source words.*punct"):
        _encode_one(french_english, "Le chat.", "The cat.", "3-0", "punctuation")
    _encode_one(french_english, "Le chat.", "The cat.", "0-2", "punctuation")
    with pytest.raises(ValueError, match=r"line 3: link '0-2' .*2 target words.*whitespace"):
        _encode_one(french_english, "Le chat.", "The cat.", "0-2", "whitespace")


def test_punctuation_rule_needs_piece_texts():
    tok = WordTokenizer.train(["a b"])
    with pytest.raises(ValueError, match="needs pieces_src and pieces_tgt"):
        AlignedEncoder(tok.encode_batch, tok.encode_batch, "al.txt", "punctuation")


@pytest.fixture
def punct_data(tmp_path, french_english):
    lines = ["Le chien, le chat.\tThe dog, the cat.", "Le chat.\tThe cat.", "Oui.\tOui."]
    path = tmp_path / "train.tsv"
    path.write_text("\n".join(lines) + "\n")
    align = tmp_path / "train.align"
    # le chien , le chat . / the dog , the cat .
    align.write_text("0-0 1-1 2-2 3-3 4-4 5-5\n0-0 1-1 2-2\n0-0 1-1\n")
    data = DataConfig(train={"tsv": str(path)}, valid={"tsv": str(path)})
    return data, align, french_english


@pytest.mark.parametrize("threads", [1, 2])
def test_the_store_holds_punctuation_word_links_on_one_process_and_in_workers(
    tmp_path, punct_data, threads, monkeypatch
):
    monkeypatch.setattr("attnkit.nmt.data.store_build.CHUNK_PAIRS", 1)  # with 2 threads: workers
    data, align, tok = punct_data
    store = open_training_store(
        data, tmp_path / "store", tok, tok, alignments=align, words="punctuation", threads=threads
    )
    for k, (src, tgt, line) in enumerate(
        [
            ("Le chien, le chat.", "The dog, the cat.", "0-0 1-1 2-2 3-3 4-4 5-5"),
            ("Le chat.", "The cat.", "0-0 1-1 2-2"),
            ("Oui.", "Oui.", "0-0 1-1"),
        ]  # fmt: skip
    ):
        *_, links = _encode_one(tok, src, tgt, line, "punctuation")
        assert store.links[k] == [x for link in links for x in link]
        assert list(store.src[k]) == tok.encode(src)
    # every "." / "," target piece is linked to exactly the matching source piece
    pieces = tok.pieces(list(store.tgt[0]))
    flat = store.links[0]
    for t, piece in enumerate(pieces):
        if piece in (".", ","):
            linked = [flat[i] for i in range(0, len(flat), 2) if flat[i + 1] == t]
            assert [tok.pieces(list(store.src[0]))[s] for s in linked] == [piece]


def test_the_word_rule_is_part_of_the_store_fingerprint(tmp_path, punct_data):
    data, align, tok = punct_data
    plain = store_fingerprint(data, tok, tok, align)
    assert plain == store_fingerprint(data, tok, tok, align, "whitespace")
    assert store_fingerprint(data, tok, tok, align, "punctuation") != plain
    heard = []
    kwargs = {"alignments": align, "echo": heard.append}
    open_training_store(data, tmp_path / "store", tok, tok, words="punctuation", **kwargs)
    assert heard == []
    with pytest.raises(ValueError, match=r"train\.align, line 1: link '4-4' .*whitespace"):
        open_training_store(data, tmp_path / "store", tok, tok, words="whitespace", **kwargs)
    assert heard and "rebuilding" in heard[0]


def test_an_alignment_path_that_is_a_folder_is_named_as_one_not_as_missing(tmp_path, aligned_data):
    data, _, tok = aligned_data
    (tmp_path / "labels").mkdir()
    with pytest.raises(FileNotFoundError, match=r"alignment file .*labels is a folder, not a file"):
        open_training_store(data, tmp_path / "store", tok, tok, alignments=tmp_path / "labels")
    pairs = stream_split(data, "train", alignments=tmp_path / "labels")
    with pytest.raises(FileNotFoundError, match=r"alignment file .*labels is a folder, not a file"):
        list(pairs)
