"""Word alignments from attention: forced decoding, subwords merged to words, Pharaoh format.

The given target is decoded with teacher forcing (``Translator.attention_maps``,
no search), and its cross-attention is turned into links between source and
target *words* (whitespace tokens, as in the gold files):

1. Heads and layers: ``(B, L, H, T, S)`` -> ``(B, T, S)`` by picking one layer
   and head or averaging them (:class:`~attnkit.nmt.decoding.selection.HeadSelection`,
   the selector translate uses too: by default the model's alignment layer,
   heads averaged; an RNN has one of each).
2. Timing: row ``t`` of the forced pass is the step that *predicts* target
   piece ``t`` (its input is piece ``t-1``). ``shift=1`` takes instead the row
   of the step whose *input* is piece ``t`` (row ``t+1``): attention often
   lags one output step behind the word it is said to align, as reported for
   Transformers by Chen et al. 2020 (Shift-Att) and for one of the RNN
   systems of Koehn & Knowles 2017 (sec. 3.5). The row of ``</s>``
   (``shift=0``) or of ``<s>`` (``shift=1``) and the source ``</s>`` column
   are dropped; the other weights are kept as they are (not renormalised).
3. Subwords to words (:func:`merge_pieces`): a source word's weight is the
   ``sum`` (its attention mass) or the ``max`` over its pieces; a target
   word's row is the mean (``sum``) or the ``max`` over its pieces' rows.
4. Optionally (``jump_prior``), each sentence's word weights are mixed with their
   posterior under an HMM jump prior (:mod:`~attnkit.nmt.analysis.jump_prior`).
5. Links (:func:`extract_links`): ``argmax`` links each target word to its most
   attended source word; ``threshold`` keeps every pair with weight >= tau.

Links are ``(i, j)`` = (source word, target word), 0-based; Pharaoh text
writes them ``i-j``. Gold files mark sure links ``i-j`` and possible ones
``ipj`` (Och & Ney 2003), 1-based in the WPT 2003 sets.

Notation: ``B`` batch, ``L`` layers, ``H`` heads, ``T`` target pieces (+1 for
``</s>``), ``S`` source pieces (+1 for ``</s>``), ``Tw``/``Sw`` words.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import compress
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from ..data import word_links
from ..data.batching import Examples, make_batch, sorted_batches
from ..data.corpus import read_lines
from ..data.tokenizer import Tokenizer
from ..decoding.inference import inference
from ..decoding.selection import HeadSelection
from ..models.translator import Translator
from .jump_prior import jump_smoothed
from .metrics import Link

__all__ = [
    "AlignOptions",
    "GoldAlignment",
    "WordAlignment",
    "align_words",
    "default_shift",
    "encode_words",
    "extract_links",
    "format_pharaoh",
    "merge_pieces",
    "read_bitext",
    "read_gold",
    "reads_full_context",
]

Method = Literal["argmax", "threshold"]
Merge = Literal["sum", "max"]
METHODS: tuple[str, ...] = ("argmax", "threshold")
MERGES: tuple[str, ...] = ("sum", "max")


def _check_choice(arg: str, value: object, allowed: Sequence[str]) -> None:
    """Refuse a ``value`` of ``arg`` that is not one of ``allowed`` (no silent fallback)."""
    if value not in allowed:
        names = " or ".join(repr(a) for a in allowed)
        raise ValueError(f"{arg} must be {names}, got {value!r}")


def _check_threshold(threshold: float) -> None:
    """Refuse a link threshold tau outside (0, 1] (0 or less would link every pair)."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")


