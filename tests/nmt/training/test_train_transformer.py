"""The Transformer through the whole pipeline: train, resume after SIGKILL, save -> load ->
identical translations, attention views of every layer and head, translate --plot/--layer/--head."""

from __future__ import annotations

import json
import math
import signal

import pytest
import torch
from test_train import TRANSFORMER, config, quiet

from attnkit.nmt.data.batching import Examples
from attnkit.nmt.decoding.translate import translate_lines
from attnkit.nmt.decoding.views import attention_views, pick, write_heatmaps
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.nmt.training import objective
from attnkit.nmt.training.loop import train
from attnkit.nmt.training.prepare import validation_data
from cli_helpers import assert_one_line_error, run
from resume_helpers import (
    REVERSE,
    SMALL,
    STEPS,
    assert_same_run,
    attnkit,
    finish,
    resume,
    saved_step,
    wait_for_checkpoint,
)


@pytest.fixture(scope="module")
def transformer_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("transformer")
    cfg = config(TRANSFORMER, "train.max_steps=20", "train.lr_schedule=inverse_sqrt")
    train(cfg, run_dir, progress_bar=False, echo=quiet)
    return run_dir


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


def test_heatmap_titles_name_the_view_layer_and_head(transformer_run, tmp_path, monkeypatch):
    from attnkit.nmt.decoding import views as views_module

    titles = []
    record = lambda *args, title=None, **kwargs: titles.append(title)  # noqa: E731
    monkeypatch.setattr(views_module, "heatmap", record)
    monkeypatch.setattr(views_module, "heatmap_grid", record)
    loaded = load_run(transformer_run)
    (t,) = translate_lines(loaded, ["s3 s1 s2"])
    views = attention_views(loaded.model, t.src_ids, t.output_ids, "cpu")
    write_heatmaps(views, t.src_pieces, t.tgt_pieces, tmp_path / "a", layer=-2, head=1, title="x")
    write_heatmaps(views, t.src_pieces, t.tgt_pieces, tmp_path / "b", head="all")
    write_heatmaps(views, t.src_pieces, t.tgt_pieces, tmp_path / "c", cross=t.weights)
    assert titles == [
        "x\ncross-attention, layer 0, head 1",
        "x\nencoder self-attention, layer 0, head 1",
        "x\ndecoder causal self-attention, layer 0, head 1",
        "cross-attention, layer 1, all heads",
        "encoder self-attention, layer 1, all heads",
        "decoder causal self-attention, layer 1, all heads",
        "cross-attention, the model's alignment view",
        "encoder self-attention, layer 1, heads averaged",
        "decoder causal self-attention, layer 1, heads averaged",
    ]


def test_translate_cli_shows_a_chosen_layer_and_head(transformer_run, tmp_path, capsys):
    out_dir = tmp_path / "maps"
    status, out, err = run(
        capsys, "translate", str(transformer_run), "s1 s2 s3",
        "--show-attention", "--layer", "0", "--head", "1", "--plot", str(out_dir),
    )  # fmt: skip
    assert status == 0, err
    assert len(out.splitlines()) == 1  # the alignment goes to stderr
    rows = [r for r in err.splitlines()[1:] if not r.startswith("heatmap: ")]
    assert err.startswith("line 1: ") and rows and all("<-" in row for row in rows)
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "sentence_001.decoder.png",
        "sentence_001.encoder.png",
        "sentence_001.png",
    ]
    for bad, needle in ((["--layer", "7"], "layer 7 does not exist"), (["--head", "x"], "--head")):
        status, _, err = run(capsys, "translate", str(transformer_run), "s1", *bad)
        assert status == 2
        assert_one_line_error(err, "translate", needle)


def _without_model_options(argv: list[str]) -> list[str]:
    """``argv`` without its ``--model.KEY VALUE`` pairs."""
    kept, skip = [], False
    for arg in argv:
        if not skip and arg.startswith("--model."):
            skip = True
        elif skip:
            skip = False
        else:
            kept.append(arg)
    return kept


