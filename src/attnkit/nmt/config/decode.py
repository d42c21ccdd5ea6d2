"""The ``decode`` section: search settings for validation BLEU, translate and evaluate."""

from __future__ import annotations

from pydantic import Field

from .section import _Section

# GNMT's alpha and beta are about 0.2 to 2; far larger ones overflow float64 in the
# length penalty ((5 + |y|) / 6) ** alpha or the coverage penalty beta * sum log(...).
MAX_PENALTY = 100.0


class DecodeConfig(_Section):
    """Search settings for validation BLEU (always greedy) and translate/evaluate.

    Inputs longer than ``max_input_len`` tokens are truncated with a warning;
    ``None`` means the training limit ``data.max_src_len``, or 256 tokens.
    ``length_penalty`` (alpha) and ``coverage_penalty`` (beta) are GNMT's
    (Wu et al. 2016, eq. 14), for beam search; ``no_repeat_ngram: n`` forbids
    repeating any n-gram of the output (0 = off). Both penalties are at most
    ``MAX_PENALTY`` (100). ``early_stopping: true`` ends a
    sentence's beam search once it has ``beam_size`` finished hypotheses (faster;
    the default waits until no live beam can still win).
    """

    beam_size: int = Field(5, gt=0)
    length_penalty: float = Field(1.0, ge=0, le=MAX_PENALTY)
    max_len_a: float = Field(1.5, ge=0)
    max_len_b: int = Field(10, ge=0)
    coverage_penalty: float = Field(0.0, ge=0, le=MAX_PENALTY)
    no_repeat_ngram: int = Field(0, ge=0)
    batch_size: int = Field(64, gt=0)
    early_stopping: bool = False
    max_input_len: int | None = Field(None, gt=0)
