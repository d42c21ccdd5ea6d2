"""Length-bucketed batches of token ids, padded, with source padding masks.

An example is a source id list and a target id list (no specials). A batch
holds ``src = [x1..xn EOS]`` padded with PAD, ``tgt_in = [BOS y1..ym]`` and
``tgt_out = [y1..ym EOS]`` (teacher forcing: the decoder reads ``tgt_in`` and
is trained to predict ``tgt_out``). The source padding mask is built once, by
the translator's ``encode``, from ``src_lengths``.

Bucketing (as in Sennrich et al. 2017's Nematus / torchtext's BucketIterator):
shuffle all examples, cut the shuffled list into pools of ``pool_batches``
batches, sort each pool by length and cut it into batches, then shuffle the
batch order. Each example appears exactly once per epoch, padding is small,
and the order depends only on the ``torch.Generator`` passed in. An epoch is
one int32 array of example indices (4 bytes an example) and the shuffled
batch order (:class:`EpochBatches`); a batch is a view into it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from ..vocab_ids import BOS, EOS, PAD

__all__ = [
    "Batch",
    "EpochBatches",
    "Examples",
    "bucket_batches",
    "encode_examples",
    "make_batch",
    "sorted_batches",
]


@dataclass
class Examples:
    """Tokenized parallel data; ``tgt`` is None for source-only input.

    ``src`` and ``tgt`` are lists of id lists, or the memory-mapped sides of a
    token store (:class:`attnkit.nmt.data.store.RaggedIds`), which index the same way.
    ``links`` (guided alignment) holds per pair its piece-level alignment links
    as a flat ``[s0, t0, s1, t1, ...]`` list (empty: no alignment for the pair).
    """

    src: Sequence[Sequence[int]]
    tgt: Sequence[Sequence[int]] | None = None
    links: Sequence[Sequence[int]] | None = None
    _lengths: tuple[np.ndarray, np.ndarray | None] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __len__(self) -> int:
        return len(self.src)

    def lengths(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Tokens per source and per target sentence (no specials), ``(N,)`` integers each.

        Read once, then kept: the sides must not change afterwards.
        """
        if self._lengths is None:
            tgt = None if self.tgt is None else _side_lengths(self.tgt)
            self._lengths = (_side_lengths(self.src), tgt)
        return self._lengths


def _side_lengths(side: Sequence[Sequence[int]]) -> np.ndarray:
    if hasattr(side, "lengths"):
        return side.lengths()
    return np.fromiter(map(len, side), dtype=np.int64, count=len(side))


@dataclass
class Batch:
    """A padded batch.

    Attributes:
        src: source ids ``[x.. EOS]`` padded with PAD, (B, S), long.
        src_lengths: real source lengths including EOS, (B,), long.
        tgt_in: decoder input ``[BOS y..]``, (B, T), long; None without targets.
        tgt_out: decoder target ``[y.. EOS]``, (B, T), long; None without targets.
        indices: each row's position in the :class:`Examples`, (B,), long.
        align: guided-alignment labels, (B, T, S) float, 1 where target piece ``t``
            (row of ``tgt_out``) is linked to source piece ``s``, else 0 (``</s>``
            rows and columns, PAD, and pairs without alignment all 0); None when
            the examples carry no links.
    """

    src: Tensor
    src_lengths: Tensor
    tgt_in: Tensor | None
    tgt_out: Tensor | None
    indices: Tensor
    align: Tensor | None = None

    @property
    def num_target_tokens(self) -> int:
        """Real (non-PAD) target tokens, EOS included: the tokens the loss counts."""
        return 0 if self.tgt_out is None else int((self.tgt_out != PAD).sum())

    def to(self, device: torch.device | str) -> Batch:
        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device, non_blocking=True)

        return Batch(*(move(getattr(self, f)) for f in self.__dataclass_fields__))


