"""Translating with an exported CTranslate2 model through attnkit's own output path.

:class:`CTranslate2Engine` is a :class:`~attnkit.nmt.decoding.engine.SearchEngine`: it
hands the tokenizer's pieces to ``ctranslate2.Translator.translate_batch`` and returns
:class:`~attnkit.nmt.decoding.search.Hypothesis` objects, so ``attnkit translate`` and
``attnkit evaluate`` with ``--engine ctranslate2`` write what they write with attnkit's
own search: text, attention (``--show-attention``, ``--attention-json``), n-best lists
and scores.

What matches attnkit's search exactly, and what does not:

* greedy search: the same tokens (a float32 export; the parity tests check it). Like
  attnkit, the search never emits ``<pad>`` or ``<s>`` (``suppress_sequences``), may
  end at the first step (``min_decoding_length=0``) and stops at the length limit
  ``int(max_len_a * (len + 1) + max_len_b)``, ``</s>`` included: sentences are
  decoded in groups with one limit each. The score is the log-probability, normalised
  over the tokens the search may emit (attnkit's also counts ``<pad>`` and ``<s>``),
  so it is a little higher.
* the attention weights are CTranslate2's cross-attention of the alignment layer,
  averaged over heads, as attnkit's; CTranslate2 leaves out the column of the
  source's ``</s>``, which is put back as what the row's other weights leave of 1.
  (CTranslate2 4.x's beam search over several sentences returns a wrong first row;
  it is replaced by one greedy step's, which is the same for every hypothesis.)
* beam search: CTranslate2 searches with its own length normalisation
  (``length ** length_penalty``) and stops as soon as ``beam_size`` hypotheses have
  finished. It returns all ``beam_size`` of them, and they are ranked as attnkit ranks
  its finished hypotheses: the GNMT score ``log p / ((5 + length) / 6) ** alpha`` plus
  attnkit's coverage penalty on the returned attention (CTranslate2's own coverage
  penalty, another formula, is not used). The candidates can still differ from
  attnkit's, so now and then a beam translation does (benchmarks/deploy_parity.py
  measures how often); the score is attnkit's ranking score.
* int8 weights change the numbers a little, and so, now and then, a token.

Views of other layers or heads than the alignment view (``--layer``, ``--head``,
``--plot``) are computed by attnkit's model on the engine's output tokens.
"""

from __future__ import annotations

import os
import shlex
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from ..data.batching import Examples
from ..decoding.beam import coverage_penalty, length_penalty
from ..decoding.engine import SearchEngine, TorchEngine
from ..decoding.ensemble import load_ensemble
from ..decoding.search import Hypothesis
from ..decoding.settings import SearchSettings
from ..decoding.steps import max_lengths
from ..runs.loaded_run import LoadedRun
from ..runs.run_folder import RunFolder
from ..vocab_ids import BOS, EOS, PAD, SPECIAL_TOKENS
from .ctranslate2 import default_export_dir, import_ctranslate2, read_manifest
from .model_card import checkpoint_sha256

__all__ = ["ENGINES", "CTranslate2Engine", "open_engine"]

ENGINES = ("attnkit", "ctranslate2")
EOS_TOKEN = SPECIAL_TOKENS[EOS]
# attnkit's search rules these out at every step (decoding.steps.next_log_probs).
SUPPRESSED = [[SPECIAL_TOKENS[PAD]], [SPECIAL_TOKENS[BOS]]]


