"""Tokenizers: sentencepiece subwords for real text, whitespace words for toy tasks.

Both map text to ids with the fixed specials ``<pad>=0, <unk>=1, <bos>=2,
<eos>=3`` (:mod:`attnkit.nmt.vocab_ids`) and never add BOS/EOS themselves;
batching does. User text never yields ``<pad>``, ``<s>`` or ``</s>``: text that
spells one of them is an unknown word (word tokenizer) or ordinary pieces
(sentencepiece keeps them as control symbols, which it never reads from text).
What counts as empty text is :func:`attnkit.nmt.data.text.is_blank`. A run folder
holds ``tokenizer.json`` (which kind, which files) beside the model files it
names, so :func:`load_tokenizers` rebuilds the pair.

Sentencepiece: Kudo & Richardson 2018 (unigram LM, Kudo 2018; BPE, Sennrich
et al. 2016). ``joint: true`` trains one model on source + target text (one
shared vocabulary, as for related languages such as German/English);
``joint: false`` trains one model per side.
"""

from __future__ import annotations

import io
import json
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

import sentencepiece as spm

from ...atomic import atomic_write_bytes
from ..vocab_ids import BOS, EOS, PAD, SPECIAL_TOKENS, UNK
from .text import is_blank

__all__ = [
    "SPECIALS",
    "SentencePieceTokenizer",
    "Tokenizer",
    "WordTokenizer",
    "copy_tokenizers",
    "load_tokenizers",
    "train_tokenizers",
]

SPECIALS = SPECIAL_TOKENS  # in id order: <pad>, <unk>, <s> (bos), </s> (eos)
MANIFEST = "tokenizer.json"
DEFAULT_NORMALIZATION = "nmt_nfkc"  # sentencepiece's own default rule


class Tokenizer(Protocol):
    """What the pipeline needs from a tokenizer."""

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def encode_batch(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def pieces(self, ids: Sequence[int]) -> list[str]: ...

    def to_bytes(self) -> bytes: ...


class SentencePieceTokenizer:
    """A trained sentencepiece model; ``encode`` gives subword ids without BOS/EOS.

    :meth:`train` makes ``<pad>``, ``<s>`` and ``</s>`` control symbols (and
    defines no user symbols): sentencepiece never matches a control symbol in
    input text, so "<s>" in a sentence becomes ordinary pieces or ``<unk>`` and
    only batching adds their ids.

    Raises:
        ValueError: the model's special ids are not (0, 1, 2, 3).
    """

    def __init__(self, model_proto: bytes, name: str = "<memory>") -> None:
        self.proto = model_proto
        self.name = name
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
        got = (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id())
        if got != (PAD, UNK, BOS, EOS):
            raise ValueError(
                f"{name}: special ids (pad, unk, bos, eos) must be (0, 1, 2, 3), got {got}"
            )

    @classmethod
    def train(
        cls,
        sentences: Iterable[str],
        *,
        vocab_size: int,
        model_type: str = "unigram",
        character_coverage: float = 1.0,
        normalization: str = DEFAULT_NORMALIZATION,
        threads: int = 1,
    ) -> SentencePieceTokenizer:
        """Train on ``sentences``; ``vocab_size`` is an upper bound for tiny corpora.

        Sentencepiece's trainer leaves text that spells a special token (``</s>``,
        ``<unk>``) out of what it learns, so characters seen only there (the ``/``
        of ``</s>``) would get no piece, and such text would read as ``<unk>``:
        they are passed as ``required_chars``, and "</s>" in a sentence stays
        "</s>" through encode and decode. ``normalization`` is sentencepiece's
        ``normalization_rule_name`` (``tokenizer.normalization``).

        Raises:
            ValueError: sentencepiece refused to train, e.g. ``vocab_size`` is
                below the pieces the text's characters and the specials need
                (the message names ``tokenizer.vocab_size`` and that number), or
                every sentence is over its length limit.
        """
        sentences = list(sentences)  # read twice: for the spelled specials, then to train
        required = _spelled_special_chars(sentences)
        # given only when needed: an empty required_chars changes the model's bytes
        extra = {"required_chars": required} if required else {}
        if normalization != DEFAULT_NORMALIZATION:
            extra["normalization_rule_name"] = normalization
        buffer = io.BytesIO()
        try:
            _while_ctrl_c_is_heard(
                spm.SentencePieceTrainer.train,
                sentence_iterator=iter(sentences),
                model_writer=buffer,
                vocab_size=vocab_size,
                model_type=model_type,
                character_coverage=character_coverage,
                pad_id=PAD,
                unk_id=UNK,
                bos_id=BOS,
                eos_id=EOS,
                hard_vocab_limit=False,
                **extra,
                num_threads=threads,
                minloglevel=2,
            )
        except RuntimeError as err:
            raise ValueError(_training_error(err, vocab_size)) from None
        return cls(buffer.getvalue())

    @classmethod
    def load(cls, path: str | Path) -> SentencePieceTokenizer:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"sentencepiece model not found: {path}")
        try:
            return cls(path.read_bytes(), str(path))
        except RuntimeError as err:
            raise ValueError(f"{path}: not a valid sentencepiece model ({err})") from None

    def to_bytes(self) -> bytes:
        """The serialized sentencepiece model (what :meth:`save` writes)."""
        return self.proto

    def __getstate__(self) -> dict:
        """Pickled as the model's bytes (the processor itself does not pickle), so a
        tokenizer can go to a worker process."""
        return {"proto": self.proto, "name": self.name}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["proto"], state["name"])

    def save(self, path: str | Path) -> None:
        atomic_write_bytes(Path(path), self.to_bytes())

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text)

    def encode_batch(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        """:meth:`encode` of each text, on ``threads`` of sentencepiece's own C++ threads."""
        return self.sp.encode(list(texts), num_threads=threads)

    def decode(self, ids: Sequence[int]) -> str:
        return self.sp.decode([int(i) for i in ids])

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.sp.id_to_piece(int(i)) for i in ids]


