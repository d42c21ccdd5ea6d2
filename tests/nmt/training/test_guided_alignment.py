"""Guided alignment (Garg et al. 2019): the loss on hand-made matrices, the supervised head
learning a given alignment on a toy task, and the whole pipeline with an alignment file."""

import math

import pytest
import torch
from test_train import TRANSFORMER, config, quiet

from attnkit.nmt.config import TrainConfig
from attnkit.nmt.config.guided_alignment import GuidedAlignmentConfig
from attnkit.nmt.data.batching import Examples, make_batch
from attnkit.nmt.data.corpus import load_split
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.nmt.training.guided_alignment import (
    alignment_loss,
    guided_terms,
    supervised_layer,
    training_terms,
)
from attnkit.nmt.training.loop import train
from conftest_nmt import TOY_VOCAB, random_sequences, tiny_transformer

A = torch.tensor([[[0.5, 0.3, 0.2], [0.1, 0.6, 0.3]]])  # (B=1, T=2, S=3)
G = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]]])


def test_the_loss_on_a_hand_made_matrix():
    loss, rows = alignment_loss(A, G, shift=0)
    # row 0: -log 0.5; row 1: 0.5 (log 0.5 - log 0.6) + 0.5 (log 0.5 - log 0.3); mean of two
    row0 = -math.log(0.5)
    row1 = 0.5 * (math.log(0.5) - math.log(0.6)) + 0.5 * (math.log(0.5) - math.log(0.3))
    assert rows == 2
    assert loss.item() == pytest.approx((row0 + row1) / 2, abs=1e-6)  # 0.428699
    assert loss.item() == pytest.approx(0.4286995, abs=1e-6)


def test_the_loss_is_zero_for_a_matching_head_and_positive_otherwise():
    target = G / G.sum(-1, keepdim=True)
    assert alignment_loss(target, G, shift=0)[0].item() == pytest.approx(0.0, abs=1e-7)
    assert alignment_loss(A, G, shift=0)[0].item() > 0.1


