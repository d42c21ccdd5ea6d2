"""Fixed ids of the special tokens, shared by every vocabulary in attnkit.

The sentencepiece models are trained with ``pad_id=0, unk_id=1, bos_id=2,
eos_id=3`` and the word-level toy vocabularies use the same ids, so a model,
its batches and its search agree on them without passing them around.
"""

from __future__ import annotations

__all__ = ["BOS", "EOS", "NUM_SPECIAL", "PAD", "SPECIAL_TOKENS", "UNK"]

PAD = 0
UNK = 1
BOS = 2
EOS = 3

# Symbols (in id order) as sentencepiece and the word vocabularies spell them.
SPECIAL_TOKENS = ("<pad>", "<unk>", "<s>", "</s>")
NUM_SPECIAL = len(SPECIAL_TOKENS)
