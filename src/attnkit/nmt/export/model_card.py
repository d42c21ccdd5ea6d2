"""What an export says about itself: ``attnkit_export.json`` (the manifest a later
``--engine ctranslate2`` checks) and the README model card (data, scores, licence, use)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from ... import __version__
from ..decoding.translate import input_limit
from ..runs.loaded_run import LoadedRun
from ..runs.run_folder import RunFolder

__all__ = ["checkpoint_sha256", "manifest", "model_card"]

FORMAT = "attnkit-ctranslate2"
VNNI_CPU_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")  # int8 dot products in one instruction
_TOKENIZER_MANIFEST = "tokenizer.json"
_LICENCES = {
    "multi30k": (
        "Multi30k (Elliott et al. 2016): provided solely for non-commercial research and/or "
        "educational purposes; the images' Flickr Terms of Use apply. A model trained on it "
        "inherits that restriction; attnkit's MIT licence covers the code, not the data."
    ),
}


def _checkpoint_record(run_dir: Path, checkpoint: str) -> dict[str, Any]:
    path = RunFolder(run_dir).checkpoint(checkpoint)
    return json.loads(path.read_text(encoding="utf-8"))


def checkpoint_sha256(run_dir: str | Path, checkpoint: str) -> str | None:
    """The SHA-256 of the run's checkpoint weights, as its record names it (None: no record)."""
    try:
        return _checkpoint_record(Path(run_dir), checkpoint).get("sha256")
    except (OSError, ValueError):
        return None


def _tokenizer_files(run_dir: Path) -> list[str]:
    manifest = json.loads((run_dir / _TOKENIZER_MANIFEST).read_text(encoding="utf-8"))
    return [_TOKENIZER_MANIFEST, *dict.fromkeys((manifest["src"], manifest["tgt"]))]


def manifest(run: LoadedRun, checkpoint: str, quantization: str, ct2_version: str) -> dict:
    """What ``attnkit_export.json`` records: versions, the checkpoint and its hash, scores,
    data, tokenizers, the model config and what attnkit's search decodes with (``decode``:
    the beam, the source's token limit ``max_input_len``, the output's length limit
    ``int(max_len_a * (source tokens + 1) + max_len_b)``, ``no_repeat_ngram`` and the
    length penalty)."""
    record = _checkpoint_record(run.folder, checkpoint)
    step, valid_bleu = _step_and_bleu(record.get("state", {}), RunFolder(run.folder))
    data, model, decode = run.config.data, run.config.model, run.config.decode
    tokenizer = json.loads((run.folder / _TOKENIZER_MANIFEST).read_text(encoding="utf-8"))
    return {
        "format": FORMAT,
        "attnkit_version": __version__,
        "ctranslate2_version": ct2_version,
        "quantization": quantization,
        "run": str(run.folder.resolve()),
        "checkpoint": checkpoint,
        "checkpoint_sha256": record.get("sha256"),
        "step": step,
        "valid_bleu": valid_bleu,
        "data": _data_name(data),
        "src_lang": data.src_lang,
        "tgt_lang": data.tgt_lang,
        "direction": data.direction,
        "tokenizer": tokenizer["kind"],
        "tokenizer_files": _tokenizer_files(run.folder),
        "src_tokenizer": tokenizer["src"],
        "tgt_tokenizer": tokenizer["tgt"],
        "model": model.model_dump(),
        "decode": {
            "beam_size": decode.beam_size,
            "max_input_len": input_limit(run.config),
            "max_len_a": decode.max_len_a,
            "max_len_b": decode.max_len_b,
            "no_repeat_ngram": decode.no_repeat_ngram,
            "length_penalty": decode.length_penalty,
        },
    }


def _step_and_bleu(state: dict, folder: RunFolder) -> tuple[int | None, float | None]:
    """A checkpoint's step and the valid BLEU of its own weights: ``averaged`` records its
    scores in its state; ``best`` and ``last`` record the run's progress, whose best BLEU
    is theirs only at the best step, so another step's (``last`` after the best) is that
    step's row of ``metrics.jsonl`` (None when no validation ran at that step)."""
    if "progress" not in state:
        return state.get("step"), state.get("valid_bleu")
    progress = state["progress"]
    step = progress.get("step")
    if step == progress.get("best_step"):
        bleu = progress.get("best_bleu")
    else:
        rows = {row.get("step"): row.get("valid_bleu") for row in folder.read_history(step)}
        bleu = rows.get(step)
    return step, float(bleu) if isinstance(bleu, int | float) and bleu >= 0 else None


def _data_name(data) -> str:
    if data.bundled:
        return data.bundled
    if data.toy is not None:
        return f"toy task: {data.toy.task}"
    train = data.train
    return "user files" if train is None else (train.tsv or f"{train.src} / {train.tgt}")


