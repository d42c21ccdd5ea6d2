"""Tokenizers: sentencepiece round trip on Multi30k, special ids, word vocab, save/load."""

import pytest

from attnkit.nmt.corpus import bundled_multi30k
from attnkit.nmt.tokenizer import (
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


def test_word_vocab_size_limit_keeps_specials():
    tok = WordTokenizer.train(["a a a b b c"], vocab_size=6)
    assert tok.words == ["<pad>", "<unk>", "<s>", "</s>", "a", "b"]
