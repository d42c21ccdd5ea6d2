"""The fused output layer + cross-entropy (nmt/training/vocab_loss.py, objective.token_loss).

Against PyTorch's own ``F.cross_entropy(F.linear(...))``: the loss and the
gradients of the vectors, the weight and the bias, with label smoothing, PAD
rows, both reductions, any block size; in bf16 autocast within bf16's
tolerance; and through both translators' ``token_loss``.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from attnkit.nmt.data.batching import Examples, make_batch
from attnkit.nmt.training.objective import target_cross_entropy, token_loss
from attnkit.nmt.training.vocab_loss import linear_cross_entropy
from attnkit.nmt.vocab_ids import PAD
from conftest_nmt import tiny_model, tiny_transformer

BF16_CLOSE = 2e-2  # relative: bf16 products against float32


def inputs(rows=37, dim=12, vocab=50, seed=0, bias=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, dim, generator=g, requires_grad=True)
    w = (torch.randn(vocab, dim, generator=g) * 0.3).requires_grad_()
    b = torch.randn(vocab, generator=g).requires_grad_() if bias else None
    y = torch.randint(1, vocab, (rows,), generator=g)
    y[::5] = PAD  # every fifth row is padding
    return x, w, b, y


def loss_and_grads(fn, x, w, b):
    params = [t for t in (x, w, b) if t is not None]
    for t in params:
        t.grad = None
    loss = fn()
    loss.backward()
    return loss.detach(), [t.grad.clone() for t in params]


def reference(x, w, b, y, smoothing, reduction):
    logits = F.linear(x, w, b)
    return F.cross_entropy(
        logits.float(), y, ignore_index=PAD, label_smoothing=smoothing, reduction=reduction
    )


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("block_rows", [1, 7, 256])
@pytest.mark.parametrize("bias", [True, False])
def test_equals_pytorch_cross_entropy_of_the_linear_layer(smoothing, reduction, block_rows, bias):
    x, w, b, y = inputs(bias=bias)
    want, want_grads = loss_and_grads(lambda: reference(x, w, b, y, smoothing, reduction), x, w, b)
    got, got_grads = loss_and_grads(
        lambda: linear_cross_entropy(
            x, w, b, y, ignore_index=PAD, smoothing=smoothing, reduction=reduction,
            block_rows=block_rows,
        ),  # fmt: skip
        x, w, b,
    )  # fmt: skip
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for g, h in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, h, rtol=1e-5, atol=1e-6)
    assert got_grads[0][::5].abs().max() == 0  # PAD rows get no gradient


def test_logits_far_beyond_exp_s_range_give_pytorch_s_finite_loss_and_gradients():
    """Logits of several hundred (exp overflows float32 above 88): the loss is formed
    from logits shifted by their row maximum, as F.cross_entropy's log-softmax is."""
    x, w, b, y = inputs()
    w = (w.detach() * 200).requires_grad_()  # logits up to a few hundred
    assert float(F.linear(x, w, b).detach().abs().max()) > 200
    want, want_grads = loss_and_grads(lambda: reference(x, w, b, y, 0.1, "mean"), x, w, b)
    got, got_grads = loss_and_grads(
        lambda: linear_cross_entropy(x, w, b, y, ignore_index=PAD, smoothing=0.1), x, w, b
    )
    assert torch.isfinite(want)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    for g, h in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-4)


def test_batched_shapes_and_the_scaled_backward():
    """``(B, T, D)`` vectors with ``(B, T)`` targets; a scaled loss scales every gradient."""
    x, w, b, y = inputs(rows=24)
    x3 = x.detach().view(4, 6, -1).requires_grad_()
    want, want_grads = loss_and_grads(lambda: 3.0 * reference(x, w, b, y, 0.1, "mean"), x, w, b)
    got, got_grads = loss_and_grads(
        lambda: 3.0 * linear_cross_entropy(x3, w, b, y.view(4, 6), ignore_index=PAD, smoothing=0.1),
        x3, w, b,
    )  # fmt: skip
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_grads[0].view(24, -1), want_grads[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_grads[1], want_grads[1], rtol=1e-5, atol=1e-6)


def test_without_gradients_it_only_scores():
    x, w, b, y = inputs()
    with torch.no_grad():
        got = linear_cross_entropy(x, w, b, y, ignore_index=PAD, smoothing=0.1, reduction="sum")
        want = reference(x, w, b, y, 0.1, "sum")
    assert not got.requires_grad
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_bf16_autocast_runs_the_products_in_bf16_and_the_loss_in_float32():
    x, w, b, y = inputs(rows=64, dim=32, vocab=200)
    want, want_grads = loss_and_grads(lambda: reference(x, w, b, y, 0.1, "mean"), x, w, b)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, got_grads = loss_and_grads(
            lambda: linear_cross_entropy(x, w, b, y, ignore_index=PAD, smoothing=0.1), x, w, b
        )
    assert got.dtype == torch.float32 and all(g.dtype == torch.float32 for g in got_grads)
    torch.testing.assert_close(got, want, rtol=BF16_CLOSE, atol=0)
    for g, h in zip(got_grads, want_grads, strict=True):
        assert (g - h).norm() <= BF16_CLOSE * h.norm()
    exact = reference(x, w, b, y, 0.1, "mean")
    assert got != exact  # the products really ran in bf16


