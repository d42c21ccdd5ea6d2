"""Tokenizers: sentencepiece round trip on Multi30k, special ids, word vocab, save/load."""

import unicodedata

import pytest

from attnkit.nmt.data.corpus import bundled_multi30k, read_parallel
from attnkit.nmt.data.tokenizer import (
    SPECIALS,
    SentencePieceTokenizer,
    WordTokenizer,
    load_tokenizers,
    save_tokenizers,
    train_tokenizers,
)
from attnkit.nmt.vocab_ids import BOS, EOS, PAD, UNK


@pytest.fixture(scope="module")
def sample():
    corpus = bundled_multi30k("valid")
    return corpus.src[:300], corpus.tgt[:300]


@pytest.fixture(scope="module")
def joint(sample):
    src, tgt = sample
    return train_tokenizers(src, tgt, kind="sentencepiece", vocab_size=400, joint=True)


def test_sentencepiece_round_trip_on_multi30k(joint, sample):
    tok, _ = joint
    for text in sample[0][:50] + sample[1][:50]:
        ids = tok.encode(text)
        assert ids and all(i > EOS for i in ids)  # no specials inside a sentence
        assert tok.decode(ids) == text


def test_sentencepiece_special_ids_are_fixed(joint):
    tok, tgt = joint
    assert tok is tgt
    assert tok.vocab_size == 400
    assert [tok.sp.pad_id(), tok.sp.unk_id(), tok.sp.bos_id(), tok.sp.eos_id()] == [0, 1, 2, 3]
    assert tok.pieces([PAD, UNK, BOS, EOS]) == ["<pad>", "<unk>", "<s>", "</s>"]


def test_separate_models_and_save_load(tmp_path, sample):
    src_tok, tgt_tok = train_tokenizers(*sample, kind="sentencepiece", vocab_size=300, joint=False)
    assert src_tok is not tgt_tok
    save_tokenizers(tmp_path, src_tok, tgt_tok)
    assert (tmp_path / "spm.src.model").is_file() and (tmp_path / "spm.tgt.model").is_file()
    src2, tgt2 = load_tokenizers(tmp_path)
    text = sample[0][7]
    assert src2.encode(text) == src_tok.encode(text)
    assert tgt2.decode(tgt2.encode(sample[1][7])) == sample[1][7]


def test_joint_model_saved_once(tmp_path, joint):
    save_tokenizers(tmp_path, *joint)
    src, tgt = load_tokenizers(tmp_path)
    assert src is tgt and (tmp_path / "spm.model").is_file()


def test_corrupt_model_file_is_named(tmp_path):
    bad = tmp_path / "spm.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="spm.model"):
        SentencePieceTokenizer.load(bad)


def test_missing_manifest_says_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        load_tokenizers(tmp_path)


