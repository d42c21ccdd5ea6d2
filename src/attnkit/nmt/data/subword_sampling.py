"""One epoch's sampled segmentation of the training text (subword regularization, Kudo 2018).

sentencepiece samples from a generator of its own that cannot be seeded (the
process-wide seed is not honoured by every release), so two runs with the
same ``train.seed`` see different samples. What keeps a run exact across a
resume is the token store: the epoch's pairs are encoded once, into a store
whose fingerprint names the epoch, and read from it until the next epoch
replaces it; every rank of a data-parallel run maps the same store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from ..config.subword_sampling import SubwordSamplingConfig
from .tokenizer import SentencePieceTokenizer, Tokenizer

__all__ = ["SampledEncoder", "SampledSegmentation"]

Encode = Callable[[list[str]], list[list[int]]]


@dataclass(frozen=True)
class SampledEncoder:
    """A batch encoder that samples one segmentation of each text (picklable, for the
    store's worker processes)."""

    tokenizer: SentencePieceTokenizer
    alpha: float
    nbest_size: int

    def __call__(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer.sp.encode(
            list(texts),
            enable_sampling=True,
            alpha=self.alpha,
            nbest_size=self.nbest_size,
            num_threads=1,  # the store's worker processes are the parallelism
        )


@dataclass(frozen=True)
class SampledSegmentation:
    """How the training pairs of ``epoch`` are segmented (``train.subword_sampling``)."""

    alpha: float
    nbest_size: int
    sides: str
    epoch: int

    @classmethod
    def for_epoch(cls, config: SubwordSamplingConfig, epoch: int) -> SampledSegmentation:
        return cls(config.alpha, config.nbest_size, config.sides, epoch)

    def encoders(self, src_tok: Tokenizer, tgt_tok: Tokenizer) -> tuple[Encode, Encode]:
        """(source, target) batch encoders: sampled on the chosen sides, else the best
        segmentation.

        Raises:
            TypeError: a sampled side's tokenizer is not a sentencepiece model.
        """
        return self._encoder(src_tok, "source"), self._encoder(tgt_tok, "target")

    def _encoder(self, tok: Tokenizer, side: str) -> Encode:
        if self.sides not in ("both", side):
            return tok.encode_batch
        if not isinstance(tok, SentencePieceTokenizer):
            raise TypeError(f"subword sampling needs a sentencepiece {side} tokenizer")
        return SampledEncoder(tok, self.alpha, self.nbest_size)

    def key(self) -> dict:
        """What a store built with this segmentation depends on, for its fingerprint."""
        return asdict(self)