def test_rows_without_links_and_the_shift():
    g = torch.tensor([[[0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    loss, rows = alignment_loss(A, g, shift=0)
    assert rows == 1 and loss.item() == pytest.approx(-math.log(0.6), abs=1e-6)
    # shift 1: piece t is supervised at row t + 1; piece 1's links fall off the end
    loss, rows = alignment_loss(A, G, shift=1)
    assert rows == 1 and loss.item() == pytest.approx(-math.log(0.1), abs=1e-6)
    loss, rows = alignment_loss(A, torch.zeros_like(G))
    assert rows == 0 and loss.item() == 0.0
    with pytest.raises(ValueError, match=r"weights has shape \(1, 2, 3\) but align has"):
        alignment_loss(A, G[:, :1])


def test_the_default_layer_is_the_penultimate():
    cfg = GuidedAlignmentConfig(file="x")
    assert [supervised_layer(cfg, n) for n in (1, 2, 6)] == [0, 0, 4]
    assert supervised_layer(GuidedAlignmentConfig(file="x", layer=-1), 6) == 5
    with pytest.raises(ValueError, match="layer=3 is not a decoder layer"):
        supervised_layer(GuidedAlignmentConfig(file="x", layer=3), 2)


def _copy_examples(n: int, seed: int) -> Examples:
    """The copy task with its diagonal as the alignment: piece i <-> piece i."""
    seqs = random_sequences(n, 3, 7, torch.Generator().manual_seed(seed))
    links = [[x for i in range(len(s)) for x in (i, i)] for s in seqs]
    return Examples(seqs, seqs, links)


def _diagonal_share(
    model, examples: Examples, layer: int, head: int, shift: int, full_context: bool = False
) -> float:
    """Share of target pieces whose supervised row's argmax is their own source piece."""
    batch = make_batch(examples, list(range(len(examples))))
    model.eval()
    with torch.no_grad():
        _, weights = model(
            batch.src,
            batch.src_lengths,
            batch.tgt_in,
            supervised_layer=layer,
            full_context=full_context,
        )
    hits = total = 0
    for b in range(len(examples)):
        for t in range(len(examples.tgt[b])):
            hits += int(weights[b, head, t + shift].argmax()) == t
            total += 1
    return hits / total


@pytest.fixture
def one_thread():
    """A tiny model trains ~6x faster on one thread than on two shared cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("full_context", [False, True])
def test_guided_training_makes_the_supervised_head_follow_the_alignment(one_thread, full_context):
    shift = 1  # the default timing: the row that reads the piece (see guided_alignment.py)
    train_set, test_set = _copy_examples(256, 0), _copy_examples(64, 1)
    results = {}
    for weight in (None, 1.0):
        model = tiny_transformer(TOY_VOCAB, seed=0, dropout=0.0).train()
        cfg = GuidedAlignmentConfig(
            file="x", weight=weight or 1.0, layer=0, heads=[0], shift=shift,
            full_context=full_context,
        )  # fmt: skip
        train_cfg = TrainConfig(label_smoothing=0.0, guided_alignment=cfg)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        generator = torch.Generator().manual_seed(0)
        for _ in range(100):
            idx = torch.randint(0, len(train_set), (32,), generator=generator).tolist()
            batch = make_batch(train_set, idx)
            if weight is None:
                batch.align = None  # the same run without the labels: CE alone
            loss = training_terms(model, model, batch, train_cfg).loss
            assert torch.isfinite(loss)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        results[weight] = _diagonal_share(model, test_set, 0, 0, shift, full_context)
    assert results[1.0] >= 0.9, results
    assert results[None] < 0.7, results  # it is the supervision, not the task, that does it


def _reverse_alignment(tmp_path):
    """The toy reverse task's alignment file (every third line left empty) and its lines."""
    corpus = load_split(config(TRANSFORMER).data, "train")
    lines = []
    for k, s in enumerate(corpus.src):
        n = len(s.split())
        lines.append("" if k % 3 == 0 else " ".join(f"{i}-{n - 1 - i}" for i in range(n)))
    align = tmp_path / "train.align"
    align.write_text("\n".join(lines) + "\n")
    return align, lines


def test_the_training_loss_is_ce_plus_weight_times_the_alignment_term_it_reports():
    model = tiny_transformer(TOY_VOCAB, seed=0, dropout=0.0).train()
    batch = make_batch(_copy_examples(8, seed=1), list(range(8)))
    guided = GuidedAlignmentConfig(file="x", weight=0.25, layer=0, heads=[1])
    cfg = TrainConfig(label_smoothing=0.1, guided_alignment=guided)
    torch.manual_seed(0)
    terms = training_terms(model, model, batch, cfg)
    loss, aligned = terms.loss, terms.alignment
    torch.manual_seed(0)
    ce, loss_a, rows = guided_terms(model, batch, guided, 0.1, layers=2, heads=4)
    assert aligned.item() == loss_a.item() > 0
    assert rows == batch.num_target_tokens - 8  # every piece linked, no </s>
    assert loss.item() == (ce + 0.25 * loss_a).item()
    batch.align = None  # a batch without labels: CE alone, no alignment term
    assert training_terms(model, model, batch, cfg).alignment is None
    assert training_terms(model, model, batch, TrainConfig()).alignment is None


def test_training_with_an_alignment_file_end_to_end(tmp_path):
    align, lines = _reverse_alignment(tmp_path)
    guided = f"train.guided_alignment={{file: {align}, weight: 0.5, heads: all}}"
    run_dir = tmp_path / "run"
    said = []
    summary = train(config(TRANSFORMER, "train.max_steps=6", guided), run_dir, echo=said.append)
    row = summary.history[-1]
    # the alignment term is reported beside the sum it is part of
    assert 0 < row["train_alignment_loss"] < row["train_loss"] and math.isfinite(row["train_loss"])
    validations = [line for line in said if " step 6: train loss " in line]
    assert f"(alignment loss {row['train_alignment_loss']:.3f})" in validations[0]
    run = load_run(run_dir)
    assert run.config.train.guided_alignment.heads == "all"
    links = (run_dir / "store" / "train" / "links.ids").stat().st_size
    assert links > 0
    align.write_text("\n".join(lines[:-1]) + "\n")  # one line short: rebuilt, and refused
    with pytest.raises(ValueError, match=r"train\.align has \d+ lines but the corpus"):
        train(config(TRANSFORMER, "train.max_steps=6", guided), tmp_path / "run2", echo=quiet)


def test_guided_alignment_refuses_scheduled_sampling():
    from attnkit.nmt.config import TrainConfig

    with pytest.raises(ValueError, match="needs train.teacher_forcing 1.0, got 0.5"):
        TrainConfig(teacher_forcing=0.5, guided_alignment={"file": "links.align"})
    assert TrainConfig(guided_alignment={"file": "links.align"}).teacher_forcing == 1.0


def test_full_context_is_refused_for_an_rnn():
    guided = "train.guided_alignment={file: x.align, full_context: true}"
    assert config(TRANSFORMER, guided).train.guided_alignment.full_context
    with pytest.raises(ValueError, match="full_context: true needs model.arch: transformer"):
        config(guided)  # the tiny config's model is an RNN


@pytest.mark.parametrize(
    ("options", "model", "message"),
    [
        ("heads: [1]", (), r"heads=\[1\] names a head outside 0..0"),  # the RNN: one attention
        ("layer: 1", (), "layer=1 is not a decoder layer"),
        ("heads: [4]", (TRANSFORMER,), r"heads=\[4\] names a head outside 0..3"),
        ("heads: [-1]", (TRANSFORMER,), "names a head outside 0..3"),
        ("layer: -3", (TRANSFORMER,), "layer=-3 is not a decoder layer"),
        # align would read the mean of both listed heads where only head 0 learned
        ("heads: [0, 0]", (TRANSFORMER,), r"heads=\[0, 0\] names a head twice"),
    ],
)
def test_a_supervised_layer_or_head_the_model_lacks_is_a_config_error(options, model, message):
    # refused with the config, before the tokenizers and the token store are made
    guided = f"train.guided_alignment={{file: x.align, {options}}}"
    with pytest.raises(ValueError, match=message):
        config(*model, guided)
    assert config(TRANSFORMER, "train.guided_alignment={file: x.align, heads: [3], layer: -2}")


def _guided_align_command(tmp_path, options: str) -> list[str]:
    """Train a 2-step guided run with ``options`` (inside the section's braces) and return
    the ``attnkit align`` command line that scores it on one hand-made pair."""
    align, _ = _reverse_alignment(tmp_path)
    guided = f"train.guided_alignment={{file: {align}, {options}}}"
    train(config(TRANSFORMER, "train.max_steps=2", guided), tmp_path / "run", echo=quiet)
    (tmp_path / "pairs").write_text("s1 s2 ||| s2 s1\n")
    (tmp_path / "gold").write_text("1-2 2-1\n")
    run, pairs, gold = (str(tmp_path / name) for name in ("run", "pairs", "gold"))
    return ["align", run, "--bitext", pairs, "--gold", gold]


def test_align_reads_a_guided_run_where_it_was_supervised(tmp_path, capsys):
    from attnkit.cli import main

    argv = _guided_align_command(tmp_path, "layer: 0, heads: [1], shift: 0")
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "argmax, shift 0, sum merge, layer 0, head 1" in err, err
    assert main([*argv, "--head", "mean", "--shift", "1"]) == 0
    assert "shift 1, sum merge, layer 1, heads averaged" in capsys.readouterr().err  # model's view


def test_align_reads_the_mean_of_exactly_the_supervised_heads(tmp_path, capsys):
    from attnkit.cli import main

    assert main(_guided_align_command(tmp_path, "layer: 0, heads: [1, 3]")) == 0
    assert "shift 1, sum merge, layer 0, heads 1, 3 averaged" in capsys.readouterr().err


def test_align_reads_a_full_context_run_in_the_full_context_pass(tmp_path, capsys):
    from attnkit.cli import main

    assert main(_guided_align_command(tmp_path, "layer: 0, full_context: true")) == 0
    assert "argmax, shift 1, full context, sum merge, layer 0, head 0" in capsys.readouterr().err