@dataclass(frozen=True)
class AlignOptions:
    """How attention becomes word links (see the module docstring).

    Attributes:
        method: ``argmax`` (one link per target word) or ``threshold``.
        threshold: tau of the threshold rule, in (0, 1].
        shift: 0 (the row predicting the word) or 1 (the row reading it).
        merge: ``sum`` or ``max`` over a word's subword pieces.
        layer: cross-attention layer (negative counts from the top), ``"mean"``,
            or None: the model's alignment layer.
        head: head within the layer, a tuple of heads (their mean), ``"mean"``,
            or None: the mean over heads.
        full_context: force-decode without the causal mask (each target position
            sees the whole target): how a run trained with
            ``train.guided_alignment.full_context`` is read (:func:`reads_full_context`).
        jump_prior: lambda of an HMM jump prior the word weights are smoothed with
            before links are drawn (:mod:`attnkit.nmt.analysis.jump_prior`); 0 is off.
    """

    method: Method = "argmax"
    threshold: float = 0.3
    shift: int = 0
    merge: Merge = "sum"
    layer: int | Literal["mean"] | None = None
    head: int | tuple[int, ...] | Literal["mean"] | None = None
    full_context: bool = False
    jump_prior: float = 0.0

    def __post_init__(self) -> None:
        _check_choice("method", self.method, METHODS)
        _check_choice("merge", self.merge, MERGES)
        if self.shift not in (0, 1):
            raise ValueError(f"shift must be 0 or 1, got {self.shift!r}")
        _check_threshold(self.threshold)
        if not (math.isfinite(self.jump_prior) and self.jump_prior >= 0):
            raise ValueError(f"jump_prior must be >= 0 and finite, got {self.jump_prior}")


@dataclass
class WordAlignment:
    """One sentence pair's word-level attention and the links drawn from it.

    Attributes:
        weights: ``(Tw, Sw)`` float, target words x source words (smoothed where
            ``AlignOptions.jump_prior`` is set).
        links: ``(source word, target word)`` pairs, 0-based.
    """

    weights: Tensor
    links: set[Link]


@dataclass
class GoldAlignment:
    """Gold links per sentence, 0-based: ``sure`` and ``possible`` (sure ones included)."""

    sure: list[set[Link]]
    possible: list[set[Link]]


def reads_full_context(run_config: object) -> bool:
    """Whether a run is read in the full-context pass: it was trained with
    ``train.guided_alignment.full_context`` (the supervised head learned there)."""
    guided = run_config.train.guided_alignment
    return guided is not None and guided.full_context


def default_shift(model_config: object) -> int:
    """The literature's shift: 1 for an RNN with Bahdanau timing (``query_timing: previous``).

    Read from the run config, so no architecture class is needed here. On
    attnkit's Tatoeba runs shift 0 was better for both timings (AER 0.760 vs
    0.774 with Bahdanau timing, 0.602 vs 0.778 with Luong timing; argmax,
    benchmarks/RESULTS.md), so ``attnkit align`` uses this only with
    ``--shift auto``.
    """
    return int(getattr(model_config, "query_timing", None) == "previous")


# ---------------------------------------------------------------- files


def read_bitext(path: str | Path) -> tuple[list[list[str]], list[list[str]]]:
    """Source and target words of a ``source words ||| target words`` file (one pair a line).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: a line without exactly one `` ||| `` (naming file and line).
    """
    src, tgt = [], []
    for number, line in enumerate(read_lines(path), start=1):
        parts = line.split("|||")
        if len(parts) != 2:
            raise ValueError(
                f"{path}, line {number}: expected 'source ||| target', got {len(parts) - 1} "
                "'|||' separators"
            )
        src.append(parts[0].split())
        tgt.append(parts[1].split())
    return src, tgt


def read_gold(path: str | Path, *, one_based: bool = True) -> GoldAlignment:
    """Read gold links: ``i-j`` sure, ``ipj`` possible, space-separated, one line a sentence.

    Args:
        path: the gold file (gzipped or not).
        one_based: indices start at 1 (the WPT 2003 / Och & Ney sets) rather than 0.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: a malformed link or an index below the base (naming file, line, link).
    """
    base = 1 if one_based else 0
    sure, possible = [], []
    for number, line in enumerate(read_lines(path), start=1):
        s, p = set(), set()
        for item in line.split():
            kind = "p" if "p" in item else "-"
            i, _, j = item.partition(kind)
            if not (i.isdecimal() and j.isdecimal()) or min(int(i), int(j)) < base:
                raise ValueError(
                    f"{path}, line {number}: {item!r} is not a link 'i-j' or 'ipj' with "
                    f"indices >= {base}"
                )
            link = (int(i) - base, int(j) - base)
            (s if kind == "-" else p).add(link)
        sure.append(s)
        possible.append(p | s)
    return GoldAlignment(sure, possible)