def test_all_rows_padding_is_a_zero_loss_with_zero_gradients():
    x, w, b, y = inputs()
    got, grads = loss_and_grads(
        lambda: linear_cross_entropy(x, w, b, torch.full_like(y, PAD), ignore_index=PAD), x, w, b
    )
    assert float(got) == 0.0 and all(float(g.abs().max()) == 0.0 for g in grads)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"targets": torch.zeros(5, dtype=torch.long)}, "must match targets"),
        ({"reduction": "none"}, "reduction must be"),
        ({"smoothing": 1.0}, "smoothing must be in"),
    ],
)
def test_bad_arguments_are_named(change, message):
    x, w, b, y = inputs()
    kwargs = {"targets": y, "ignore_index": PAD, **change}
    with pytest.raises(ValueError, match=message):
        linear_cross_entropy(x, w, b, **kwargs)


@pytest.mark.parametrize("build", [tiny_model, tiny_transformer], ids=["rnn", "transformer"])
def test_token_loss_equals_the_cross_entropy_of_the_models_logits(build):
    """The fused path of token_loss against the logits the model returns, both architectures."""
    model = build(vocab=15)
    pairs = Examples([[4, 5, 6], [7, 8, 9, 10, 11]], [[5, 6, 7, 8], [9, 10]])
    batch = make_batch(pairs, [0, 1])
    params = list(model.parameters())

    def grads(loss):
        model.zero_grad(set_to_none=True)
        loss.backward()
        return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in params]

    logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
    want = target_cross_entropy(logits, batch, 0.1)
    want_grads = grads(want)
    got = token_loss(model, batch, 0.1, 1.0)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for g, h in zip(grads(got), want_grads, strict=True):
        torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-6)


def test_logits_false_needs_full_teacher_forcing():
    model = tiny_model()
    pairs = Examples([[4, 5]], [[6, 7]])
    batch = make_batch(pairs, [0])
    with pytest.raises(ValueError, match="logits=False needs teacher_forcing 1.0"):
        model(batch.src, batch.src_lengths, batch.tgt_in, teacher_forcing=0.5, logits=False)


class _Ids:
    """A target tokenizer stand-in for validate's BLEU: ids as words."""

    def decode(self, ids):
        return " ".join(map(str, ids))


def test_validation_loss_is_the_unsmoothed_cross_entropy_per_target_token():
    """valid_loss = sum of -log p(y_t) over every target token (</s> included) / their count,
    without label smoothing whatever the training's, over batches of any size."""
    from test_train import TINY

    from attnkit.nmt.config import RunConfig
    from attnkit.nmt.training.objective import validate

    model = tiny_model(vocab=15)
    pairs = Examples([[4, 5, 6], [7, 8, 9, 10, 11], [12, 4]], [[5, 6, 7, 8], [9, 10], [11]])
    config = RunConfig.from_dict(TINY, ["decode.batch_size=2", "train.label_smoothing=0.1"])
    scores = validate(model, pairs, ["5 6 7 8", "9 10", "11"], _Ids(), config, "cpu")
    batch = make_batch(pairs, [0, 1, 2])
    with torch.no_grad():
        logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)  # (3, 5, V)
    gold = batch.tgt_out.reshape(-1)
    total = F.cross_entropy(logits.reshape(len(gold), -1), gold, ignore_index=PAD, reduction="sum")
    assert int((gold != PAD).sum()) == 10  # 4 + 2 + 1 tokens and three </s>
    assert scores["valid_loss"] == pytest.approx(float(total) / 10, rel=1e-5)
    assert scores["valid_ppl"] == pytest.approx(math.exp(float(total) / 10), rel=1e-5)


def test_validation_bleu_translates_sources_cut_as_translate_cuts_them(monkeypatch):
    # an RNN run translated a validation source of any length in full: one line of 20,000
    # words in a dev file made a greedy search of 20,000 steps and used 15 GB and more
    from test_train import TINY

    from attnkit.nmt.config import RunConfig
    from attnkit.nmt.training import objective

    seen = []

    def decode(model, examples, **kwargs):
        seen.extend(len(s) for s in examples.src)
        return real(model, examples, **kwargs)

    real = objective.decode_examples
    monkeypatch.setattr(objective, "decode_examples", decode)
    pairs = Examples([[4] * 3000, [5, 6]], [[5, 6, 7], [8]])
    config = RunConfig.from_dict(TINY, ["data.max_src_len=7", "decode.max_len_b=2"])
    objective.validate(tiny_model(vocab=15), pairs, ["5 6 7", "8"], _Ids(), config, "cpu")
    assert seen == [7, 2]  # data.max_src_len, as `attnkit translate` and `evaluate` cut