def open_engine(
    name: str,
    run: LoadedRun,
    *,
    export_dir: str | Path | None = None,
    checkpoint: str = "auto",
    threads: int | None = None,
    ensemble: Sequence[str | Path] = (),
) -> SearchEngine:
    """The search engine called ``name`` for ``run``: ``attnkit`` or ``ctranslate2``.

    Args:
        name: one of :data:`ENGINES`.
        run: the loaded run (its tokenizers; attnkit's model for ``attnkit``).
        export_dir: the CTranslate2 export (default ``RUN/ctranslate2``).
        checkpoint: the run's checkpoint the export must come from, and the one each
            ``ensemble`` run loads: ``auto`` (the default, as for
            :func:`~attnkit.nmt.runs.loaded_run.load_run` and
            :func:`~attnkit.nmt.export.ctranslate2.export_run`), ``best``, ``last`` or
            ``averaged``.
        threads: CPU threads for CTranslate2 (default: PyTorch's thread count).
        ensemble: folders of other runs to decode with ``run``'s model, their
            predictions averaged (:mod:`attnkit.nmt.decoding.ensemble`); ``attnkit``
            only.

    Raises:
        ValueError: an unknown engine, ``ctranslate2`` for a run that is no
            Transformer, an export made from another checkpoint than the run's
            ``checkpoint`` now is or from another run (the message says what to export),
            an ``ensemble`` for ``ctranslate2``, or an ensemble run with other
            tokenizers than ``run``'s.
        FileNotFoundError: no export in ``export_dir``, or an ensemble folder that
            is no run folder or lacks ``checkpoint``.
        EngineUnavailable: CTranslate2 is not installed.
    """
    if name not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {name!r}")
    if name == "attnkit":
        model = load_ensemble(run, ensemble, checkpoint=checkpoint) if ensemble else run.model
        return TorchEngine(model, run.device)
    if ensemble:
        raise ValueError(f"an ensemble decodes with attnkit's own search, not {name}")
    arch = run.config.model.arch
    if arch != "transformer":
        raise ValueError(
            f"{run.folder} is an {arch.upper()} run (model.arch: {arch}); CTranslate2 runs "
            "only Transformer runs: use attnkit's own search (--engine attnkit)"
        )
    import_ctranslate2()  # not installed: say how to install before asking for an export
    folder = Path(export_dir) if export_dir is not None else default_export_dir(run.folder)
    manifest = read_manifest(folder)
    checkpoint = RunFolder(run.folder).resolve_checkpoint(checkpoint)
    if manifest.get("checkpoint_sha256") != checkpoint_sha256(run.folder, checkpoint):
        raise ValueError(_stale(folder, manifest, run, checkpoint))
    return CTranslate2Engine(folder, run, threads=threads)


def _stale(folder: Path, manifest: dict, run: LoadedRun, checkpoint: str) -> str:
    """Why the export in ``folder`` is not of ``run``'s ``checkpoint``, and what to do:
    ask for the checkpoint it holds, or re-export a retrained run's own export; never
    overwrite another run's. Paths in the commands are shell-quoted, to be pasted."""
    exported = manifest.get("run")
    if exported and Path(exported).resolve() != run.folder.resolve():
        command = f"attnkit export {shlex.quote(str(run.folder))} --checkpoint {checkpoint}"
        return (
            f"{folder} is an export of {exported}, not of {run.folder}; export this run "
            f"({command}) and use its folder"
        )
    held = manifest.get("checkpoint")
    if held and held != checkpoint:
        return (
            f"{folder} holds {run.folder}'s {held!r} checkpoint, not {checkpoint!r}: pass "
            f"--checkpoint {held}, or export {checkpoint!r} to another folder (attnkit export "
            f"{shlex.quote(str(run.folder))} OTHER_FOLDER --checkpoint {checkpoint})"
        )
    return (
        f"{folder} was exported from another model than {run.folder}'s {checkpoint!r} "
        f"checkpoint (retrained since?); export it again: attnkit export "
        f"{shlex.quote(str(run.folder))} {shlex.quote(str(folder))} --checkpoint {checkpoint}"
    )


