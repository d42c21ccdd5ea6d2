"""The Transformer through the whole pipeline: train, resume after SIGKILL, save -> load ->
identical translations, attention views of every layer and head, translate --plot/--layer/--head."""

from __future__ import annotations

import signal

import pytest
import torch

from attnkit.nmt.batching import Examples
from attnkit.nmt.checkpoint import save_checkpoint
from attnkit.nmt.search import decode_examples
from attnkit.nmt.tokenizer import WordTokenizer, save_tokenizers
from attnkit.nmt.train import train
from attnkit.nmt.transformer import TransformerTranslator
from attnkit.nmt.translate import load_run, translate_lines
from attnkit.nmt.views import attention_views, pick, write_heatmaps
from cli_helpers import assert_one_line_error, run
from test_reliability_resume import (
    REVERSE,
    STEPS,
    assert_same_run,
    attnkit,
    finish,
    resume,
    saved_step,
    wait_for_checkpoint,
)
from test_train import TINY, config, quiet

TRANSFORMER = (
    "model={arch: transformer, d_model: 16, heads: 4, encoder_layers: 2, decoder_layers: 2, "
    "ff_dim: 32, dropout: 0.1, attention_dropout: 0.1, share_embeddings: true}"
)


@pytest.fixture(scope="module")
def transformer_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("transformer")
    cfg = config(TRANSFORMER, "train.max_steps=20", "train.lr_schedule=inverse_sqrt")
    train(cfg, run_dir, progress_bar=False, echo=quiet)
    return run_dir


def test_saved_transformer_translates_exactly_like_the_original(tmp_path):
    cfg = config(TRANSFORMER)
    tok = WordTokenizer.train(["s0 s1 s2 s3 s4 s5"])
    torch.manual_seed(0)
    model = TransformerTranslator(cfg.model, tok.vocab_size, tok.vocab_size).eval()
    (tmp_path / "config.yaml").write_text(cfg.to_yaml())
    save_tokenizers(tmp_path, tok, tok)
    save_checkpoint(tmp_path, "best", model.state_dict(), {})
    lines = ["s1 s2 s3", "s5 s4", "s0 s0 s0 s1 s2"]
    loaded = translate_lines(load_run(tmp_path), lines)
    decode = TINY["decode"]
    original = decode_examples(
        model,
        Examples([tok.encode(x) for x in lines]),
        beam_size=decode["beam_size"],
        max_len_a=decode["max_len_a"],
        max_len_b=decode["max_len_b"],
    )
    for got, want in zip(loaded, original, strict=True):
        assert got.text == tok.decode(want.tokens)
        assert torch.equal(got.weights, want.weights)


def test_views_of_a_translation_reproduce_its_search_weights(transformer_run):
    loaded = load_run(transformer_run)
    (t,) = translate_lines(loaded, ["s1 s2 s3 s4"], beam_size=1)
    views = attention_views(loaded.model, t.src_ids, t.output_ids, "cpu")
    steps, src_len = t.weights.shape
    assert views.cross.shape == (2, 4, steps, src_len)
    assert views.encoder.shape == (2, 4, src_len, src_len)
    assert views.decoder.shape == (2, 4, steps, steps)
    torch.testing.assert_close(pick(views.cross, None, None), t.weights, atol=1e-5, rtol=0)
    torch.testing.assert_close(pick(views.cross, -1, 2), views.cross[1, 2])
    with pytest.raises(ValueError, match="layer 2 does not exist"):
        pick(views.cross, 2, None)
    with pytest.raises(ValueError, match="head 4 does not exist"):
        pick(views.cross, 0, 4)


def test_write_heatmaps_draws_cross_encoder_and_decoder_attention(transformer_run, tmp_path):
    loaded = load_run(transformer_run)
    (t,) = translate_lines(loaded, ["s3 s1 s2"])
    views = attention_views(loaded.model, t.src_ids, t.output_ids, "cpu")
    stem = tmp_path / "sentence_001"
    written = write_heatmaps(views, t.src_pieces, t.tgt_pieces, stem, head="all", title="x")
    assert [p.name for p in written] == [
        "sentence_001.png",
        "sentence_001.encoder.png",
        "sentence_001.decoder.png",
    ]
    assert all(p.stat().st_size > 1000 for p in written)


def test_translate_cli_shows_a_chosen_layer_and_head(transformer_run, tmp_path, capsys):
    out_dir = tmp_path / "maps"
    status, out, err = run(
        capsys, "translate", str(transformer_run), "s1 s2 s3",
        "--show-attention", "--layer", "0", "--head", "1", "--plot", str(out_dir),
    )  # fmt: skip
    assert status == 0, err
    lines = out.splitlines()
    assert len(lines) >= 2 and all("<-" in line for line in lines[1:])
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "sentence_001.decoder.png",
        "sentence_001.encoder.png",
        "sentence_001.png",
    ]
    for bad, needle in ((["--layer", "7"], "layer 7 does not exist"), (["--head", "x"], "--head")):
        status, _, err = run(capsys, "translate", str(transformer_run), "s1", *bad)
        assert status == 2
        assert_one_line_error(err, "translate", needle)


@pytest.mark.slow
def test_transformer_resumes_after_sigkill_exactly(tmp_path):
    args = [
        "--no-progress",
        "--set", TRANSFORMER,
        "--set", "train.lr_schedule=inverse_sqrt",
        "--set", "train.warmup_steps=10",
        "--data.toy.train_size", "640",
        "--data.toy.valid_size", "16",
        "--data.toy.test_size", "8",
        "--train.batch_size", "32",
        "--train.epochs", "3",
        "--train.early_stopping", "null",
        "--train.checkpoint_every", "5",
        "--train.threads", "1",
    ]  # fmt: skip
    reference = tmp_path / "straight"
    code, _, err = finish(attnkit("train", REVERSE, "--out", str(reference), *args))
    assert code == 0, err
    run_dir = tmp_path / "killed"
    process = attnkit("train", REVERSE, "--out", str(run_dir), *args)
    wait_for_checkpoint(process, run_dir)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert saved_step(run_dir) < STEPS
    resume(run_dir)
    assert_same_run(run_dir, reference)
