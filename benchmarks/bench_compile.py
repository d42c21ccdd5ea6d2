"""torch.compile and the branch-free attention core (issues 20 and 12.3).

- ``compile_train_step``: one training step (forward, backward, SGD) of a stack
  of MultiHeadAttention self-attention layers with key padding and a causal
  mask, compiled (Inductor, ``fullgraph=True``) / eager. Compile time excluded.
- ``empty_rows_branch_free_vs_old``: the fused path's fully-masked-row handling,
  branch-free (``torch.where`` on the output, no host sync) / the old branch
  (``if not bool(row_has_key.all())``), both on the same resolved key-padding
  mask with no empty row (the old code's fast case), without key zeroing.
- ``zero_dead_keys_cost``: ``scaled_dot_product_attention`` with a key-padding
  mask, which zeroes the padded keys and values so a NaN there cannot leak /
  the same kernel call without the zeroing.

Timings use ``torch.utils.benchmark`` (``blocked_autorange``); the two sides
alternate over repeats and the medians are compared.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils import benchmark

from attnkit import MultiHeadAttention, padding_mask, scaled_dot_product_attention
from attnkit.attention.functional import _fused_attention, resolve_mask

from .report import Result, Table
from .timing import Comparison

B, H, DH = 8, 8, 64


def compare_timers(candidate, baseline, *, repeats: int, min_run_time: float) -> Comparison:
    """Median seconds per call of two callables, measured alternately."""
    timers = [
        benchmark.Timer("fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
        for fn in (candidate, baseline)
    ]
    times: list[list[float]] = [[], []]
    for fn in (candidate, baseline):  # warm-up
        fn()
    for i in range(repeats):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for side in order:
            times[side].append(timers[side].blocked_autorange(min_run_time=min_run_time).median)
    return Comparison(statistics.median(times[0]), statistics.median(times[1]))


class _Stack(nn.Module):
    """``layers`` pre-norm self-attention blocks: ``x + MHA(LayerNorm(x))``."""

    def __init__(self, width: int, heads: int, layers: int) -> None:
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(layers))
        self.attns = nn.ModuleList(MultiHeadAttention(width, heads) for _ in range(layers))

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        for norm, attn in zip(self.norms, self.attns, strict=True):
            x = x + attn(norm(x), key_padding_mask=keep, is_causal=True)[0]  # (B, T, E)
        return x


def compile_train_step(repeats: int, batch=8, t=128, width=256, heads=4, layers=2):
    torch.manual_seed(0)
    x = torch.randn(batch, t, width)
    keep = padding_mask(torch.randint(t // 2, t + 1, (batch,)), t)  # (B, T)
    eager = _Stack(width, heads, layers).train()
    model = _Stack(width, heads, layers).train()
    model.load_state_dict(eager.state_dict())
    compiled = torch.compile(model, fullgraph=True)

    def step(module, forward):
        opt = torch.optim.SGD(module.parameters(), lr=1e-3)

        def run():
            opt.zero_grad(set_to_none=True)
            forward(x, keep).square().mean().backward()
            opt.step()

        return run

    cmp = compare_timers(
        step(model, compiled), step(eager, eager), repeats=repeats, min_run_time=0.5
    )
    table = Table(
        f"MHA training step, torch.compile vs eager (B={batch}, T={t}, E={width}, H={heads}, "
        f"{layers} layers, key padding + causal; ratio = compiled/eager, the same "
        f"{sum(p.numel() for p in eager.parameters()):,} parameters on both sides)",
        ["compiled ms", "eager ms", "ratio"],
    )
    table.add(cmp.candidate_s * 1e3, cmp.baseline_s * 1e3, cmp.ratio)
    return table, {"compile_train_step_vs_eager": cmp.ratio}


def _old_fused(query, key, value, allowed, scale):
    """The fused path before issue 20: a host sync decides whether rows are empty."""
    empty_rows = None
    row_has_key = allowed.any(dim=-1, keepdim=True)  # (..., Tq, 1)
    if not bool(row_has_key.all()):
        empty_rows = ~row_has_key
        allowed = allowed | empty_rows
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=allowed, scale=scale)
    return output if empty_rows is None else output.masked_fill(empty_rows, 0.0)


def _padded_qkv(t: int):
    gen = torch.Generator().manual_seed(t)
    q, k, v = (torch.randn(B, H, t, DH, generator=gen) for _ in range(3))  # (B, H, T, Dh)
    lengths = torch.randint(t // 2, t + 1, (B,), generator=gen)
    keep = padding_mask(lengths, t)[:, None, None, :]  # (B, 1, 1, T)
    return q, k, v, keep


def masked_row_sides(t: int) -> dict[str, Callable[[], Tensor]]:
    """The four timed calls for one length ``T``, each from the same padded q, k, v:
    ``branch_free`` and ``old_branch`` on one resolved mask (resolved before timing),
    ``zeroed`` (the public call) and ``unzeroed``, each resolving the user's mask."""
    q, k, v, keep = _padded_qkv(t)
    scale = 1.0 / math.sqrt(DH)
    resolved = resolve_mask(keep, query=q, tk=t)
    return {
        "branch_free": lambda: _fused_attention(q, k, v, resolved, scale, 0.0),
        "old_branch": lambda: _old_fused(q, k, v, resolved.allowed, scale),
        "zeroed": lambda: scaled_dot_product_attention(q, k, v, keep),
        "unzeroed": lambda: _fused_attention(
            q, k, v, resolve_mask(keep, query=q, tk=t), scale, 0.0
        ),
    }


def _masked_row_case(t: int, repeats: int) -> tuple[Comparison, Comparison]:
    """(branch-free / old branch, zeroed / unzeroed) for one length ``T``."""
    side = masked_row_sides(t)
    with torch.no_grad():
        rows = compare_timers(
            side["branch_free"], side["old_branch"], repeats=repeats, min_run_time=0.3
        )
        zero = compare_timers(side["zeroed"], side["unzeroed"], repeats=repeats, min_run_time=0.3)
    return rows, zero


def masked_row_costs(lengths: list[int], repeats: int):
    table = Table(
        f"Fused attention with key padding (B={B}, H={H}, Dh={DH}, Tq=Tk=T, forward): "
        "branch-free empty rows / old branch, and zeroing padded K,V / not zeroing",
        ["T", "branch-free ms", "old branch ms", "ratio", "zeroed ms", "unzeroed ms", "ratio"],
    )
    ratios = {}
    for t in lengths:
        rows, zero = _masked_row_case(t, repeats)
        ms = [x * 1e3 for x in (rows.candidate_s, rows.baseline_s)]
        table.add(t, *ms, rows.ratio, zero.candidate_s * 1e3, zero.baseline_s * 1e3, zero.ratio)
        ratios[f"empty_rows_branch_free_vs_old_T{t}"] = rows.ratio
        ratios[f"zero_dead_keys_cost_T{t}"] = zero.ratio
    return table, ratios


def run(quick: bool) -> Result:
    repeats = 5 if quick else 9
    result = Result()
    for table, ratios in (
        masked_row_costs([512] if quick else [512, 1024], repeats),
        compile_train_step(3 if quick else 7),
    ):
        result.tables.append(table)
        result.ratios.update(ratios)
    return result
