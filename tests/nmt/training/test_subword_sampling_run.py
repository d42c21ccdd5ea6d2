"""Training with ``train.subword_sampling``: a sampled segmentation each epoch, kept on disk so a
resumed run trains on the pairs it left; the settings it cannot work with are refused."""

from __future__ import annotations

import re
import shutil

import pytest
from test_train import config, quiet

from attnkit.nmt.config import DataConfig, RunConfig
from attnkit.nmt.data.corpus import load_split
from attnkit.nmt.data.store import TokenStore
from attnkit.nmt.runs.checkpoint import load_checkpoint
from attnkit.nmt.training.loop import train

PAIRS = 320  # 10 batches of 32 an epoch


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The first 320 Multi30k training pairs as a TSV file, and 16 for validation."""
    multi30k = load_split(DataConfig(bundled="multi30k"), "train")
    folder = tmp_path_factory.mktemp("corpus")
    rows = [f"{s}\t{t}\n" for s, t in zip(multi30k.src[:PAIRS], multi30k.tgt[:PAIRS], strict=True)]
    (folder / "train.tsv").write_text("".join(rows))
    (folder / "valid.tsv").write_text("".join(rows[:16]))
    return folder


def sampled_config(corpus, *overrides):
    return config(
        f"data={{train: {{tsv: {corpus / 'train.tsv'}}}, valid: {{tsv: {corpus / 'valid.tsv'}}}, "
        "max_src_len: null, max_tgt_len: null}",
        "tokenizer={kind: sentencepiece, vocab_size: 300}",
        "train.subword_sampling={alpha: 0.1, nbest_size: 64}",
        "train.valid_every=null",
        "train.valid_bleu_sentences=4",
        *overrides,
    )


def weights(run_dir):
    return load_checkpoint(run_dir / "last.json").model


def stored_pairs(run_dir):
    store = TokenStore.open(run_dir / "store" / "sampled")
    return [(store.src[i], store.tgt[i]) for i in range(len(store))]


def test_each_epoch_trains_on_a_new_sampled_segmentation(corpus, tmp_path):
    log: list[str] = []
    train(sampled_config(corpus, "train.epochs=2"), tmp_path, progress_bar=False, echo=log.append)
    lines = [line for line in log if "sampled segmentation" in line]
    assert [line.split(":")[0] for line in lines] == ["epoch 1", "epoch 2"]
    assert all(f"{PAIRS} pairs" in line for line in lines)
    plain = TokenStore.open(tmp_path / "store" / "train")
    sampled = stored_pairs(tmp_path)  # epoch 2's
    assert len(sampled) == len(plain) == PAIRS
    assert sum(s != plain.src[i] for i, (s, _) in enumerate(sampled)) > PAIRS // 2
    assert sum(map(len, (s for s, _ in sampled))) > plain.counts.src_tokens


def test_a_resumed_run_trains_on_the_epoch_it_left(corpus, tmp_path):
    """Stopped mid-epoch 2, then resumed twice from copies: the same weights, because both
    read epoch 2's stored sample; with the store deleted, the resumed run draws a new one."""
    first = tmp_path / "first"
    train(sampled_config(corpus, "train.max_steps=15"), first, progress_bar=False, echo=quiet)
    copies = [tmp_path / name for name in ("a", "b", "resampled")]
    for copy in copies:
        shutil.copytree(first, copy)
    shutil.rmtree(copies[2] / "store" / "sampled")
    heard: list[list[str]] = []
    for copy in copies:
        more = sampled_config(corpus, "train.max_steps=20")
        heard.append([])
        train(more, copy, resume=True, progress_bar=False, echo=heard[-1].append)
    said = [next(line for line in log if "sampled segmentation" in line) for log in heard]
    assert [("kept in" in line, bool(re.search(r" in \d+\.\d s, ", line))) for line in said] == [
        (True, False),
        (True, False),
        (False, True),
    ]
    a, b, resampled = (weights(copy) for copy in copies)
    assert all((a[k] == b[k]).all() for k in a)
    assert any((a[k] != resampled[k]).any() for k in a)


def test_sampling_needs_sentencepiece_and_one_segmentation():
    with pytest.raises(ValueError, match="train.subword_sampling .*tokenizer.kind: sentencepiece"):
        config("train.subword_sampling={alpha: 0.1}")  # the tiny config's word tokenizer
    with pytest.raises(ValueError, match="train.subword_sampling .*guided_alignment"):
        RunConfig.from_dict(
            {
                "data": {"bundled": "multi30k"},
                "train": {
                    "subword_sampling": {"alpha": 0.1},
                    "guided_alignment": {"file": "links.txt"},
                },
            }
        )