def format_pharaoh(links: set[Link]) -> str:
    """``{(0, 0), (2, 1)}`` -> ``"0-0 2-1"``, sorted by source then target index."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


# ---------------------------------------------------------------- tensors


def encode_words(tokenizer: Tokenizer, words: Sequence[str]) -> tuple[list[int], list[int]]:
    """Piece ids of ``words`` (each encoded on its own) and the word index of every piece.

    The rule guided-alignment labels are mapped by (:func:`.word_links.encode_words`):
    a word the tokenizer maps to no piece at all becomes one ``<unk>``, so every
    word keeps a column or row.
    """
    return word_links.encode_words(tokenizer.encode_batch, words)


def merge_pieces(
    weights: Tensor, tgt_word_of: Sequence[int], src_word_of: Sequence[int], merge: Merge = "sum"
) -> Tensor:
    """Piece weights ``(Tp, Sp)`` -> word weights ``(Tw, Sw)``.

    ``sum``: ``W[j, i] = mean_{t in word j} sum_{s in word i} w[t, s]`` (a
    source word gets its pieces' attention mass; a target word's row stays a
    sub-distribution). ``max``: the largest piece weight on both sides.

    Args:
        weights: ``(Tp, Sp)`` float >= 0, one row per target piece, one column per
            source piece (no ``</s>``).
        tgt_word_of: word index of each target piece, ``Tp`` non-decreasing ints
            numbering the words 0, 1, 2, ... (every word has at least one piece).
        src_word_of: word index of each source piece, ``Sp``, the same way.
        merge: ``sum`` or ``max``.

    Raises:
        ValueError: the piece maps do not match the shape of ``weights``, a map skips
            a word (a word without pieces would get a row of NaN or zeros, and a
            link from nothing), does not start at 0 or goes back, or ``merge`` is
            not ``sum`` or ``max``.
    """
    _check_choice("merge", merge, MERGES)
    _check_word_map("tgt_word_of", tgt_word_of)
    _check_word_map("src_word_of", src_word_of)
    if weights.shape != (len(tgt_word_of), len(src_word_of)):
        raise ValueError(
            f"weights has shape {tuple(weights.shape)} but the piece maps give "
            f"({len(tgt_word_of)}, {len(src_word_of)})"
        )
    src_onehot = _one_hot(src_word_of, weights)  # (Sp, Sw)
    tgt_onehot = _one_hot(tgt_word_of, weights)  # (Tp, Tw)
    if merge == "sum":
        cols = weights @ src_onehot  # (Tp, Sw)
        tgt_mean = tgt_onehot / tgt_onehot.sum(dim=0, keepdim=True)  # (Tp, Tw), columns sum to 1
        return tgt_mean.T @ cols  # (Tw, Sw)
    # weights are >= 0, so zeroing the other words' pieces leaves each word's max
    cols = (weights[:, :, None] * src_onehot[None]).amax(dim=1)  # (Tp, Sw)
    return (cols[:, None, :] * tgt_onehot[:, :, None]).amax(dim=0)  # (Tw, Sw)


def _check_word_map(arg: str, word_of: Sequence[int]) -> None:
    """Refuse a piece -> word map that does not number the words 0, 1, 2, ... in order."""
    previous = None
    for piece, word in enumerate(word_of):
        allowed = (0,) if previous is None else (previous, previous + 1)
        if word not in allowed:
            after = "" if previous is None else f" after word {previous}"
            raise ValueError(
                f"{arg} must number the words 0, 1, 2, ... in order, each with at least "
                f"one piece; piece {piece} has word {word}{after}"
            )
        previous = word


def _one_hot(word_of: Sequence[int], like: Tensor) -> Tensor:
    """``(pieces, words)`` float matrix with a 1 where a piece belongs to a word."""
    index = torch.as_tensor(list(word_of), dtype=torch.long, device=like.device)  # (P,)
    return torch.nn.functional.one_hot(index).to(like.dtype)  # (P, W)


def extract_links(weights: Tensor, method: Method = "argmax", threshold: float = 0.3) -> set[Link]:
    """Word links from word weights ``(Tw, Sw)``: argmax per target word, or ``w >= tau``.

    Returns:
        ``{(source word i, target word j)}``, 0-based.

    Raises:
        ValueError: ``method`` is not ``argmax`` or ``threshold``, or ``threshold`` is
            outside (0, 1].
    """
    _check_choice("method", method, METHODS)
    _check_threshold(threshold)
    if method == "argmax":
        return {(int(i), j) for j, i in enumerate(weights.argmax(dim=-1).tolist())}
    rows, cols = (weights >= threshold).nonzero(as_tuple=True)
    return {(int(i), int(j)) for j, i in zip(rows.tolist(), cols.tolist(), strict=True)}


# ---------------------------------------------------------------- a corpus


def _python_warning(message: str) -> None:
    warnings.warn(message, stacklevel=4)  # points at the caller of align_words


def _warn_too_long(pairs: Sequence[int], limit: int, warn: Callable[[str], None]) -> None:
    named = ", ".join(str(i + 1) for i in pairs[:5]) + (", ..." if len(pairs) > 5 else "")
    warn(
        f"{len(pairs)} pair(s) have a side of more than {limit - 1} pieces, the most this "
        f"model aligns (model.max_positions {limit}); left unaligned (empty lines): pair {named}"
    )


def align_words(
    model: Translator,
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    src_words: Sequence[Sequence[str]],
    tgt_words: Sequence[Sequence[str]],
    options: AlignOptions = AlignOptions(),  # noqa: B008 (frozen, so safe as a default)
    *,
    batch_size: int = 32,
    device: torch.device | str = "cpu",
    warn: Callable[[str], None] | None = None,
) -> list[WordAlignment]:
    """Force-decode each target and turn its attention into word links.

    Args:
        model: the translator (run in eval mode here; its mode is restored).
        src_tok: source tokenizer; each word is encoded on its own.
        tgt_tok: target tokenizer.
        src_words: per sentence, the source words.
        tgt_words: per sentence, the target words.
        options: heads, timing, merging and link rule.
        batch_size: sentences per forced-decoding batch.
        device: the model's device.
        warn: told once, naming the first pairs, when pairs have a side longer
            than the model's position table (a Transformer's ``max_positions``);
            such pairs are left unaligned, so one long line does not stop a
            corpus. None: a Python ``UserWarning``.

    Returns:
        one :class:`WordAlignment` per pair, in input order; a pair with an
        empty side, or too long for the model, gets a zero ``(Tw, Sw)`` matrix
        and no links.

    Raises:
        ValueError: the two sides differ in length, or a bad option.
    """
    if len(src_words) != len(tgt_words):
        raise ValueError(
            f"src_words has {len(src_words)} sentences but tgt_words has {len(tgt_words)}"
        )
    results = [
        WordAlignment(torch.zeros(len(t), len(s)), set())
        for s, t in zip(src_words, tgt_words, strict=True)
    ]
    wanted = [i for i, (s, t) in enumerate(zip(src_words, tgt_words, strict=True)) if s and t]
    src = [encode_words(src_tok, src_words[i]) for i in wanted]
    tgt = [encode_words(tgt_tok, tgt_words[i]) for i in wanted]
    limit = model.max_target_len  # </s> after the source and <s> before the target take one
    fits = [
        limit is None or max(len(s), len(t)) < limit
        for (s, _), (t, _) in zip(src, tgt, strict=True)
    ]
    if not all(fits):
        too_long = [i for i, ok in zip(wanted, fits, strict=True) if not ok]
        _warn_too_long(too_long, limit, warn or _python_warning)
    wanted, src, tgt = (list(compress(x, fits)) for x in (wanted, src, tgt))
    examples = Examples([ids for ids, _ in src], [ids for ids, _ in tgt])
    heads = HeadSelection(options.layer, options.head)
    heads.check(model.attention_layout, encoder=False)
    default = model.attention_layout.alignment_layer
    with inference(model):
        for indices in sorted_batches(examples, batch_size):
            batch = make_batch(examples, indices).to(device)
            maps = model.attention_maps(
                batch.src, batch.src_lengths, batch.tgt_in, full_context=options.full_context
            )
            pieces = heads.pick(maps.cross, default).float().cpu()  # (B, T, S)
            for row, k in enumerate(indices):
                (_, src_map), (_, tgt_map) = src[k], tgt[k]
                t0 = options.shift  # rows t0 .. t0+Tp-1: drops </s> (shift 0) or <s> (shift 1)
                w = pieces[row, t0 : t0 + len(tgt_map), : len(src_map)]  # (Tp, Sp), no </s>
                words = merge_pieces(w, tgt_map, src_map, options.merge)  # (Tw, Sw)
                words = jump_smoothed(words, options.jump_prior)  # 0: unchanged
                links = extract_links(words, options.method, options.threshold)
                results[wanted[k]] = WordAlignment(words, links)
    return results
