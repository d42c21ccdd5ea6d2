"""The ``decode`` section: search settings for validation BLEU, translate and evaluate."""

from __future__ import annotations

from pydantic import Field, model_validator

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
    the default waits until no live beam can still win). A sentence emits at most
    ``int(max_len_a * src_len + max_len_b)`` tokens, ``</s>`` included, where ``src_len``
    counts ``</s>`` too: ``2 * max_len_a + max_len_b`` must be at least 1, so that a
    one-token source (``src_len`` 2; an empty line is never decoded) may emit ``</s>``.
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

    @model_validator(mode="after")
    def _every_source_gets_a_step(self) -> DecodeConfig:
        """A limit of no step for a one-token source failed at the first validation,
        after a whole epoch of training, with "give a length limit 0 < 1"."""
        if 2 * self.max_len_a + self.max_len_b < 1:
            raise ValueError(
                f"decode.max_len_a ({self.max_len_a}) and decode.max_len_b ({self.max_len_b}) "
                "give a one-token source (src_len 2 with </s>) the length limit "
                "int(2 * max_len_a + max_len_b) = 0: no output token; raise max_len_b, "
                "e.g. --decode.max_len_b 1"
            )
        return self