# "<" and the characters NFKC (so sentencepiece's normalization) reads as "<": full-width, small
_LESS_THAN = ("<", "\uff1c", "\ufe64")


def _spelled_special_chars(sentences: Sequence[str]) -> str:
    """The characters of the special tokens that ``sentences`` spell once NFKC-normalized
    (``"</s>"`` or full-width ``"＜/s＞"`` in a line gives ``/<>s``), sorted; ``""`` when
    no line spells one."""
    spelled: set[str] = set()
    for start in range(0, len(sentences), 4096):  # in blocks: 2M lines in about 0.5 s
        block = "\n".join(sentences[start : start + 4096])
        if any(c in block for c in _LESS_THAN):
            block = unicodedata.normalize("NFKC", block)
            spelled.update(s for s in SPECIALS if s in block)
    return "".join(sorted(set("".join(spelled))))


def _training_error(err: RuntimeError, vocab_size: int) -> str:
    """The message for sentencepiece's refusal ``err`` to train ``vocab_size`` pieces."""
    too_small = re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(err))
    if too_small:
        return (
            f"tokenizer.vocab_size {vocab_size} is too small: the characters of the training "
            f"text and the special tokens need at least {too_small[1]} pieces; raise "
            "tokenizer.vocab_size, or lower tokenizer.character_coverage to map rare "
            "characters to <unk>"
        )
    if "sentences_.empty()" in str(err):
        return (
            "sentencepiece found no sentence to train on: every line it was given is longer "
            "than its limit of 4,192 bytes (a file whose lines end in \\r alone, as on old "
            "Macs, reads as one line)"
        )
    return f"sentencepiece could not train tokenizer.vocab_size {vocab_size} pieces: {err}"