def test_word_tokenizer_ids_unknowns_and_round_trip(tmp_path):
    tok = WordTokenizer.train(["s1 s2 s2", "s3 s2 s1"])
    assert tok.words[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tok.words[4:] == ["s2", "s1", "s3"]  # by frequency, then alphabetically
    assert tok.encode("s1 s9 s3") == [5, UNK, 6]
    assert tok.decode(tok.encode("s3 s2 s1")) == "s3 s2 s1"
    save_tokenizers(tmp_path, tok, tok)
    again, _ = load_tokenizers(tmp_path)
    assert again.words == tok.words


def test_word_tokenizer_reads_nfc_and_nfd_spellings_as_one_word(tmp_path):
    nfc, nfd = "caf\u00e9", "cafe\u0301"  # the same word, composed and decomposed
    tok = WordTokenizer.train([f"le {nfc} est ouvert", f"un {nfd}"])
    assert tok.words[4] == nfc and nfd not in tok.words  # learned once, counted twice
    assert tok.encode(f"le {nfd}") == tok.encode(f"le {nfc}") == [tok.index["le"], 4]
    assert tok.decode(tok.encode(f"un {nfd}")) == f"un {nfc}"
    (tmp_path / "vocab.json").write_text(f'["<pad>", "<unk>", "<s>", "</s>", "{nfd}"]')
    assert WordTokenizer.load(tmp_path / "vocab.json").encode(nfc) == [4]  # an older vocabulary


def test_word_tokenizer_keeps_the_ids_of_an_older_vocabulary_with_both_spellings():
    # a vocabulary learned before words were read in NFC holds both spellings, the NFD
    # one first (more frequent in that corpus): NFC text keeps its own word's id
    nfc, nfd = "caf\u00e9", "cafe\u0301"
    tok = WordTokenizer(["<pad>", "<unk>", "<s>", "</s>", nfd, nfc])
    assert tok.encode(nfc) == [5]
    assert tok.encode(nfd) == [5]  # read in NFC: the word it spells


def test_word_vocab_size_limit_keeps_specials():
    tok = WordTokenizer.train(["a a a b b c"], vocab_size=6)
    assert tok.words == ["<pad>", "<unk>", "<s>", "</s>", "a", "b"]


SPELLED_SPECIALS = "s1 </s> <pad> <s> s2"


def test_text_spelling_a_special_token_is_an_unknown_word_not_a_control_id():
    tok = WordTokenizer.train(["s1 s2 s3", "s2 s3 s4"])
    ids = tok.encode(SPELLED_SPECIALS)
    assert ids == [6, UNK, UNK, UNK, 4]
    assert len(tok.decode(ids).split()) == 5  # decoding deletes no word


def test_special_spellings_in_a_corpus_are_never_learned_as_words(tmp_path):
    src = tmp_path / "train.de"
    src.write_text("ein </s> Haus\n<s> <pad> <unk> ein\n", encoding="utf-8")
    (tmp_path / "train.en").write_text("a house\na dog\n", encoding="utf-8")
    corpus = read_parallel(src, tmp_path / "train.en")
    tok = WordTokenizer.train([*corpus.src, *corpus.tgt])
    assert tok.words[:4] == list(SPECIALS) and not set(tok.words[4:]) & set(SPECIALS)
    assert tok.encode(corpus.src[0]) == [tok.index["ein"], UNK, tok.index["Haus"]]
    save_tokenizers(tmp_path, tok, tok)
    assert load_tokenizers(tmp_path)[0].encode("<s> </s> <pad>") == [UNK, UNK, UNK]


@pytest.mark.parametrize("training", ["multi30k", "text with the spellings"])
def test_sentencepiece_never_reads_control_symbols_from_text(joint, training):
    if training == "multi30k":
        tok = joint[0]
    else:  # control symbols spelled inside the training text itself
        sentences = ["ein <s> Haus </s>", "<pad> zwei Hunde <unk>", "a < b > c / d"] * 10
        tok = SentencePieceTokenizer.train(sentences, vocab_size=40)
    assert all(tok.sp.is_control(i) for i in (PAD, BOS, EOS))
    for text in (SPELLED_SPECIALS, "<s>", "</s>", "<pad>", "ein<s>Hund</s><pad>", "<<s>>"):
        ids = tok.encode(text)
        assert ids and not {PAD, BOS, EOS} & set(ids), (text, tok.pieces(ids))


@pytest.mark.parametrize("special", [*SPECIALS, "\uff1c/s\uff1e"])  # and full-width </s>
def test_sentencepiece_keeps_a_spelled_special_token_as_text(special):
    # the trainer leaves "</s>" out of what it learns: its "/" got no piece and read as <unk>
    sentences = [f"ab {special} ab .", "ab ba ."] * 100
    tok = SentencePieceTokenizer.train(sentences, vocab_size=30)
    ids = tok.encode(f"ab {special} ba")
    assert UNK not in ids, tok.pieces(ids)
    assert tok.decode(ids) == unicodedata.normalize("NFKC", f"ab {special} ba")


def test_words_made_only_of_invisible_characters_are_skipped():
    tok = WordTokenizer.train(["s1 \u200b s2", "\ufeff s2"])
    assert tok.words[4:] == ["s2", "s1"]
    assert tok.encode("s1 \u200e s2 \ufeff") == tok.encode("s1 s2") == [5, 4]
    assert tok.encode("\u200b \ufeff\u200e") == []


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_vocab_size_below_the_characters_is_an_error_naming_it(sample, model_type):
    with pytest.raises(ValueError, match=r"tokenizer.vocab_size 10 .*characters") as err:
        SentencePieceTokenizer.train(sample[0], vocab_size=10, model_type=model_type)
    assert "--character_coverage" not in str(err.value)  # sentencepiece's own flag, not ours


def test_text_of_only_overlong_lines_is_an_error_that_says_why():
    # a file with old Mac line endings (\r) reads as one very long line
    with pytest.raises(ValueError, match=r"no sentence .* 4,192 bytes") as err:
        SentencePieceTokenizer.train(["ein Haus\r" * 1000], vocab_size=50)
    assert "INTERNAL" not in str(err.value)


def test_ctrl_c_stops_sentencepiece_training_at_once():
    # sentencepiece trains in C++, which holds Ctrl-C back until it returns unless
    # Python waits for it in another thread; uninterrupted, this training takes
    # about 10 s on a 2-core AMD EPYC (a few on a fast CPU)
    import os
    import signal
    import threading
    import time

    corpus = bundled_multi30k("train")
    sentences = (corpus.src + corpus.tgt) * 2  # 116,000 sentences
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    began = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        SentencePieceTokenizer.train(sentences, vocab_size=8000)
    assert time.monotonic() - began < 2.0


def test_character_coverage_the_config_accepts_is_one_sentencepiece_trains(sample):
    # sentencepiece refuses a coverage below 0.98 with an INTERNAL check failure, after
    # the corpus was read; the config refuses it at once, naming the key
    from attnkit.nmt.config import RunConfig

    base = {"data": {"toy": {"task": "copy"}}}
    with pytest.raises(
        ValueError, match=r"tokenizer\.character_coverage: must be >= 0\.98, got 0\.5"
    ):
        RunConfig.from_dict(base, ["tokenizer.character_coverage=0.5"])
    lowest = RunConfig.from_dict(base, ["tokenizer.character_coverage=0.98"])
    coverage = lowest.tokenizer.character_coverage
    tok = SentencePieceTokenizer.train(sample[0], vocab_size=200, character_coverage=coverage)
    assert tok.vocab_size == 200


# full-width Chinese punctuation, an ellipsis, a fraction: all rewritten by NFKC
_COMPATIBILITY_TEXT = "他来了，对吗？ 好… ½"


@pytest.mark.parametrize(
    ("normalization", "decoded"),
    [
        ("nmt_nfkc", "他来了,对吗? 好... 1⁄2"),  # sentencepiece's default: rewritten for good
        ("identity", _COMPATIBILITY_TEXT),
        ("nmt_nfkc_cf", "ab ... 1⁄2"),
    ],
)
def test_normalization_chooses_what_text_comes_back(normalization, decoded):
    from attnkit.nmt.config import RunConfig

    text = "AB … ½" if normalization.endswith("_cf") else _COMPATIBILITY_TEXT
    config = RunConfig.from_dict(
        {"data": {"toy": {"task": "copy"}}}, [f"tokenizer.normalization={normalization}"]
    )
    tok, _ = train_tokenizers(
        [text] * 50,
        ["x"] * 50,
        kind="sentencepiece",
        vocab_size=30,
        normalization=config.tokenizer.normalization,
    )
    assert tok.decode(tok.encode(text)) == decoded


def test_an_unknown_normalization_is_named():
    from attnkit.nmt.config import RunConfig

    with pytest.raises(ValueError, match=r"tokenizer\.normalization: .*'identity'"):
        RunConfig.from_dict({"data": {"toy": {"task": "copy"}}}, ["tokenizer.normalization=nfc"])
