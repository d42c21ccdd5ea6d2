"""The parts of a training step where attnkit replaced PyTorch's default, each against it.

``python -m benchmarks.bench_step_parts`` (use ``OMP_NUM_THREADS`` to pin threads).
Forward plus backward, fp32 and bf16 autocast, alternated (:func:`.timing.compare`):

- the output layer and loss: :func:`attnkit.nmt.training.vocab_loss.linear_cross_entropy`
  against ``F.cross_entropy(F.linear(x, W, b).float(), y)`` for the Transformer preset's
  batch (2,560 target positions, every seventh PAD, D 256, V 8,000, label smoothing 0.1);
- dropout: :func:`attnkit.attention.dropout.dropout` against ``F.dropout`` on a
  feed-forward activation (128 x 20 x 1024, p 0.2);
- the multi30k RNN's GRUs (256 -> 384; the encoder's bidirectional over 96 sentences
  of 10-20 tokens, the decoder's over 96 x 20 tokens from a given state) through
  :func:`attnkit.nmt.models.rnn.autocast_rnn.run_rnn` (attnkit's GRU layers, in bf16
  under autocast) against ``nn.GRU`` (over a packed sequence for the encoder), which
  plain autocast leaves in float32;
- the Adam update: :func:`attnkit.nmt.training.optimizer.adam` (PyTorch's fused kernel)
  against ``torch.optim.Adam``'s default (``foreach``) on the parameters and random
  gradients of the Transformer preset's model and the quick preset's (fp32 master
  weights in both precisions, so one row each);
- the attention kernel: a whole bf16 training step of the Transformer preset's model
  (``bench_precision``'s batches) with :func:`attnkit.attention.attend` choosing its
  kernel per dtype and length against the same step forced onto PyTorch's fused
  kernel (bf16 only: in fp32 attnkit already takes the fused kernel).

Both sides of each row do the same arithmetic on the same tensors; the ratio is
attnkit's time over PyTorch's. On a CPU without ``avx512_bf16``/``amx_bf16`` the
bf16 rows are left out (the title says so): bf16 is emulated there, and slow.
"""

from __future__ import annotations

import argparse
import sys
from unittest import mock

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence

from attnkit.attention import functional as attention_functional
from attnkit.attention.dropout import dropout
from attnkit.nmt.config import TrainConfig
from attnkit.nmt.models.rnn.autocast_rnn import run_rnn
from attnkit.nmt.precision import cpu_bf16_flag, resolve_precision
from attnkit.nmt.training.optimizer import adam
from attnkit.nmt.training.vocab_loss import linear_cross_entropy

from .bench_precision import batches, cpu_name, models, stepper
from .report import Result, Table
from .timing import compare

PAD = 0


def _backward(fn, *leaves):
    def step():
        for t in leaves:
            t.grad = None
        out = fn()
        (out if out.dim() == 0 else out.float().sum()).backward()

    return step


def _autocast(fn, bf16: bool):
    def run():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return fn()

    return run


def loss_pair(bf16: bool):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2560, 256, generator=g, requires_grad=True)
    w = (torch.randn(8000, 256, generator=g) * 0.05).requires_grad_()
    b = torch.zeros(8000, requires_grad=True)
    y = torch.randint(4, 8000, (2560,), generator=g)
    y[::7] = PAD

    def fused():
        return linear_cross_entropy(x, w, b, y, ignore_index=PAD, smoothing=0.1)

    def plain():
        return F.cross_entropy(F.linear(x, w, b).float(), y, ignore_index=PAD, label_smoothing=0.1)

    return _backward(_autocast(fused, bf16), x, w, b), _backward(_autocast(plain, bf16), x, w, b)


def dropout_pair(bf16: bool):
    dtype = torch.bfloat16 if bf16 else torch.float32
    x = torch.randn(128, 20, 1024).to(dtype).requires_grad_()
    return (
        _backward(lambda: dropout(x, 0.2), x),
        _backward(lambda: F.dropout(x, 0.2, training=True), x),
    )