@pytest.mark.slow
def test_transformer_resumes_after_sigkill_exactly(tmp_path):
    args = [  # the resume tests' settings with this Transformer in place of their RNN
        *_without_model_options(SMALL),
        "--set", TRANSFORMER,
        "--set", "train.lr_schedule=inverse_sqrt",
        "--set", "train.warmup_steps=10",
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


def test_translate_html_writes_one_self_contained_page(transformer_run, tmp_path, capsys):
    page = tmp_path / "page.html"
    status, out, err = run(capsys, "translate", str(transformer_run), "s1 s2", "--html", str(page))
    assert status == 0, err
    text = page.read_text(encoding="utf-8")
    assert out.strip() and "http://" not in text and "https://" not in text
    assert "<script" in text  # the explorer's code is inlined, not loaded
    status, _, err = run(
        capsys, "translate", str(transformer_run), "s1", "--html", str(tmp_path / "no/x.html")
    )
    assert status == 2
    assert_one_line_error(err, "translate", "--html")


def test_pairs_longer_than_the_position_table_are_left_out_not_a_crash(tmp_path):
    """Toy pairs of 2-6 symbols, a table of 5 positions: training keeps the pairs of up to 4
    (data.max_*_len null became 4); validation's loss skips the longer pairs and its BLEU
    cuts their sources, where the first long batch ended the run before."""
    cfg = config(TRANSFORMER, "model.max_positions=5", "train.max_steps=3")
    assert (cfg.data.max_src_len, cfg.data.max_tgt_len) == (4, 4)
    summary = train(cfg, tmp_path, progress_bar=False, echo=quiet)
    run = load_run(tmp_path)
    data = validation_data(cfg, run.src_tok, run.tgt_tok)
    src, _ = data.valid.lengths()
    assert 0 < (src <= 4).sum() < len(src)  # both kinds in the validation set
    whole = objective.validate(run.model, data.valid, data.references, run.tgt_tok, cfg, "cpu")
    fits = [i for i, n in enumerate(src) if n <= 4]
    short = Examples([data.valid.src[i] for i in fits], [data.valid.tgt[i] for i in fits])
    alone = objective.validate(
        run.model, short, [data.references[i] for i in fits], run.tgt_tok, cfg, "cpu"
    )
    assert whole["valid_loss"] == pytest.approx(alone["valid_loss"], rel=1e-6)
    assert math.isfinite(whole["valid_bleu"]) and summary.progress.step == 3


def test_a_position_table_too_short_for_every_pair_says_to_raise_max_positions(tmp_path):
    """Toy pairs of 2-6 symbols, a table of 2 positions: the limits become 1 and no pair is
    left. The error said "raise data.max_src_len/max_tgt_len", which changed nothing: a
    larger limit is lowered to the table's again."""
    cfg = config(TRANSFORMER, "model.max_positions=2", "data.max_src_len=50")
    assert (cfg.data.max_src_len, cfg.data.max_tgt_len) == (1, 1)
    with pytest.raises(ValueError) as err:
        train(cfg, tmp_path, progress_bar=False, echo=quiet)
    assert str(err.value) == (
        "no training pairs left after filtering; raise data.max_src_len (1) and "
        "data.max_tgt_len (1), and model.max_positions (2), which caps them at 1 "
        "(one of its positions is </s> or <s>)"
    )


@pytest.mark.parametrize("fitting_pairs", [0, 1])
def test_a_validation_set_longer_than_the_position_table_is_refused_before_training(
    tmp_path, fitting_pairs
):
    """Short training pairs, validation pairs of 8 tokens, a table of 6 positions: the
    validation loss left every pair out and read "valid loss 0.000, ppl 1.00" at each
    validation. With one pair that fits, the loss is that pair's."""
    short = [" ".join(f"s{(i + j) % 8}" for j in range(3)) for i in range(40)]
    long = [" ".join(f"s{(i + j) % 8}" for j in range(8)) for i in range(6)]
    (tmp_path / "train.tsv").write_text("".join(f"{s}\t{s}\n" for s in short))
    valid = long + short[:fitting_pairs]
    (tmp_path / "valid.tsv").write_text("".join(f"{s}\t{s}\n" for s in valid))
    files = {split: {"tsv": str(tmp_path / f"{split}.tsv")} for split in ("train", "valid")}
    data = f"data={json.dumps(files)}"
    cfg = config(TRANSFORMER, data, "model.max_positions=6", "train.max_steps=2")
    run_dir = tmp_path / "run"
    if not fitting_pairs:
        with pytest.raises(ValueError) as err:
            train(cfg, run_dir, progress_bar=False, echo=quiet)
        assert str(err.value) == (
            "no validation pair fits model.max_positions (6): each has more than 5 source or "
            "target tokens, so the validation loss would cover no pair; raise "
            "model.max_positions, or validate on shorter pairs"
        )
        return
    summary = train(cfg, run_dir, progress_bar=False, echo=quiet)
    losses = [row["valid_loss"] for row in summary.history]
    assert losses and all(loss > 0.5 for loss in losses)  # a real loss, not 0 over no pair
