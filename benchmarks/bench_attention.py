"""Attention kernels: attnkit against PyTorch's fused SDPA and a naive softmax(QK^T)V.

- ``sdpa_vs_torch``: attnkit.scaled_dot_product_attention (no weights) / torch
  SDPA, forward and forward+backward, causal or not (B=8, H=8, Dh=64).
- ``sdpa_weights_vs_naive``: attnkit with ``return_weights=True`` / a naive
  ``softmax(Q K^T / sqrt(Dh)) V`` that also keeps the weights; time and peak memory.
- ``sdpa_training_vs_torch``: attention as a Transformer trains it (a key padding
  mask, attention dropout 0.1 or none; 2,560 query tokens a batch as in the
  Transformer preset, H=4, Dh=64, T = 20, 128, 512), forward+backward in fp32
  and bf16, attnkit / torch SDPA with the same arguments.
- ``additive_precompute_speedup``: Bahdanau attention over a decoding of T
  steps, recomputing ``W_k h`` every step / computing it once per sentence.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnkit import AdditiveScore, Attention, scaled_dot_product_attention

from .report import Result, Table
from .timing import compare, peak_memory_mb

B, H, DH = 8, 8, 64


def _qkv(t: int, grad: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(t)
    return tuple(
        torch.randn(B, H, t, DH, generator=gen).requires_grad_(grad) for _ in range(3)
    )  # 3 x (B, H, T, Dh)


def _forward_backward(fn):
    def run():
        fn().sum().backward()

    return run


def naive_attention(q, k, v):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)  # (B,H,T,T)
    return weights @ v, weights


def sdpa_vs_torch(lengths: list[int], repeats: int) -> tuple[Table, dict[str, float]]:
    table = Table(
        "attnkit SDPA vs torch SDPA (no weights; B=8, H=8, Dh=64; ratio = attnkit/torch)",
        ["T", "causal", "pass", "attnkit ms", "torch ms", "ratio"],
    )
    ratios = {}
    for t in lengths:
        for causal in (False, True):
            for backward in (False, True):
                q, k, v = _qkv(t, backward)

                def ours(q=q, k=k, v=v, c=causal):
                    return scaled_dot_product_attention(q, k, v, is_causal=c)

                def theirs(q=q, k=k, v=v, c=causal):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=c)

                if backward:
                    ours, theirs = _forward_backward(ours), _forward_backward(theirs)
                with torch.set_grad_enabled(backward):
                    cmp = compare(ours, theirs, repeats=repeats)
                step = "fwd+bwd" if backward else "fwd"
                table.add(t, causal, step, cmp.candidate_s * 1e3, cmp.baseline_s * 1e3, cmp.ratio)
                ratios[f"sdpa_vs_torch_T{t}_{'causal' if causal else 'full'}_{step}"] = cmp.ratio
    return table, ratios


def weights_vs_naive(lengths: list[int], repeats: int) -> tuple[Table, dict[str, float]]:
    table = Table(
        "attnkit SDPA with weights vs naive softmax(QK^T/sqrt(Dh))V "
        "(forward; ratio = attnkit/naive)",
        ["T", "attnkit ms", "naive ms", "time ratio", "attnkit MiB", "naive MiB", "memory ratio"],
    )
    ratios = {}
    for t in lengths:
        q, k, v = _qkv(t, False)
        with torch.no_grad():
            cmp = compare(
                lambda q=q, k=k, v=v: scaled_dot_product_attention(q, k, v, return_weights=True),
                lambda q=q, k=k, v=v: naive_attention(q, k, v),
                repeats=repeats,
            )
        setup = (
            "import math\nfrom attnkit import scaled_dot_product_attention as sdpa\n"
            f"q, k, v = (torch.randn({B}, {H}, {t}, {DH}) for _ in range(3))"
        )
        mine = peak_memory_mb(setup, "out = sdpa(q, k, v, return_weights=True)")
        naive = peak_memory_mb(
            setup,
            "w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)\nout = w @ v",
        )
        table.add(
            t, cmp.candidate_s * 1e3, cmp.baseline_s * 1e3, cmp.ratio, mine, naive, mine / naive
        )
        ratios[f"sdpa_weights_vs_naive_T{t}"] = cmp.ratio
        ratios[f"sdpa_weights_memory_vs_naive_T{t}"] = mine / naive
    return table, ratios


def training_vs_torch(repeats: int, heads=4, tokens=2560, p=0.1):
    """Attention as a Transformer layer trains it: padded keys, with and without dropout."""
    table = Table(
        f"Training-mode attention with key padding ({tokens} query tokens a batch, H={heads}, "
        f"Dh={DH}; forward+backward; ratio = attnkit/torch SDPA with the same arguments)",
        ["dtype", "T", "B", "dropout", "attnkit ms", "torch ms", "ratio"],
    )
    ratios = {}
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        for t in (20, 128, 512):
            batch = tokens // t
            lengths = torch.randint(t // 2, t + 1, (batch,), generator=gen)
            mask = (torch.arange(t) < lengths[:, None])[:, None, None, :]  # (B, 1, 1, T)
            q, k, v = (
                torch.randn(batch, heads, t, DH, generator=gen).to(dtype).requires_grad_()
                for _ in range(3)
            )  # 3 x (B, H, T, Dh)
            for drop in (p, 0.0):

                def ours(q=q, k=k, v=v, mask=mask, drop=drop):
                    return scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=drop)

                def theirs(q=q, k=k, v=v, mask=mask, drop=drop):
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)

                cmp = compare(_forward_backward(ours), _forward_backward(theirs), repeats=repeats)
                name = str(dtype).removeprefix("torch.")
                row = (name, t, batch, drop, cmp.candidate_s * 1e3, cmp.baseline_s * 1e3)
                table.add(*row, cmp.ratio)
                ratios[f"sdpa_training_vs_torch_{name}_T{t}_p{drop}"] = cmp.ratio
    return table, ratios


def additive_precompute(repeats: int, batch=64, src_len=50, hidden=512, steps=20):
    """Bahdanau attention for one decoding of ``steps`` target words."""
    torch.manual_seed(0)
    attend = Attention(AdditiveScore(hidden, 2 * hidden, hidden))
    keys = torch.randn(batch, src_len, 2 * hidden)  # bidirectional encoder states
    queries = torch.randn(steps, batch, hidden)

    def decode(precompute: bool):
        prepared = attend.score.prepare_keys(keys) if precompute else None
        return torch.stack([attend(q, keys, prepared_keys=prepared)[0] for q in queries])

    table = Table(
        f"Additive attention per decoder step (B={batch}, S={src_len}, hidden={hidden}, "
        f"{steps} steps; speedup = recompute/precompute)",
        ["pass", "precomputed ms/step", "recomputed ms/step", "speedup"],
    )
    ratios = {}
    for backward in (False, True):
        keys.requires_grad_(backward)
        fns = [lambda p=p: decode(p) for p in (True, False)]
        if backward:
            fns = [_forward_backward(fn) for fn in fns]
        with torch.set_grad_enabled(backward):
            cmp = compare(*fns, repeats=repeats)
        step = "fwd+bwd" if backward else "fwd"
        table.add(step, cmp.candidate_s / steps * 1e3, cmp.baseline_s / steps * 1e3, cmp.speedup)
        ratios["additive_precompute_speedup" + ("_fwd_bwd" if backward else "")] = cmp.speedup
    return table, ratios


def run(quick: bool) -> Result:
    lengths = [128, 1024] if quick else [128, 512, 1024, 2048]
    repeats = 3 if quick else 7
    result = Result()
    for table, ratios in (
        sdpa_vs_torch(lengths, repeats),
        weights_vs_naive([512] if quick else [512, 1024, 2048], repeats),
        training_vs_torch(repeats),
        additive_precompute(repeats),
    ):
        result.tables.append(table)
        result.ratios.update(ratios)
    result.ratios["sdpa_vs_torch"] = result.ratios["sdpa_vs_torch_T1024_full_fwd"]
    first = "sdpa_weights_vs_naive_T512"
    result.ratios["sdpa_weights_vs_naive"] = result.ratios[first]
    return result