def gru_pair(bf16: bool, bidirectional: bool):
    """The multi30k RNN's GRUs: the encoder's (bidirectional, 10-20 tokens, packed for
    PyTorch) and the decoder's (one direction, 20 tokens, from a given state)."""
    torch.manual_seed(0)
    gru = torch.nn.GRU(256, 384, batch_first=True, bidirectional=bidirectional)
    x = torch.randn(96, 20, 256, requires_grad=True)
    lengths, state = None, torch.randn(1, 96, 384)
    if bidirectional:
        lengths, state = torch.randint(10, 21, (96,)), None
        lengths[0] = 20

    def ours():
        out, final = run_rnn(gru, x, state, lengths)
        return out.float().sum() + final.float().sum()

    def plain():
        if lengths is None:
            out, final = gru(x, state)
            return out.float().sum() + final.float().sum()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, final = gru(packed)
        return out.data.float().sum() + final.float().sum()

    leaves = (x, *gru.parameters())
    return _backward(_autocast(ours, bf16), *leaves), _backward(_autocast(plain, bf16), *leaves)


def adam_pair(model: torch.nn.Module):
    """One Adam update each: attnkit's optimiser and PyTorch's default, on copies of the
    same parameters with the same gradients."""
    cfg = TrainConfig(lr=1e-4, adam_betas=(0.9, 0.98))

    def updater(make):
        params = [p.detach().clone().requires_grad_() for p in model.parameters()]
        g = torch.Generator().manual_seed(0)
        for p in params:
            p.grad = torch.randn(p.shape, generator=g) * 1e-3
        return make(params).step

    ours = updater(lambda params: adam(params, cfg))
    theirs = updater(lambda params: torch.optim.Adam(params, lr=cfg.lr, betas=cfg.adam_betas))
    return ours, theirs


def attention_kernel_pair():
    """A bf16 Transformer preset step: attnkit's kernel choice against always the fused one."""
    _, model, vocab, sentences = models()["transformer"]
    step = stepper(model, resolve_precision("bf16", torch.device("cpu")), batches(vocab, sentences))

    def always_fused():
        with mock.patch.object(attention_functional, "_explicit_is_faster", lambda *a: False):
            step()

    return step, always_fused


def _adam_rows():
    rows = []
    for preset, (name, model, _, _) in models().items():
        count = sum(p.numel() for p in model.parameters())
        part = f"Adam update, {name}, {count:,} parameters"
        rows.append((f"adam_{preset}", part, "fp32", lambda model=model: adam_pair(model)))
    return rows


def _rows():
    """(key, part, precision, a function that builds the pair to time) for every row."""
    loss, drop = "output layer + loss (2560 x 256 -> 8000)", "dropout (128 x 20 x 1024, p 0.2)"
    bi_gru, gru = "bi-GRU 256 -> 384, 96 x 10-20 tokens", "GRU 256 -> 384, 96 x 20 tokens"
    kernel = "Transformer preset step, attention kernel per dtype"
    return [
        ("output_fp32", loss, "fp32", lambda: loss_pair(False)),
        ("output_bf16", loss, "bf16", lambda: loss_pair(True)),
        ("dropout_fp32", drop, "fp32", lambda: dropout_pair(False)),
        ("dropout_bf16", drop, "bf16", lambda: dropout_pair(True)),
        ("bi-GRU_fp32", bi_gru, "fp32", lambda: gru_pair(False, True)),
        ("bi-GRU_bf16", bi_gru, "bf16", lambda: gru_pair(True, True)),
        ("GRU_fp32", gru, "fp32", lambda: gru_pair(False, False)),
        ("GRU_bf16", gru, "bf16", lambda: gru_pair(True, False)),
        ("attention_kernel_bf16", kernel, "bf16", attention_kernel_pair),
        *_adam_rows(),
    ]


def run(quick: bool) -> Result:
    repeats, warmup = (3, 1) if quick else (7, 2)
    emulated = cpu_bf16_flag() is None
    left_out = "; bf16 rows left out: this CPU emulates bf16" if emulated else ""
    table = Table(
        f"Step parts, forward + backward (Adam: one update), {torch.get_num_threads()} "
        f"thread(s); {cpu_name()}{left_out}",
        ["part", "precision", "attnkit ms", "PyTorch ms", "attnkit/PyTorch"],
    )
    ratios = {}
    rows = [row for row in _rows() if not (emulated and row[2] == "bf16")]
    for key, part, precision, make in rows:
        ours, theirs = make()
        timing = compare(ours, theirs, repeats=repeats, warmup=warmup)
        table.add(part, precision, timing.candidate_s * 1e3, timing.baseline_s * 1e3,
                  timing.ratio)  # fmt: skip
        ratios[f"step_part_{key}"] = timing.ratio
    return Result([table], ratios)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_step_parts",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args(argv)
    for table in run(args.quick).tables:
        print(table.to_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