def model_card(run: LoadedRun, m: dict, export_dir: Path | None = None) -> str:
    """The export's README.md: what the model is, its scores, the data's licence, how to use it.

    ``export_dir``: where the export goes when that is not the run's default folder
    (``RUN/ctranslate2``); the card's ``attnkit evaluate`` command then names it."""
    model = m["model"]
    licence = _LICENCES.get(run.config.data.bundled or "") or (
        "not recorded by attnkit: the model inherits the terms of its training data; check them "
        "before you deploy it"
    )
    bleu = lambda v: "not recorded" if v is None else f"{v:.2f}"  # noqa: E731
    usage = (
        _usage(m)
        if m["tokenizer"] == "sentencepiece"
        else ("Tokens are whitespace-separated words (the run's `vocab*.json`).\n")
    )
    return (
        f"# {m['direction']} Transformer (attnkit, CTranslate2)\n\n"
        f"Exported by attnkit {m['attnkit_version']} with CTranslate2 "
        f"{m['ctranslate2_version']} from `{m['run']}` (checkpoint `{m['checkpoint']}`, "
        f"step {m['step']}).\n\n"
        "| | |\n| --- | --- |\n"
        f"| direction | {m['direction']} |\n"
        f"| training data | {m['data']} |\n"
        f"| model | Transformer, {model['encoder_layers']}+{model['decoder_layers']} layers, "
        f"d_model {model['d_model']}, {model['heads']} heads, ff {model['ff_dim']}, "
        f"{'pre' if model['norm_first'] else 'post'}-LN, {model['positions']} positions |\n"
        f"| weights | {m['quantization']} |\n"
        f"| validation BLEU (attnkit, during training) | {bleu(m['valid_bleu'])} |\n"
        f"| tokenizer | {m['tokenizer']}: {', '.join(m['tokenizer_files'][1:])} |\n\n"
        f"## Licence of the training data\n\n{licence}\n\n"
        "## Use\n\n"
        "CTranslate2 reads the tokenizer's pieces; the model appends `</s>` to the source "
        "itself. The options below are attnkit's search rules for this run (`decode` in "
        "`attnkit_export.json`): the source cut to its input limit, the output's length "
        "limit, n-gram blocking and the length penalty; the search never emits `<pad>` or "
        "`<s>` and allows an empty translation. Greedy search (`beam_size=1`) then gives "
        "attnkit's translations. Score it with attnkit: "
        f"`attnkit evaluate {shlex.quote(m['run'])} --engine ctranslate2"
        f"{_export_dir_option(export_dir)}`"
        ".\n\n" + _int8_note(m["quantization"]) + usage
    )


def _int8_note(quantization: str) -> str:
    """For 8-bit weights: the int8 backend a CPU without VNNI needs (what
    :func:`~attnkit.nmt.export.ctranslate2.int8_backend` sets for attnkit's own engine)."""
    if not quantization.startswith("int8"):
        return ""
    flags = ", ".join(VNNI_CPU_FLAGS)
    return (
        "**8-bit weights on a CPU without VNNI.** On a CPU whose flags (`/proc/cpuinfo`) "
        f"have none of {flags} (an AVX2-only AMD EPYC, say), CTranslate2's default int8 "
        "path changes far more translations than 8-bit weights otherwise do: set the "
        "environment variable `CT2_USE_MKL=1` before `ctranslate2` is imported "
        "(`CT2_USE_MKL=1 python app.py`), as attnkit's `--engine ctranslate2` does.\n\n"
    )


def _export_dir_option(export_dir: Path | None) -> str:
    """`` --export-dir DIR`` for an export outside the run's default folder, else nothing."""
    return "" if export_dir is None else f" --export-dir {shlex.quote(str(export_dir.resolve()))}"


def _length_limit(decode: dict, positions: int | None) -> str:
    """The output's length limit as Python: attnkit's ``int(a * (source + 1) + b)``, never
    past the position table (CTranslate2 stops with 'No position encodings are defined
    for positions >= N' there)."""
    limit = f"int({decode['max_len_a']} * (len(pieces) + 1) + {decode['max_len_b']})"
    return limit if positions is None else f"min({limit}, {positions})"


# the card's example sentence in the run's source language ("a dog runs"), where known
_EXAMPLES = {
    "de": "Ein Hund rennt.",
    "en": "A dog runs.",
    "es": "Un perro corre.",
    "fr": "Un chien court.",
    "it": "Un cane corre.",
    "nl": "Een hond rent.",
    "pt": "Um cão corre.",
}


def _usage(m: dict) -> str:
    """The card's Python example: one sentence, translated with the run's search rules."""
    d = m["decode"]
    example = _EXAMPLES.get(m.get("src_lang", ""), f"A sentence in {m.get('src_lang')}.")
    return (
        "```python\n"
        "import ctranslate2, sentencepiece as spm\n"
        f'sp_src, sp_tgt = spm.SentencePieceProcessor(model_file="{m["src_tokenizer"]}"), '
        f'spm.SentencePieceProcessor(model_file="{m["tgt_tokenizer"]}")\n'
        'translator = ctranslate2.Translator(".", device="cpu")\n'
        f"pieces = sp_src.encode({example!r}, out_type=str)[:{d['max_input_len']}]\n"
        f"out = translator.translate_batch([pieces], beam_size={d['beam_size']}, "
        f"length_penalty={d['length_penalty']}, no_repeat_ngram_size={d['no_repeat_ngram']}, "
        "min_decoding_length=0, "
        f"max_decoding_length={_length_limit(d, m['model'].get('max_positions'))}, "
        'suppress_sequences=[["<pad>"], ["<s>"]])\n'
        "print(sp_tgt.decode(out[0].hypotheses[0]))\n"
        "```\n"
    )