def _pad(rows: Sequence[Sequence[int]]) -> Tensor:
    out = torch.full((len(rows), max((len(r) for r in rows), default=0)), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.as_tensor(row, dtype=torch.long)
    return out  # (B, max len)


def make_batch(examples: Examples, indices: Sequence[int]) -> Batch:
    """Pad the examples at ``indices`` (in that order) into a :class:`Batch`."""
    src_rows = [[*examples.src[i], EOS] for i in indices]
    src = _pad(src_rows)  # (B, S)
    src_lengths = torch.tensor([len(r) for r in src_rows], dtype=torch.long)  # (B,)
    tgt_in = tgt_out = None
    if examples.tgt is not None:
        tgt_in = _pad([[BOS, *examples.tgt[i]] for i in indices])  # (B, T)
        tgt_out = _pad([[*examples.tgt[i], EOS] for i in indices])  # (B, T)
    align = None
    if examples.links is not None and tgt_out is not None:
        align = torch.zeros(len(indices), tgt_out.shape[1], src.shape[1])  # (B, T, S)
        for row, i in enumerate(indices):
            flat = torch.as_tensor(examples.links[i], dtype=torch.long).view(-1, 2)  # (links, 2)
            align[row, flat[:, 1], flat[:, 0]] = 1.0
    return Batch(
        src,
        src_lengths,
        tgt_in,
        tgt_out,
        torch.as_tensor(np.asarray(indices, dtype=np.int64)),
        align,
    )


def _by_length(lengths: tuple[np.ndarray, np.ndarray | None], indices: np.ndarray) -> np.ndarray:
    """``indices`` sorted by decreasing source, then target, length; ties keep their order."""
    src, tgt = lengths

    def negated(side: np.ndarray) -> np.ndarray:  # lengths may be unsigned (a store's uint16)
        return -side[indices].astype(np.int64)

    keys = (negated(src),) if tgt is None else (negated(tgt), negated(src))
    return indices[np.lexsort(keys)]  # lexsort is stable; its last key is the primary one


class EpochBatches(Sequence):
    """One epoch's batches: batch ``k`` is ``order[j * size : (j + 1) * size]`` for
    ``j = shuffle[k]``, a view (int32 or int64 example indices), not a copy.

    Slicing gives the batches from there on, as another :class:`EpochBatches`
    (a resumed epoch skips the batches it trained).
    """

    def __init__(self, order: np.ndarray, size: int, shuffle: np.ndarray) -> None:
        self.order = order
        self.size = size
        self.shuffle = shuffle

    def __len__(self) -> int:
        return len(self.shuffle)

    def __getitem__(self, k: int | slice) -> np.ndarray | EpochBatches:  # type: ignore[override]
        if isinstance(k, slice):
            return EpochBatches(self.order, self.size, self.shuffle[k])
        start = int(self.shuffle[k]) * self.size
        return self.order[start : start + self.size]

    def __iter__(self) -> Iterator[np.ndarray]:
        for j in self.shuffle.tolist():
            yield self.order[j * self.size : (j + 1) * self.size]


def bucket_batches(
    examples: Examples, batch_size: int, *, generator: torch.Generator, pool_batches: int = 50
) -> EpochBatches:
    """One epoch of index batches: shuffled, sorted by length within pools, batch order shuffled.

    Each batch is sorted by decreasing source (then target) length. Every
    index in ``range(len(examples))`` appears in exactly one batch. Only the
    lengths are read, and the whole epoch is one array of int32 indices (int64
    from 2**31 examples on), sorted pool by pool in place: 4 bytes an example,
    so a corpus of millions of pairs is never materialised. The draws from
    ``generator`` (a permutation of the examples, then one of the batches) and
    so the batches are those of the earlier int64 lists, batch for batch.

    Raises:
        ValueError: ``batch_size`` or ``pool_batches`` is not positive.
    """
    if batch_size <= 0 or pool_batches <= 0:
        raise ValueError(
            f"batch_size and pool_batches must be > 0, got {batch_size} and {pool_batches}"
        )
    lengths = examples.lengths()
    n = len(examples)
    dtype = torch.int32 if n < 2**31 else torch.int64  # the same draws either way
    order = torch.randperm(n, generator=generator, dtype=dtype).numpy()  # (N,)
    pool = batch_size * pool_batches  # a multiple of batch_size: batches never span pools
    for start in range(0, n, pool):
        order[start : start + pool] = _by_length(lengths, order[start : start + pool])
    shuffle = torch.randperm(-(-n // batch_size), generator=generator).numpy()  # (batches,)
    return EpochBatches(order, batch_size, shuffle)


def sorted_batches(examples: Examples, batch_size: int) -> list[list[int]]:
    """Deterministic batches for evaluation: all examples sorted by decreasing length.

    Put results back in input order with ``Batch.indices``.
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be > 0, got {batch_size}")
    order = _by_length(examples.lengths(), np.arange(len(examples))).tolist()
    return [order[j : j + batch_size] for j in range(0, len(order), batch_size)]


def encode_examples(
    src_texts: Sequence[str],
    tgt_texts: Sequence[str] | None,
    src_tok,
    tgt_tok,
    *,
    max_src_len: int | None = None,
    max_tgt_len: int | None = None,
) -> tuple[Examples, int]:
    """Tokenize texts; drop pairs longer than the limits. Returns (examples, dropped count).

    Limits count tokens without specials; ``None`` keeps everything (use it for
    test sets, whose sentences must all be translated).
    """
    src_ids = [src_tok.encode(t) for t in src_texts]
    tgt_ids = None if tgt_texts is None else [tgt_tok.encode(t) for t in tgt_texts]
    keep = [
        i
        for i in range(len(src_ids))
        if (max_src_len is None or len(src_ids[i]) <= max_src_len)
        and (tgt_ids is None or max_tgt_len is None or len(tgt_ids[i]) <= max_tgt_len)
    ]
    examples = Examples(
        [src_ids[i] for i in keep], None if tgt_ids is None else [tgt_ids[i] for i in keep]
    )
    return examples, len(src_ids) - len(keep)