class WordTokenizer:
    """Whitespace-separated words; ids ``0..3`` are the specials, then words by frequency.

    A word that spells a special token (``"</s>"``) is never learned and reads
    as ``<unk>``; a word made only of invisible characters (a lone U+200B) is
    skipped, like whitespace. Words are compared in Unicode normal form NFC, in
    training and in encoding, so ``"café"`` typed with a combining accent (NFD,
    as macOS file names and some keyboards give it) is the word learned from an
    NFC corpus, not ``<unk>``.
    """

    def __init__(self, words: Sequence[str]) -> None:
        if tuple(words[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a word vocabulary must start with {SPECIALS}, got {list(words[:4])}")
        self.words = list(words)
        # specials are not words: text that spells one maps to UNK (the .get default)
        self.index: dict[str, int] = {}
        for i, w in enumerate(self.words):
            if w not in SPECIALS and _nfc(w) == w:  # the word itself keeps its id
                self.index.setdefault(w, i)
        for i, w in enumerate(self.words):
            if w not in SPECIALS:  # an older vocabulary's NFD-only word: found by its NFC
                self.index.setdefault(_nfc(w), i)

    @classmethod
    def train(cls, sentences: Iterable[str], *, vocab_size: int | None = None) -> WordTokenizer:
        counts = Counter(w for s in sentences for w in _words(s) if w not in SPECIALS)
        limit = None if vocab_size is None else max(vocab_size - len(SPECIALS), 0)
        ranked = sorted(counts, key=lambda w: (-counts[w], w))[:limit]
        return cls([*SPECIALS, *ranked])

    @classmethod
    def load(cls, path: str | Path) -> WordTokenizer:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"word vocabulary not found: {path}")
        try:
            words = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{path}: not a JSON word list ({err})") from None
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise ValueError(f"{path}: not a JSON list of words")
        return cls(words)

    def to_bytes(self) -> bytes:
        """The vocabulary as a JSON list (what :meth:`save` writes)."""
        return json.dumps(self.words, ensure_ascii=False).encode("utf-8")

    def save(self, path: str | Path) -> None:
        atomic_write_bytes(Path(path), self.to_bytes())

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    def encode(self, text: str) -> list[int]:
        return [self.index.get(w, UNK) for w in _words(text)]

    def encode_batch(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        """:meth:`encode` of each text (a dictionary lookup: ``threads`` is not used)."""
        return [self.encode(text) for text in texts]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.words[int(i)] for i in ids if int(i) not in (PAD, BOS, EOS))

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.words[int(i)] for i in ids]


def _words(text: str) -> list[str]:
    """The whitespace-separated words of ``text`` that are not blank, in NFC."""
    return [w for w in _nfc(text).split() if not is_blank(w)]


def _nfc(text: str) -> str:
    """``text`` in Unicode normal form NFC (canonical composition: ``e`` + U+0301 -> ``é``)."""
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


def train_tokenizers(
    src_sentences: Sequence[str],
    tgt_sentences: Sequence[str],
    *,
    kind: str,
    vocab_size: int,
    joint: bool = True,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
    normalization: str = DEFAULT_NORMALIZATION,
    threads: int = 1,
) -> tuple[Tokenizer, Tokenizer]:
    """Train (source, target) tokenizers; with ``joint`` both are the same object."""

    def fit(sentences: Sequence[str]) -> Tokenizer:
        if kind == "word":
            return WordTokenizer.train(sentences, vocab_size=vocab_size)
        if kind == "sentencepiece":
            return SentencePieceTokenizer.train(
                sentences,
                vocab_size=vocab_size,
                model_type=model_type,
                character_coverage=character_coverage,
                normalization=normalization,
                threads=threads,
            )
        raise ValueError(f"tokenizer kind must be 'sentencepiece' or 'word', got {kind!r}")

    if joint:
        shared = fit([*src_sentences, *tgt_sentences])
        return shared, shared
    return fit(src_sentences), fit(tgt_sentences)


def _file_names(kind: str, joint: bool) -> dict[str, str]:
    ext = "model" if kind == "sentencepiece" else "json"
    stem = "spm" if kind == "sentencepiece" else "vocab"
    if joint:
        return {"src": f"{stem}.{ext}", "tgt": f"{stem}.{ext}"}
    return {"src": f"{stem}.src.{ext}", "tgt": f"{stem}.tgt.{ext}"}


