"""Synthetic toy tasks: copy or reverse a random sequence of symbols.

The classic sanity checks for attention models (Joey NMT's reverse task;
Graves et al. 2014's copy task): a working model learns them in minutes, and
its attention must be diagonal (copy) or anti-diagonal (reverse). Symbols
are the words ``s0 .. s{N-1}``, so the word-level tokenizer applies.
"""

from __future__ import annotations

import torch

from .corpus import ParallelCorpus

__all__ = ["TASKS", "toy_corpus"]

TASKS = ("copy", "reverse")


def toy_corpus(
    task: str,
    size: int,
    *,
    num_symbols: int = 20,
    min_len: int = 3,
    max_len: int = 12,
    seed: int = 0,
) -> ParallelCorpus:
    """``size`` pairs of ``task`` ('copy' or 'reverse'), lengths uniform in [min_len, max_len].

    The same arguments always give the same pairs (a private ``torch.Generator``).

    Raises:
        ValueError: unknown task, non-positive sizes, or ``min_len > max_len``.
    """
    if task not in TASKS:
        raise ValueError(f"toy task must be one of {TASKS}, got {task!r}")
    if size <= 0 or num_symbols <= 0 or not 0 < min_len <= max_len:
        raise ValueError(
            f"need size > 0, num_symbols > 0 and 0 < min_len <= max_len, got size={size}, "
            f"num_symbols={num_symbols}, min_len={min_len}, max_len={max_len}"
        )
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (size,), generator=generator).tolist()
    src, tgt = [], []
    for length in lengths:
        symbols = [
            f"s{i}" for i in torch.randint(num_symbols, (length,), generator=generator).tolist()
        ]
        src.append(" ".join(symbols))
        tgt.append(" ".join(symbols if task == "copy" else symbols[::-1]))
    return ParallelCorpus(src, tgt)
