"""Sampled segmentations (subword regularization, Kudo 2018): the same text in other pieces,
drawn again each epoch into a store that is kept while the epoch lasts."""

import pytest

from attnkit.nmt.config import DataConfig
from attnkit.nmt.config.subword_sampling import SubwordSamplingConfig
from attnkit.nmt.data import store_build as store_module
from attnkit.nmt.data.corpus import load_split
from attnkit.nmt.data.subword_sampling import SampledEncoder, SampledSegmentation
from attnkit.nmt.data.tokenizer import WordTokenizer, train_tokenizers
from attnkit.nmt.data.training_split import open_training_store

PAIRS = 300
KUDO = SubwordSamplingConfig(alpha=0.1, nbest_size=64)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """300 Multi30k pairs as a TSV corpus, and a joint 400-piece unigram model trained on them."""
    multi30k = load_split(DataConfig(bundled="multi30k"), "train")
    src, tgt = list(multi30k.src[:PAIRS]), list(multi30k.tgt[:PAIRS])
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "train.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in zip(src, tgt, strict=True)))
    (folder / "valid.tsv").write_text(f"{src[0]}\t{tgt[0]}\n")
    data = DataConfig(
        train={"tsv": str(folder / "train.tsv")},
        valid={"tsv": str(folder / "valid.tsv")},
        max_src_len=None,
        max_tgt_len=None,
    )
    tok, _ = train_tokenizers(src, tgt, kind="sentencepiece", vocab_size=400)
    return data, tok, src, tgt


def sampled(tok, texts):
    return SampledEncoder(tok, KUDO.alpha, KUDO.nbest_size)(texts)


def decoded(tok, ids):
    return [tok.decode(x) for x in ids]


def test_a_sampled_segmentation_spells_the_same_text_in_other_pieces(corpus):
    _, tok, src, _ = corpus
    best = tok.encode_batch(src)
    ids = sampled(tok, src)
    assert decoded(tok, ids) == decoded(tok, best)
    changed = sum(a != b for a, b in zip(ids, best, strict=True)) / len(src)
    assert changed > 0.5  # alpha 0.1, 64-best: most sentences (measured: 0.95 on Multi30k)
    assert sum(map(len, ids)) > sum(map(len, best))  # longer on the whole (Multi30k: 1.1x)
    assert sampled(tok, src) != ids  # drawn again on each call


def test_only_the_chosen_side_is_sampled(corpus):
    _, tok, src, _ = corpus
    source_only = SubwordSamplingConfig(sides="source")
    encode_src, encode_tgt = SampledSegmentation.for_epoch(source_only, 1).encoders(tok, tok)
    assert isinstance(encode_src, SampledEncoder)
    assert encode_tgt(src) == tok.encode_batch(src)
    target_only = SampledSegmentation.for_epoch(SubwordSamplingConfig(sides="target"), 1)
    assert target_only.encoders(tok, tok)[0](src) == tok.encode_batch(src)


def test_a_word_tokenizer_cannot_be_sampled():
    tok = WordTokenizer.train(["a house"])
    with pytest.raises(TypeError, match="sentencepiece source tokenizer"):
        SampledSegmentation.for_epoch(KUDO, 1).encoders(tok, tok)


def epoch_store(corpus, folder, epoch, echo=None, threads=1):
    data, tok, _, _ = corpus
    sampling = SampledSegmentation.for_epoch(KUDO, epoch)
    return open_training_store(
        data, folder, tok, tok, sampling=sampling, echo=echo, threads=threads
    )


def pairs(store):
    return [(store.src[i], store.tgt[i]) for i in range(len(store))]


def test_each_epoch_has_its_own_store_and_an_epoch_is_built_once(corpus, tmp_path):
    _, tok, src, tgt = corpus
    heard = []
    one = pairs(epoch_store(corpus, tmp_path / "s", 1, echo=heard.append))
    assert pairs(epoch_store(corpus, tmp_path / "s", 1, echo=heard.append)) == one
    assert heard == []  # the same epoch is reused, not rebuilt
    two = pairs(epoch_store(corpus, tmp_path / "s", 2, echo=heard.append))
    assert len(heard) == 1 and len(two) == len(one) == PAIRS
    assert sum(a != b for a, b in zip(one, two, strict=True)) > PAIRS // 2
    assert decoded(tok, [s for s, _ in two]) == decoded(tok, tok.encode_batch(src))
    assert decoded(tok, [t for _, t in two]) == decoded(tok, tok.encode_batch(tgt))
    plain = open_training_store(corpus[0], tmp_path / "plain", tok, tok)
    assert pairs(plain) != one


def test_worker_processes_sample_their_chunks(corpus, tmp_path, monkeypatch):
    _, tok, src, _ = corpus
    monkeypatch.setattr(store_module, "CHUNK_PAIRS", 70)  # five chunks, four of them in workers
    got = pairs(epoch_store(corpus, tmp_path / "two", 3, threads=2))
    best = tok.encode_batch(src)
    assert decoded(tok, [s for s, _ in got]) == decoded(tok, best)
    assert sum(s != b for (s, _), b in zip(got[70:], best[70:], strict=True)) > (PAIRS - 70) // 2


def test_sampling_needs_several_candidates():
    with pytest.raises(ValueError, match="nbest_size"):
        SubwordSamplingConfig(nbest_size=1)
    with pytest.raises(ValueError, match="alpha"):
        SubwordSamplingConfig(alpha=0.0)
    assert SubwordSamplingConfig(nbest_size=-1).nbest_size == -1