class CTranslate2Engine:
    """Greedy and beam search by CTranslate2 on an exported model (see the module docstring).

    Args:
        export_dir: the folder :func:`~attnkit.nmt.export.ctranslate2.export_run` wrote.
        run: the run it came from (its tokenizers and device).
        threads: CPU threads (``intra_threads``); default PyTorch's thread count.
    """

    name = "ctranslate2"

    def __init__(self, export_dir: str | Path, run: LoadedRun, *, threads: int | None = None):
        ct2 = import_ctranslate2()
        device = torch.device(run.device)
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"CTranslate2 runs on cpu or cuda, not on {device.type}")
        self.translator = ct2.Translator(
            os.fspath(export_dir),
            device=device.type,
            device_index=device.index or 0,
            compute_type="default",  # the type the export stored
            inter_threads=1,
            intra_threads=threads or torch.get_num_threads(),
        )
        self.src_tok = run.src_tok
        self.max_target_len = run.model.max_target_len  # as attnkit's search stops
        self.max_source_len = run.model.max_source_len  # as attnkit's search reads
        pieces = run.tgt_tok.pieces(range(run.tgt_tok.vocab_size))
        self.tgt_ids = {piece: i for i, piece in enumerate(pieces)}

    def n_best(
        self, examples: Examples, settings: SearchSettings, n: int
    ) -> list[list[Hypothesis]]:
        """Per example, in input order, 1 to ``n`` hypotheses, best first."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        lengths = torch.tensor([len(ids) + 1 for ids in examples.src])  # </s> appended
        limits = max_lengths(
            lengths, settings.max_len_a, settings.max_len_b, self.max_target_len
        ).tolist()
        groups: dict[int, list[int]] = defaultdict(list)
        for index, limit in enumerate(limits):
            groups[limit].append(index)
        results: list[list[Hypothesis]] = [[] for _ in examples.src]
        for limit, indices in groups.items():
            for start in range(0, len(indices), settings.batch_size):
                chunk = indices[start : start + settings.batch_size]
                sources = [self.src_tok.pieces(examples.src[i]) for i in chunk]
                for i, found in zip(chunk, self._search(sources, settings, n, limit), strict=True):
                    results[i] = found
        return results

    def _search(
        self, sources: list[list[str]], settings: SearchSettings, n: int, limit: int
    ) -> list[list[Hypothesis]]:
        greedy = settings.beam_size == 1
        alpha = 0.0 if greedy else settings.length_penalty  # greedy: the plain log-probability
        outputs = self.translator.translate_batch(
            sources,
            beam_size=settings.beam_size,
            num_hypotheses=settings.beam_size,  # all finished ones, ranked below
            length_penalty=alpha,
            no_repeat_ngram_size=settings.no_repeat_ngram,
            suppress_sequences=SUPPRESSED,
            max_input_length=0,  # sources come cut to the run's input limit already
            max_decoding_length=limit,
            min_decoding_length=0,
            return_end_token=True,
            return_scores=True,
            return_attention=True,
        )
        found = [
            [
                self._hypothesis(tokens, attention, score, alpha, len(source) + 1)
                for tokens, attention, score in zip(
                    out.hypotheses, out.attention, out.scores, strict=True
                )
            ]
            for source, out in zip(sources, outputs, strict=True)
        ]
        if greedy:
            return found
        if len(sources) > 1:
            self._fix_first_rows(sources, found)
        return [
            _rank(hypotheses, settings, len(source))[:n]
            for source, hypotheses in zip(sources, found, strict=True)
        ]

    def _fix_first_rows(self, sources: list[list[str]], found: list[list[Hypothesis]]) -> None:
        """Put the true first-step attention into beam hypotheses, in place.

        CTranslate2 4.x's beam search over a batch of several sentences returns, for
        the first step only, another sentence's attention row. That step reads only
        the source and ``<s>``, so one greedy step gives the right row for every
        hypothesis of the sentence.
        """
        first = self.translator.translate_batch(
            sources,
            beam_size=1,
            max_input_length=0,
            max_decoding_length=1,
            min_decoding_length=0,
            return_end_token=True,
            return_attention=True,
        )
        for source, out, hypotheses in zip(sources, first, found, strict=True):
            row = self._weights([out.attention[0][0]], 1, len(source) + 1)[0]  # (S,)
            for hyp in hypotheses:
                hyp.weights[0] = row

    def _hypothesis(
        self, tokens: list[str], attention: list[list[float]], score: float, alpha: float, src: int
    ) -> Hypothesis:
        ended = bool(tokens) and tokens[-1] == EOS_TOKEN
        ids = [self.tgt_ids[t] for t in (tokens[:-1] if ended else tokens)]
        weights = self._weights(attention, len(tokens), src)
        log_prob = float(score) * len(tokens) ** alpha
        return Hypothesis(ids, weights, float(score), log_prob)

    @staticmethod
    def _weights(attention: list[list[float]], steps: int, src: int) -> torch.Tensor:
        """CTranslate2's attention rows as ``(steps, src)`` float32 weights.

        CTranslate2 leaves out the column of the ``</s>`` it appended to the source;
        it is what the row's other weights leave of 1.
        """
        weights = torch.tensor(attention, dtype=torch.float32).reshape(steps, -1)  # (T, S-1)
        if weights.shape[1] == src - 1:
            rest = (1.0 - weights.sum(dim=1, keepdim=True)).clamp(min=0.0)  # (T, 1)
            weights = torch.cat([weights, rest], dim=1)  # (T, S)
        return weights


def _rank(hypotheses: list[Hypothesis], settings: SearchSettings, words: int) -> list[Hypothesis]:
    """Finished hypotheses with attnkit's ranking score, best first: ``log p / lp + cp``
    (GNMT, Wu et al. 2016, eq. 14; :mod:`attnkit.nmt.decoding.beam`), ``words`` source
    pieces under the coverage penalty (the appended ``</s>`` left out)."""
    ranked = [
        replace(
            hyp,
            score=hyp.log_prob / length_penalty(len(hyp.weights), settings.length_penalty)
            + coverage_penalty(hyp.weights[:, :words], settings.coverage_penalty),
        )
        for hyp in hypotheses
    ]
    return sorted(ranked, key=lambda hyp: hyp.score, reverse=True)
