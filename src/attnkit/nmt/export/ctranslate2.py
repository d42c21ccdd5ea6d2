"""Exporting a trained Transformer run to a CTranslate2 model folder.

CTranslate2 (OpenNMT's inference engine for Transformers, https://opennmt.net/CTranslate2)
serves a model fast on CPUs, with 8-bit weights if asked, from a library other programs
already use. :func:`export_run` fills CTranslate2's own model description
(``ctranslate2.specs.TransformerSpec``) with the run's weights and lets CTranslate2
write its files; nothing here writes its binary format by hand.

How attnkit's Transformer maps onto the spec (Vaswani et al. 2017; pre-LN: Xiong et al. 2020):

* embeddings: CTranslate2 multiplies them by ``sqrt(D)`` (``scale_embeddings``), as
  attnkit does, then adds the positions;
* positions: attnkit's sinusoids interleave sine (even dimensions) and cosine (odd
  ones) while CTranslate2's built-in table puts all sines first, so the table the
  model actually uses (sinusoidal or learned) is written out as
  ``position_encodings``: ``max_positions`` rows, position 0 first;
* each attention's ``q_proj``/``k_proj``/``v_proj`` are fused as CTranslate2 expects
  (self-attention: one ``[q; k; v]`` projection; cross-attention: ``q`` and one
  ``[k; v]``), ``out_proj`` is the last linear; the layer norm before (pre-LN) or after
  (post-LN) each sublayer is the sublayer's ``layer_norm``, with attnkit's epsilon 1e-5;
* the final encoder/decoder norms (pre-LN only), the output layer tied to the target
  embeddings and its bias ``output_bias``; shared embeddings are one matrix, which
  CTranslate2 stores once;
* the alignment view: CTranslate2 returns the cross-attention of the run's
  ``model.alignment_layer`` averaged over all its heads, the weights attnkit's search
  returns.

Token ids: the vocabularies are written in attnkit's id order (``<pad>``=0, ``<unk>``=1,
``<s>``=2, ``</s>``=3, then the tokenizer's pieces), the decoder starts from ``<s>`` and
the model appends ``</s>`` to every source (``add_source_eos``), as attnkit's batches do.
So CTranslate2 reads the tokenizer's pieces and needs nothing of attnkit.

The folder (default ``RUN/ctranslate2``) holds CTranslate2's ``model.bin``,
``config.json`` and vocabularies, the run's tokenizer files, ``attnkit_export.json``
(which checkpoint it came from, so a retrained run's stale export is refused) and a
``README.md`` model card. It is built in a temporary folder beside it and renamed into
place.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...atomic import make_folder, new_folder_beside, replace_folder, writing
from ..precision import cpu_flag
from ..runs.loaded_run import LoadedRun, load_run
from ..runs.run_folder import RunFolder
from ..vocab_ids import SPECIAL_TOKENS
from . import model_card
from .model_card import FORMAT, VNNI_CPU_FLAGS

__all__ = [
    "DEFAULT_FOLDER",
    "INSTALL_HINT",
    "MANIFEST",
    "QUANTIZATIONS",
    "EngineUnavailable",
    "ExportInfo",
    "default_export_dir",
    "export_run",
    "import_ctranslate2",
    "read_manifest",
]

DEFAULT_FOLDER = "ctranslate2"  # RUN/ctranslate2, where `attnkit export RUN` writes
MANIFEST = "attnkit_export.json"
QUANTIZATIONS = ("float32", "int8", "int8_float32")
LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which attnkit's layers use
INSTALL_HINT = "CTranslate2 is not installed; install it with: pip install 'attnkit[export]'"


class EngineUnavailable(ImportError):
    """CTranslate2 is not installed (the message says how to install it)."""


def import_ctranslate2():
    """The ``ctranslate2`` module, with its int8 backend chosen first (:func:`int8_backend`).

    Raises:
        EngineUnavailable: it is not installed (message: :data:`INSTALL_HINT`).
    """
    int8_backend(os.environ)
    try:
        import ctranslate2
    except ImportError:
        raise EngineUnavailable(INSTALL_HINT) from None
    return ctranslate2


def int8_backend(environ: MutableMapping[str, str], cpu_flags: str | None = None) -> None:
    """Set ``CT2_USE_MKL=1`` in ``environ`` on a CPU without VNNI, unless it is set already.

    Off Intel CPUs CTranslate2 computes int8 products with oneDNN, and without
    VNNI instructions that path loses most of the model: on an AVX2-only AMD
    EPYC the int8 export gave the float32 model's greedy output for 89 of 200
    toy sentences, and at least 180 (the test's bound) through MKL (``CT2_USE_MKL=1``,
    ``tests/nmt/export/test_ctranslate2.py``). CTranslate2 reads the variable
    when it is first imported, so this runs before that import.
    """
    if "CT2_USE_MKL" not in environ and cpu_flag(VNNI_CPU_FLAGS, cpu_flags) is None:
        environ["CT2_USE_MKL"] = "1"


def default_export_dir(run_dir: str | Path) -> Path:
    """``RUN/ctranslate2``: where :func:`export_run` writes by default and
    ``--engine ctranslate2`` looks."""
    return Path(run_dir) / DEFAULT_FOLDER


@dataclass(frozen=True)
class ExportInfo:
    """What :func:`export_run` wrote.

    Attributes:
        path: the model folder.
        quantization: the weights' type on disk (``float32``, ``int8``, ``int8_float32``).
        size_bytes: the folder's size on disk.
        manifest: the content of ``attnkit_export.json``.
    """

    path: Path
    quantization: str
    size_bytes: int
    manifest: dict[str, Any]


def export_run(
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    quantization: str | None = None,
    *,
    checkpoint: str = "auto",
) -> ExportInfo:
    """Export a Transformer run's checkpoint to a CTranslate2 model folder.

    Args:
        run_dir: the run folder (``attnkit train``'s output).
        out_dir: the model folder to write (default ``RUN/ctranslate2``); an existing
            one is replaced whole.
        quantization: the weights' type: ``None`` or ``"float32"`` (exact),
            ``"int8"`` or ``"int8_float32"`` (8-bit weights, about 4x smaller).
        checkpoint: ``best``, ``last``, ``averaged`` or ``auto`` (the one chosen on the
            whole validation set when training ended: ``RunFolder.resolve_checkpoint``).

    Returns:
        an :class:`ExportInfo`.

    Raises:
        EngineUnavailable: CTranslate2 is not installed.
        ValueError: an unknown ``quantization``, an RNN run (CTranslate2 has no
            attention-RNN model), a vocabulary that does not start with attnkit's
            special tokens, or an ``out_dir`` that is a file or a folder of other files.
        FileNotFoundError: ``run_dir`` is no run folder or lacks the checkpoint.
    """
    quantization = quantization or "float32"
    if quantization not in QUANTIZATIONS:
        raise ValueError(
            f"quantization must be one of {', '.join(QUANTIZATIONS)}, got {quantization!r}"
        )
    ct2 = import_ctranslate2()
    checkpoint = RunFolder(Path(run_dir)).resolve_checkpoint(checkpoint)
    run = load_run(run_dir, checkpoint=checkpoint)
    arch = run.config.model.arch
    if arch != "transformer":
        raise ValueError(
            f"{run.folder} is an {arch.upper()} run (model.arch: {arch}); CTranslate2 has no "
            "attention-RNN model, so only Transformer runs (model.arch: transformer) can be "
            "exported"
        )
    out = Path(out_dir) if out_dir is not None else default_export_dir(run.folder)
    _check_destination(out)  # before the work, and again before the folder is replaced
    src_vocab, tgt_vocab = _vocabulary(run.src_tok, "source"), _vocabulary(run.tgt_tok, "target")
    spec = _transformer_spec(ct2, run, src_vocab, tgt_vocab)
    spec.validate()
    spec.optimize(quantization=quantization)
    manifest = model_card.manifest(run, checkpoint, quantization, ct2.__version__)
    with writing(out):  # a failure names the export folder, not the folder it is built in
        make_folder(out.parent)
        tmp = new_folder_beside(out)
        try:
            _fill(tmp, spec, run, manifest, out)
            _replace_folder(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return ExportInfo(out, quantization, _folder_size(out), manifest)


def _fill(tmp: Path, spec, run: LoadedRun, manifest: dict[str, Any], out: Path) -> None:
    """Write the model, the tokenizers, the manifest and the model card into ``tmp``."""
    spec.save(str(tmp))
    for name in manifest["tokenizer_files"]:
        shutil.copyfile(run.folder / name, tmp / name)
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    elsewhere = None if out.resolve() == default_export_dir(run.folder).resolve() else out
    card = model_card.model_card(run, manifest, elsewhere)
    (tmp / "README.md").write_text(card, encoding="utf-8")


def read_manifest(export_dir: str | Path) -> dict[str, Any]:
    """``attnkit_export.json`` of an export folder.

    Raises:
        FileNotFoundError: no export there (the message says how to make one).
        ValueError: the file is not an attnkit export manifest.
    """
    export_dir = Path(export_dir)
    path = export_dir / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(
            f"no CTranslate2 export in {export_dir} ({MANIFEST} not found); make one with: "
            f"attnkit export RUN {shlex.quote(str(export_dir))} --format ctranslate2"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{path}: not an attnkit CTranslate2 export (format field)")
    return manifest


# ---------------------------------------------------------------- the spec
def _vocabulary(tokenizer, side: str) -> list[str]:
    """The tokenizer's pieces in id order; they must start with the specials and be unique."""
    pieces = tokenizer.pieces(range(tokenizer.vocab_size))
    if tuple(pieces[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
        raise ValueError(
            f"the {side} vocabulary starts with {pieces[:4]}, not attnkit's {list(SPECIAL_TOKENS)}"
        )
    if len(set(pieces)) != len(pieces):
        raise ValueError(f"the {side} vocabulary spells some token twice; CTranslate2 needs unique")
    return pieces


def _transformer_spec(ct2, run: LoadedRun, src_vocab: Sequence[str], tgt_vocab: Sequence[str]):
    """A ``TransformerSpec`` holding the run's model (see the module docstring)."""
    cfg = run.config.model
    # Everything the model computes with: parameters, and the sinusoid tables (buffers).
    weights = {
        name: t.detach().float().cpu().numpy()
        for name, t in [*run.model.named_parameters(), *run.model.named_buffers()]
    }
    spec = ct2.specs.TransformerSpec.from_config(
        (cfg.encoder_layers, cfg.decoder_layers),
        cfg.heads,
        pre_norm=cfg.norm_first,
        activation=ct2.specs.Activation.RELU,
        alignment_layer=cfg.alignment_layer % cfg.decoder_layers,
        alignment_heads=cfg.heads,  # all heads, averaged: attnkit's alignment view
    )
    embedding = weights["tgt_embedding.weight"]
    source = weights.get("src_embedding.weight", embedding)
    encoder, decoder = spec.encoder, spec.decoder
    encoder.embeddings[0].weight = source
    decoder.embeddings.weight = embedding
    decoder.projection.weight = embedding  # the output layer is tied to the target embeddings
    decoder.projection.bias = weights["output_bias"]
    encoder.position_encodings.encodings = _positions(weights, "src_positions")
    decoder.position_encodings.encodings = _positions(weights, "tgt_positions")
    if cfg.norm_first:
        _norm(encoder.layer_norm, weights, "encoder_norm")
        _norm(decoder.layer_norm, weights, "decoder_norm")
    for i, layer in enumerate(encoder.layer):
        scope = f"encoder_layers.{i}"
        _self_attention(layer.self_attention, weights, f"{scope}.self_attn")
        _norm(layer.self_attention.layer_norm, weights, f"{scope}.norm1")
        _feed_forward(layer.ffn, weights, scope, "norm2")
    for i, layer in enumerate(decoder.layer):
        scope = f"decoder_layers.{i}"
        _self_attention(layer.self_attention, weights, f"{scope}.self_attn")
        _norm(layer.self_attention.layer_norm, weights, f"{scope}.norm1")
        _cross_attention(layer.attention, weights, f"{scope}.multihead_attn")
        _norm(layer.attention.layer_norm, weights, f"{scope}.norm2")
        _feed_forward(layer.ffn, weights, scope, "norm3")
    spec.config.add_source_eos = True  # attnkit's batches end every source with </s>
    spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
    spec.register_source_vocabulary(list(src_vocab))
    spec.register_target_vocabulary(list(tgt_vocab))
    return spec


def _positions(weights: dict, name: str):
    """The position table the model adds, ``(max_positions, D)``: learned or sinusoidal."""
    for key in (f"{name}.learned.weight", f"{name}.table"):
        if key in weights:
            return weights[key]
    raise ValueError(f"the model has no position table {name!r}")


def _norm(spec, weights: dict, scope: str) -> None:
    spec.gamma = weights[f"{scope}.weight"]
    spec.beta = weights[f"{scope}.bias"]


def _linear(spec, weights: dict, scopes: Sequence[str]) -> None:
    """``spec`` = the linear layers ``scopes`` stacked along their outputs (one fused matmul)."""
    import numpy as np

    spec.weight = np.concatenate([weights[f"{s}.weight"] for s in scopes])
    spec.bias = np.concatenate([weights[f"{s}.bias"] for s in scopes])


def _self_attention(spec, weights: dict, scope: str) -> None:
    _linear(spec.linear[0], weights, [f"{scope}.{p}" for p in ("q_proj", "k_proj", "v_proj")])
    _linear(spec.linear[1], weights, [f"{scope}.out_proj"])


def _cross_attention(spec, weights: dict, scope: str) -> None:
    _linear(spec.linear[0], weights, [f"{scope}.q_proj"])
    _linear(spec.linear[1], weights, [f"{scope}.k_proj", f"{scope}.v_proj"])
    _linear(spec.linear[2], weights, [f"{scope}.out_proj"])


def _feed_forward(spec, weights: dict, scope: str, norm: str) -> None:
    _norm(spec.layer_norm, weights, f"{scope}.{norm}")
    _linear(spec.linear_0, weights, [f"{scope}.ff.linear1"])
    _linear(spec.linear_1, weights, [f"{scope}.ff.linear2"])


# ---------------------------------------------------------------- files
def _check_destination(out: Path) -> None:
    """``out`` may receive an export: absent, empty, or an earlier export.

    Raises:
        ValueError: ``out`` is a file, or a folder holding files that are not an export.
    """
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} is a file, not a folder; choose a folder for the export")
    if out.exists() and not (out / MANIFEST).is_file() and any(out.iterdir()):
        raise ValueError(
            f"{out} exists and is not an attnkit CTranslate2 export; choose another folder"
        )


def _replace_folder(tmp: Path, out: Path) -> None:
    """Put the finished folder ``tmp`` at ``out``, replacing an older export whole.

    Raises:
        ValueError: ``out`` is a file or holds files that are not an attnkit export.
    """
    _check_destination(out)
    replace_folder(tmp, out)


def _folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
