"""Options shared by the commands that decode or show attention (translate, evaluate,
inspect, align, serve): the search settings, the layer/head selection and the precision.

``--beam``, ``--length-penalty``, ``--coverage-penalty``, ``--no-repeat-ngram``,
``--early-stopping`` and ``--batch-size`` override the run's ``decode`` section in one
:class:`~attnkit.nmt.decoding.settings.SearchSettings` (the loaded run's config is never
changed); ``--layer`` and ``--head`` become
one :class:`~attnkit.nmt.decoding.selection.HeadSelection`. ``--precision`` is the
arithmetic the model decodes in (:mod:`attnkit.nmt.precision`).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

from .errors import UsageError, stderr

__all__ = [
    "decoding_precision",
    "head_selection",
    "precision_option",
    "search_memory",
    "search_options",
    "search_settings",
    "view_options",
]

PRECISIONS = ("auto", "fp32", "bf16")  # attnkit.nmt.precision.PRECISIONS, without torch


def search_options(p: argparse.ArgumentParser) -> None:
    """Add --beam, --length-penalty, --coverage-penalty, --no-repeat-ngram,
    --early-stopping and --batch-size (defaults: the run's decode section)."""
    p.add_argument("--beam", type=int, metavar="K", help="beam size (1 = greedy; default: config)")
    p.add_argument(
        "--length-penalty",
        type=float,
        metavar="ALPHA",
        help="GNMT length penalty ((5 + |y|) / 6) ** ALPHA for beam search (0 = off; larger "
        "favours longer translations; default: config)",
    )
    p.add_argument(
        "--coverage-penalty",
        type=float,
        metavar="BETA",
        help="GNMT coverage penalty weight for beam search (0 = off; default: config)",
    )
    p.add_argument(
        "--no-repeat-ngram",
        type=int,
        metavar="N",
        help="never repeat an n-gram of the output (0 = off; default: config)",
    )
    p.add_argument(
        "--early-stopping",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="beam search: end a sentence once it has K finished hypotheses, faster "
        "(--no-early-stopping: only once no live beam can still win; default: config)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="sentences searched together (more: faster, more memory; default: config "
        "decode.batch_size)",
    )


def check_search_options(args: argparse.Namespace) -> None:
    """Reject out-of-range search options before anything is loaded.

    Raises:
        UsageError: ``--beam`` or ``--batch-size`` < 1, a negative ``--no-repeat-ngram``, or a
            ``--length-penalty`` or ``--coverage-penalty`` outside 0..100 (``inf`` included).
    """
    from ..nmt.config.decode import MAX_PENALTY

    for option, value in (("--beam", args.beam), ("--batch-size", args.batch_size)):
        if value is not None and value < 1:
            raise UsageError(f"{option} must be >= 1, got {value}")
    for option, key in (
        ("--length-penalty", "length_penalty"),
        ("--coverage-penalty", "coverage_penalty"),
        ("--no-repeat-ngram", "no_repeat_ngram"),
    ):
        value = getattr(args, key)
        if value is not None and not value >= 0:
            raise UsageError(f"{option} must be >= 0, got {value}")
        if value is not None and key != "no_repeat_ngram" and not value <= MAX_PENALTY:
            raise UsageError(
                f"{option} must be at most {MAX_PENALTY:g} (GNMT's weights are about 0.2 to "
                f"2), got {value}"
            )


def search_settings(args: argparse.Namespace, run):
    """The run's search settings with the options given on the command line."""
    from ..nmt.decoding.settings import SearchSettings

    return SearchSettings.from_config(
        run.config.decode,
        beam_size=args.beam,
        length_penalty=args.length_penalty,
        coverage_penalty=args.coverage_penalty,
        no_repeat_ngram=args.no_repeat_ngram,
        early_stopping=args.early_stopping,
        batch_size=args.batch_size,
    )


@contextlib.contextmanager
def search_memory(settings) -> Iterator[None]:
    """Turn running out of memory in a search into a :class:`UsageError` naming the beam.

    Beam search holds ``beam_size`` hypotheses of every sentence of a batch
    (``decode.batch_size``) at each step, so a huge ``--beam`` asks for more
    memory than the machine has. PyTorch's CPU allocator says so with a plain
    ``RuntimeError`` ("DefaultCPUAllocator: can't allocate memory"), a GPU with
    ``torch.OutOfMemoryError``; other errors pass through.

    Raises:
        UsageError: the search ran out of memory.
    """
    import torch

    try:
        yield
    except (MemoryError, RuntimeError) as err:
        oom = isinstance(err, MemoryError | torch.OutOfMemoryError)
        if not oom and "can't allocate memory" not in str(err):
            raise
        raise UsageError(
            f"out of memory searching with beam {settings.beam_size}: beam search holds "
            f"{settings.beam_size} hypotheses of each of up to {settings.batch_size} sentences "
            "(--batch-size, default decode.batch_size) at every step; use a smaller --beam or "
            "--batch-size"
        ) from None


def precision_option(p: argparse.ArgumentParser) -> None:
    """Add --precision (default ``auto``: bf16 only where this machine makes it faster)."""
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="arithmetic of the model: bf16 mixed precision where this machine runs it "
        "faster than fp32 (auto: a CPU with avx512_bf16/amx_bf16, a GPU with bf16), fp32 or "
        "bf16; any run's checkpoint loads in either (default: auto)",
    )


def decoding_precision(run):
    """``run.precision.autocast()``, announced on stderr when the model decodes in bf16."""
    if run.precision.name == "bf16":
        stderr(f"attnkit: precision {run.precision.reason}")
    return run.precision.autocast()


def view_options(p: argparse.ArgumentParser, *, all_heads: bool, auto_layer: bool = False) -> None:
    """Add --layer and --head (``all`` only where a picture can show every head; ``--layer
    auto`` only where a development set chooses it: ``attnkit align``)."""
    auto = ", or 'auto': the layer that aligns a development set best" if auto_layer else ""
    p.add_argument(
        "--layer",
        metavar="L",
        help="attention layer (0-based, negative from the last) or 'mean' over layers "
        "(default: the model's alignment layer: the Transformer's alignment_layer, "
        f"the RNN's one layer){auto}. A run trained with guided alignment defaults to "
        "its supervised layer and heads instead (unless --layer or --head is given)",
    )
    every = ", or 'all': every head of the layer side by side (--plot)" if all_heads else ""
    p.add_argument(
        "--head",
        metavar="H",
        help=f"head (0-based) or 'mean' over heads (default: the mean){every}",
    )


def head_selection(args: argparse.Namespace, *, all_heads: bool):
    """``--layer``/``--head`` as a HeadSelection.

    Raises:
        UsageError: a value that is neither a whole number nor an allowed word.
    """
    from ..nmt.decoding.selection import ALL, MEAN, HeadSelection

    heads = (MEAN, ALL) if all_heads else (MEAN,)
    return HeadSelection(
        _index_or(args.layer, "--layer", (MEAN,)), _index_or(args.head, "--head", heads)
    )


def _index_or(value: str | None, option: str, words: tuple[str, ...]):
    if value is None or value in words:
        return value
    try:
        return int(value)
    except ValueError:
        allowed = " or ".join(f"'{w}'" for w in words)
        raise UsageError(f"{option} must be a whole number or {allowed}, got {value!r}") from None
