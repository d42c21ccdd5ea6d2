"""Using a trained run: load it, translate text, show alignments, evaluate a split.

A run folder (written by :func:`attnkit.nmt.train.train`) holds
``config.yaml``, the tokenizer files and the ``best``/``last`` checkpoints.
Search is greedy for ``beam_size == 1`` and beam search otherwise
(:mod:`attnkit.nmt.search`); sentences are decoded in length-sorted batches
and returned in input order. Empty input lines give empty translations, so
output lines always stay aligned with input lines.

Odd input never crashes translation: bytes that are not UTF-8 are replaced
by U+FFFD (:func:`split_input`, with a warning), unseen characters and other
scripts become ``<unk>``, inputs longer than the model's limit
(:func:`input_limit`) are truncated with a warning, and a translation never
contains a line break.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from .architectures import build_translator
from .batching import Examples
from .checkpoint import load_checkpoint
from .config import DecodeConfig, RunConfig
from .corpus import load_split
from .metrics import Score, chrf, sacre_bleu, tokenized_bleu
from .model import Translator
from .search import Hypothesis, decode_examples
from .tokenizer import Tokenizer, load_tokenizers
from .vocab_ids import EOS, SPECIAL_TOKENS

__all__ = [
    "Evaluation",
    "LoadedRun",
    "Translation",
    "alignment_text",
    "decode_ids",
    "evaluate_run",
    "input_limit",
    "load_run",
    "split_input",
    "translate_lines",
]

EOS_LABEL = SPECIAL_TOKENS[EOS]
DEFAULT_INPUT_LIMIT = 256
# What str.splitlines() breaks on besides "\n"; none may appear inside an output line.
_LINE_BREAKS = re.compile("[\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


@dataclass
class LoadedRun:
    """A trained model with its config and tokenizers, ready to translate."""

    folder: Path
    config: RunConfig
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    model: Translator
    device: torch.device


def load_run(folder: str | Path, *, checkpoint: str = "best", device: str = "cpu") -> LoadedRun:
    """Load ``folder/config.yaml``, its tokenizers and the named checkpoint (``best``/``last``).

    Raises:
        FileNotFoundError: ``folder`` is not a run folder or lacks the checkpoint.
        ValueError: a file in it is invalid (the message names it).
    """
    folder = Path(folder)
    config_path = folder / "config.yaml"
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path} not found; is {folder} a training run folder?")
    config = RunConfig.load(config_path)
    src_tok, tgt_tok = load_tokenizers(folder)
    model = build_translator(config.model, src_tok.vocab_size, tgt_tok.vocab_size)
    ckpt = load_checkpoint(folder / f"{checkpoint}.json")
    try:
        model.load_state_dict(ckpt.model)
    except RuntimeError as err:
        raise ValueError(
            f"{folder / checkpoint}.json does not fit the model in {config_path}: {err}"
        ) from None
    model.to(device).eval()
    return LoadedRun(folder, config, src_tok, tgt_tok, model, torch.device(device))


@dataclass
class Translation:
    """One translated sentence and the attention that produced it.

    ``weights`` is (T, S): row t is the attention of output token t (the last
    row is the EOS step when EOS was produced) over ``src_pieces`` (the source
    subwords and EOS). Empty input gives an empty translation with no weights.
    """

    source: str
    text: str
    src_pieces: list[str]
    tgt_pieces: list[str]
    weights: Tensor | None
    score: float = 0.0
    truncated_from: int | None = None  # source length in tokens before truncation


def split_input(data: bytes, warn: Callable[[str], None] | None = None) -> list[str]:
    """Split raw input (e.g. stdin) into lines at ``\\n`` only; invalid UTF-8 becomes U+FFFD.

    A final line without ``\\n`` counts; a trailing ``\\r`` (CRLF files) is dropped.
    ``warn`` is told the 1-based number of each line that was not valid UTF-8.
    """
    rows = data.split(b"\n")
    if rows and rows[-1] == b"":
        rows.pop()
    lines = []
    for number, raw in enumerate(rows, start=1):
        raw = raw.removesuffix(b"\r")
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            lines.append(raw.decode("utf-8", errors="replace"))
            if warn is not None:
                warn(
                    f"line {number}: invalid UTF-8 at byte {err.start} ({err.reason}); "
                    "undecodable bytes replaced by U+FFFD"
                )
    return lines


def input_limit(config: RunConfig) -> int:
    """Longest source (tokens, without EOS) translated: ``decode.max_input_len``, else
    ``data.max_src_len`` (what the model was trained on), else 256."""
    return config.decode.max_input_len or config.data.max_src_len or DEFAULT_INPUT_LIMIT


def _clean(text: str) -> str:
    """Valid Unicode on one line: lone surrogates (from undecodable argv bytes) -> U+FFFD."""
    text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return _LINE_BREAKS.sub(" ", text)


def decode_ids(
    run: LoadedRun, ids: Sequence[Sequence[int]], decode: DecodeConfig
) -> list[Hypothesis]:
    """Search for translations of tokenized sources with the settings of ``decode``.

    Args:
        run: the loaded run (its model and device).
        ids: source token ids per sentence, without specials.
        decode: beam size, length and coverage penalties, n-gram blocking, limits.

    Returns:
        one :class:`~attnkit.nmt.search.Hypothesis` per source, in input order.
    """
    return decode_examples(
        run.model,
        Examples([list(x) for x in ids]),
        beam_size=decode.beam_size,
        length_penalty=decode.length_penalty,
        coverage_penalty=decode.coverage_penalty,
        no_repeat_ngram=decode.no_repeat_ngram,
        max_len_a=decode.max_len_a,
        max_len_b=decode.max_len_b,
        batch_size=decode.batch_size,
        device=run.device,
    )


def translate_lines(
    run: LoadedRun,
    lines: Sequence[str],
    *,
    beam_size: int | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[Translation]:
    """Translate each line; blank lines translate to ``""``. One result per line, same order.

    Sources longer than :func:`input_limit` tokens are cut to it; ``warn`` is
    told which line (1-based) and how long it was.
    """
    decode = run.config.decode
    limit = input_limit(run.config)
    lines = [_clean(line) for line in lines]
    wanted = [i for i, line in enumerate(lines) if line.strip()]
    ids = [run.src_tok.encode(lines[i].strip()) for i in wanted]
    lengths = [len(x) for x in ids]
    for i, n in zip(wanted, lengths, strict=True):
        if n > limit and warn is not None:
            warn(f"line {i + 1}: {n} tokens, truncated to the model's limit of {limit}")
    ids = [x[:limit] for x in ids]
    if beam_size is not None:
        decode = decode.model_copy(update={"beam_size": beam_size})
    hyps = decode_ids(run, ids, decode)
    results = [Translation(line, "", [], [], None) for line in lines]
    for i, src_ids, hyp in zip(wanted, ids, hyps, strict=True):
        tgt_pieces = run.tgt_tok.pieces(hyp.tokens)
        if hyp.ended:
            tgt_pieces.append(EOS_LABEL)
        results[i] = Translation(
            source=lines[i],
            text=_clean(run.tgt_tok.decode(hyp.tokens)),
            src_pieces=[*run.src_tok.pieces(src_ids), EOS_LABEL],
            tgt_pieces=tgt_pieces,
            weights=hyp.weights.detach().cpu().float(),
            score=float(hyp.score),
        )
    for i, n in zip(wanted, lengths, strict=True):
        if n > limit:
            results[i].truncated_from = n
    return results


def alignment_text(translation: Translation) -> str:
    """For each output token, the source token with the largest weight, and that weight."""
    if translation.weights is None:
        return ""
    best = translation.weights.max(dim=-1)  # values (T,), indices (T,)
    rows = []
    for piece, weight, j in zip(
        translation.tgt_pieces, best.values.tolist(), best.indices.tolist(), strict=False
    ):
        rows.append(f"  {piece:>15} <- {translation.src_pieces[j]:<15} {weight:.2f}")
    return "\n".join(rows)


@dataclass
class Evaluation:
    """Scores of one split plus the hypotheses and references they came from."""

    split: str
    bleu: Score
    chrf: Score
    tokenized_bleu: Score
    hypotheses: list[str]
    references: list[str]


def evaluate_run(
    run: LoadedRun,
    split: str = "test",
    *,
    beam_size: int | None = None,
    warn: Callable[[str], None] | None = None,
) -> Evaluation:
    """Translate the config's ``split`` and score it against the references.

    ``warn`` hears of sources truncated to :func:`input_limit` (the score then
    covers truncated inputs).
    """
    corpus = load_split(run.config.data, split)
    translations = translate_lines(run, corpus.src, beam_size=beam_size, warn=warn)
    hyps = [t.text for t in translations]
    return Evaluation(
        split,
        sacre_bleu(hyps, corpus.tgt),
        chrf(hyps, corpus.tgt),
        tokenized_bleu(hyps, corpus.tgt),
        hyps,
        corpus.tgt,
    )