def save_tokenizers(run_dir: str | Path, src: Tokenizer, tgt: Tokenizer) -> None:
    """Write the tokenizer file(s) and ``tokenizer.json`` into ``run_dir``."""
    run_dir = Path(run_dir)
    kind = "word" if isinstance(src, WordTokenizer) else "sentencepiece"
    joint = src is tgt
    names = _file_names(kind, joint)
    src.save(run_dir / names["src"])
    if not joint:
        tgt.save(run_dir / names["tgt"])
    manifest = {"kind": kind, "joint": joint, **names}
    atomic_write_bytes(run_dir / MANIFEST, json.dumps(manifest, indent=2).encode("utf-8"))


def load_tokenizers(run_dir: str | Path) -> tuple[Tokenizer, Tokenizer]:
    """Rebuild the (source, target) tokenizers saved by :func:`save_tokenizers`.

    Raises:
        FileNotFoundError: ``run_dir`` has no ``tokenizer.json``.
        ValueError: the manifest is invalid (the message names it).
    """
    run_dir = Path(run_dir)
    kind, joint, names = _manifest(run_dir)
    loader = WordTokenizer.load if kind == "word" else SentencePieceTokenizer.load
    src = loader(run_dir / names[0])
    tgt = src if joint else loader(run_dir / names[1])
    return src, tgt


def copy_tokenizers(from_dir: str | Path, to_dir: str | Path) -> tuple[Tokenizer, Tokenizer]:
    """Copy the tokenizer files of run folder ``from_dir`` (``tokenizer.json`` and the files
    it names) into ``to_dir`` byte for byte, atomically; returns them loaded.

    Raises:
        FileNotFoundError, ValueError: as :func:`load_tokenizers` for ``from_dir``.
    """
    from_dir, to_dir = Path(from_dir), Path(to_dir)
    tokenizers = load_tokenizers(from_dir)  # the files are whole before any is copied
    _, _, names = _manifest(from_dir)
    for name in dict.fromkeys(names):  # a joint tokenizer names one file twice
        atomic_write_bytes(to_dir / name, (from_dir / name).read_bytes())
    atomic_write_bytes(to_dir / MANIFEST, (from_dir / MANIFEST).read_bytes())
    return tokenizers


def _manifest(run_dir: Path) -> tuple[str, bool, tuple[str, str]]:
    """``tokenizer.json`` of ``run_dir``: the kind, whether joint, the (source, target) files."""
    manifest_path = run_dir / MANIFEST
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{manifest_path} not found; is {run_dir} a training run folder?")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        kind, joint, names = manifest["kind"], manifest["joint"], (manifest["src"], manifest["tgt"])
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{manifest_path}: not a valid tokenizer manifest ({err!r})") from None
    if kind not in ("word", "sentencepiece") or not all(
        isinstance(n, str) and n and Path(n).name == n for n in names
    ):
        raise ValueError(f"{manifest_path}: unknown kind {kind!r} or bad file names {names!r}")
    return kind, joint, names


def _while_ctrl_c_is_heard(call, **kwargs) -> None:
    """``call(**kwargs)`` in a daemon thread while this one waits for it.

    Sentencepiece trains in C++ for up to minutes on a large sample; run in
    the main thread, it would hold Ctrl-C back until it ended, because Python
    raises KeyboardInterrupt only between its own instructions. Its trainer
    releases the GIL, so the main thread, waiting here, takes Ctrl-C at once;
    the abandoned training ends with the process. Its exception is re-raised here.
    """
    failed: list[BaseException] = []

    def run() -> None:
        try:
            call(**kwargs)
        except BaseException as err:  # re-raised in the caller's thread
            failed.append(err)

    worker = threading.Thread(target=run, name="sentencepiece-train", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    if failed:
        raise failed[0]
