"""Time to quality: wall-clock minutes to validation BLEU 30 and 35, attnkit against Joey NMT.

The figure a user cares about: how long until the translator is good. Both
toolkits train the same model on the same data, one after the other on this
machine, with the same threads:

- data: the bundled Multi30k de->en, train (29,000 pairs, pairs longer than
  40 subwords dropped) and valid (1,014 pairs, all of them scored);
- vocabulary: the joint 4,000-piece sentencepiece model that attnkit's run
  trains first; Joey NMT loads the same file and gets the same pieces as its
  vocabulary file;
- model: the quick preset's (its sizes read from configs/quick.yaml; E=128,
  D=192 until 2026-12-06, E=160, D=256 since), GRU, bidirectional encoder D per
  direction, bridge to the decoder state, the current decoder state as the
  query, ``tanh(W_c [c_t; h_t])``, no input feeding, untied embeddings;
- the score is where the toolkits differ. attnkit's preset uses Luong's
  general score divided by ``sqrt(D)``. Joey NMT has the unscaled general
  score (``luong``, the same parameters), which can saturate the softmax at
  this learning rate, and the additive one (``bahdanau``, 1.3% more
  parameters: its ``W_q``, ``W_k`` and ``v``). The default is
  ``--joey-attention bahdanau``, which has no such risk; the table prints
  both parameter counts. (On 2026-12-01 the two Joey scores started alike:
  validation BLEU 0.9 / 2.0 for ``luong`` and 0.0 / 2.7 for ``bahdanau`` at
  steps 250 / 500, where attnkit had 7.9 / 21.6.);
- training: Adam at 0.002, the preset's batch size (64 sentences until
  2026-12-06, 128 since), label smoothing 0.1, gradient norm clipped at 1.0,
  dropout 0.1, learning rate halved when
  validation BLEU stalls once (Joey NMT has no linear decay to a step budget,
  so attnkit's run leaves the preset's ``lr_schedule: linear`` for this
  one); each toolkit batches its own way (attnkit by length buckets, Joey
  NMT in random order, its default);
- validation every 250 steps: greedy decoding of the whole valid set,
  sacreBLEU (13a) on detokenized output.

Each run is a subprocess; a watcher notes the wall time since launch (start-up,
data loading and validation included, on both sides) at which every
validation line appears, and stops the run once BLEU 35 is reached or the time
cap hits.

Joey NMT pins older libraries, so it lives in its own virtual environment::

    python -m benchmarks.time_to_quality --setup      # once: pip install joeynmt
    python -m benchmarks.time_to_quality --threads 1  # both runs, then the table

Without that environment the Joey NMT row says "not installed". Results go to
``--out`` (``runs/time_to_quality``): both run folders, each toolkit's curve
(``attnkit.json``, ``joey.json``) and ``result.json``; ``--only joey`` (or
``attnkit``) runs one side again and reads the other's curve from there.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from attnkit.nmt.data.corpus import bundled_multi30k

ROOT = Path(__file__).resolve().parent.parent
LEVELS = (30.0, 35.0)
VALID_EVERY = 250
LR = 0.002  # both sides' peak rate, halved on a plateau (the preset itself decays linearly)
JOEY_VERSION = "2.3.0"


@dataclass
class Curve:
    """One toolkit's validations: ``(seconds since launch, step, BLEU)`` rows."""

    toolkit: str
    rows: list[tuple[float, int, float]] = field(default_factory=list)
    params: int | None = None
    note: str = ""
    minutes: float | None = None  # how long the run was watched

    def minutes_to(self, level: float) -> float | None:
        """Minutes until validation BLEU first reached ``level`` (``None``: never)."""
        return next((s / 60 for s, _, bleu in self.rows if bleu >= level), None)


# ----------------------------------------------------------------- log readers
def attnkit_validations(run_dir: Path) -> list[tuple[int, float]]:
    """``(step, BLEU)`` of each line of an attnkit run's ``metrics.jsonl``."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(row["step"], row["valid_bleu"]) for row in rows]


_JOEY_LINE = re.compile(r"Steps: (\d+)\s.*\bbleu: ([\d.]+)")


def joey_validations(model_dir: Path) -> list[tuple[int, float]]:
    """``(step, BLEU)`` of each line of Joey NMT's ``validations.txt``."""
    path = model_dir / "validations.txt"
    if not path.is_file():
        return []
    found = (_JOEY_LINE.search(line) for line in path.read_text().splitlines())
    return [(int(m[1]), float(m[2])) for m in found if m]


def joey_params(model_dir: Path) -> int | None:
    """The ``Total params`` figure Joey NMT logs when it builds the model."""
    log = model_dir / "train.log"
    found = re.search(r"Total params: (\d+)", log.read_text()) if log.is_file() else None
    return int(found[1]) if found else None


# ----------------------------------------------------------------- the watcher
def watch(
    command: list[str],
    read: Callable[[], list[tuple[int, float]]],
    *,
    cap_minutes: float,
    env: dict[str, str],
    log: Path,
) -> tuple[list[tuple[float, int, float]], str, float]:
    """Run ``command``; time each new validation; stop at BLEU max(LEVELS) or the cap.

    Returns the ``(seconds, step, BLEU)`` rows, why it stopped, and its minutes.
    """
    rows: list[tuple[float, int, float]] = []
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            while True:
                done = proc.poll() is not None
                now = time.monotonic() - start
                rows += [(now, step, bleu) for step, bleu in read()[len(rows) :]]
                if rows and rows[-1][2] >= max(LEVELS):
                    return rows, f"reached BLEU {max(LEVELS):g}", now / 60
                if done:
                    return rows, f"exited with status {proc.returncode} (see {log})", now / 60
                if now >= cap_minutes * 60:
                    return rows, f"time cap of {cap_minutes:g} min", now / 60
                time.sleep(1.0)
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()


def thread_env(threads: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


# ----------------------------------------------------------------- attnkit
def attnkit_command(run_dir: Path, threads: int) -> list[str]:
    """The quick preset without its budgets, on Joey NMT's schedule (plateau, ``LR``)."""
    return [
        sys.executable, "-m", "attnkit", "train", "configs/quick.yaml", "--out", str(run_dir),
        "--train.max_steps", "null", "--train.max_minutes", "null", "--train.epochs", "100",
        "--train.early_stopping", "null", "--train.valid_bleu_sentences", "null",
        "--train.lr_schedule", "plateau", "--train.lr", str(LR),
        "--train.valid_every", str(VALID_EVERY), "--train.threads", str(threads),
    ]  # fmt: skip


def run_attnkit(out: Path, threads: int, cap_minutes: float) -> Curve:
    run_dir = out / "attnkit"
    shutil.rmtree(run_dir, ignore_errors=True)
    rows, note, minutes = watch(
        attnkit_command(run_dir, threads),
        lambda: attnkit_validations(run_dir),
        cap_minutes=cap_minutes,
        env=thread_env(threads),
        log=out / "attnkit.log",
    )
    return Curve("attnkit", rows, attnkit_params(run_dir), note, minutes)


def attnkit_params(run_dir: Path) -> int | None:
    from safetensors import safe_open

    files = sorted(run_dir.glob("last.*.safetensors"))
    if not files:
        return None
    with safe_open(files[-1], "pt") as weights:
        keys = weights.keys()  # a safe_open handle is not iterable
        names = [k for k in keys if k.startswith("model.")]  # not the optimizer's state
        return sum(math.prod(weights.get_slice(k).get_shape()) for k in names)


# ----------------------------------------------------------------- Joey NMT
def joey_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def setup_joey(venv: Path) -> None:
    """Create ``venv`` and install Joey NMT with the CPU torch our constraints pin."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(joey_python(venv)), "-m", "pip", "install", "-c", str(ROOT / "constraints.txt")]
    # joeynmt 2.3.0 imports importlib_metadata without declaring it, and calls
    # SentencePieceProcessor.SetVocabulary, which sentencepiece 0.2.1 dropped
    packages = [
        "torch==2.13.0",
        f"joeynmt=={JOEY_VERSION}",
        "importlib-metadata",
        "sentencepiece==0.2.0",
    ]
    subprocess.run([*pip, *packages], check=True)


def joey_installed(venv: Path) -> bool:
    python = joey_python(venv)
    if not python.is_file():
        return False
    return (
        subprocess.run(
            [str(python), "-c", "import joeynmt.__main__"], capture_output=True
        ).returncode
        == 0
    )


def write_joey_data(folder: Path, spm_model: Path) -> Path:
    """Plain-text Multi30k splits and a vocabulary file of the sentencepiece pieces."""
    import sentencepiece as spm

    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid"):
        corpus = bundled_multi30k(split)
        (folder / f"{split}.de").write_text("\n".join(corpus.src) + "\n")
        (folder / f"{split}.en").write_text("\n".join(corpus.tgt) + "\n")
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not sp.is_control(i)]
    pieces = [p for p in pieces if not sp.is_unknown(sp.piece_to_id(p))]
    (folder / "vocab.txt").write_text("\n".join(pieces) + "\n")
    return folder


def joey_config(data: Path, model_dir: Path, spm_model: Path, attention: str = "bahdanau") -> dict:
    """A Joey NMT 2.3 config with the quick preset's model, data and optimiser."""
    data, model_dir, spm_model = data.resolve(), model_dir.resolve(), spm_model.resolve()

    def side(lang: str) -> dict:
        return {
            "lang": lang,
            "level": "bpe",
            "lowercase": False,
            "max_length": 40,
            "voc_file": str(data / "vocab.txt"),
            "tokenizer_type": "sentencepiece",
            "tokenizer_cfg": {"model_file": str(spm_model)},
        }

    preset = yaml.safe_load((ROOT / "configs" / "quick.yaml").read_text())
    model = preset["model"]

    def rnn(**extra) -> dict:
        embed = {"embedding_dim": model["embed_dim"], "scale": False}
        return {"type": "recurrent", "rnn_type": "gru", "hidden_size": model["hidden_size"],
                "embeddings": embed, "dropout": model["dropout"], "num_layers": 1,
                **extra}  # fmt: skip

    return {
        "name": "multi30k_quick_preset",
        "joeynmt_version": JOEY_VERSION,
        "model_dir": str(model_dir),
        "use_cuda": False,
        "data": {
            "train": str(data / "train"),
            "dev": str(data / "valid"),
            "dataset_type": "plain",
            "src": side("de"),
            "trg": side("en"),
        },
        "training": {
            "random_seed": 1,
            "optimizer": "adam",
            "learning_rate": LR,
            "learning_rate_min": 1e-5,
            "clip_grad_norm": 1.0,
            "scheduling": "plateau",
            "patience": 1,
            "decrease_factor": 0.5,
            "label_smoothing": 0.1,
            "normalization": "tokens",
            "batch_size": preset["train"]["batch_size"],
            "batch_type": "sentence",
            "epochs": 100,
            "validation_freq": VALID_EVERY,
            "logging_freq": 50,  # Joey wants validation_freq divisible by it
            "early_stopping_metric": "bleu",
            "overwrite": True,
            "shuffle": True,
            "print_valid_sents": [],
            "keep_best_ckpts": 1,
        },
        "testing": {
            "beam_size": 1,
            "batch_size": 100,
            "batch_type": "sentence",
            "eval_metrics": ["bleu"],
            "sacrebleu_cfg": {"tokenize": "13a"},
        },
        "model": {
            "initializer": "xavier_uniform",
            "tied_embeddings": False,
            "encoder": rnn(bidirectional=True),
            "decoder": rnn(
                hidden_dropout=0.1, attention=attention, input_feeding=False, init_hidden="bridge"
            ),
        },
    }


# Joey NMT 2.3.0 passes ``verbose=`` to ReduceLROnPlateau, which torch 2.13
# no longer takes; the launcher drops it (it only printed) and starts Joey.
JOEY_LAUNCHER = """
import runpy, sys
from torch.optim import lr_scheduler
init = lr_scheduler.ReduceLROnPlateau.__init__
def without_verbose(self, *args, verbose=None, **kwargs):
    init(self, *args, **kwargs)
lr_scheduler.ReduceLROnPlateau.__init__ = without_verbose
sys.argv = ["joeynmt", "train", sys.argv[1]]
runpy.run_module("joeynmt", run_name="__main__")
"""


def run_joey(spm_model: Path, args: argparse.Namespace) -> Curve:
    out = args.out
    model_dir = out / "joey"
    shutil.rmtree(model_dir, ignore_errors=True)
    data = write_joey_data(out / "joey_data", spm_model)
    config = out / "joey.yaml"
    config.write_text(yaml.safe_dump(joey_config(data, model_dir, spm_model, args.joey_attention)))
    command = [str(joey_python(args.venv)), "-c", JOEY_LAUNCHER, str(config)]
    rows, note, minutes = watch(
        command,
        lambda: joey_validations(model_dir),
        cap_minutes=args.minutes,
        env=thread_env(args.threads),
        log=out / "joey.log",
    )
    name = f"Joey NMT {JOEY_VERSION} ({args.joey_attention})"
    return Curve(name, rows, joey_params(model_dir), note, minutes)


# ----------------------------------------------------------------- report
def report(curves: list[Curve], threads: int) -> str:
    head = ["toolkit", "params", "validations"]
    head += [f"min to BLEU {level:g}" for level in LEVELS] + ["best BLEU", "stopped by"]
    lines = [f"threads: {threads}", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in curves:
        reached = [c.minutes_to(level) for level in LEVELS]
        best = max((bleu for _, _, bleu in c.rows), default=None)
        cells = [c.toolkit, f"{c.params:,}" if c.params else "-", str(len(c.rows))]
        cells += ["-" if m is None else f"{m:.1f}" for m in reached]
        cells += ["-" if best is None else f"{best:.2f}", c.note]
        lines.append("| " + " | ".join(cells) + " |")
    if len(curves) == 2:
        for level in LEVELS:
            ours, peer = (c.minutes_to(level) for c in curves)
            lines.append(f"ttq_bleu{level:g}_attnkit_vs_joey: {_ratio(ours, peer, curves[1])}")
    return "\n".join(lines)


def _ratio(ours: float | None, peer: float | None, peer_curve: Curve) -> str:
    """attnkit's time over Joey's; an upper bound when Joey ran to the time cap without it."""
    if ours is None:
        return "attnkit did not reach it"
    if peer is not None:
        return f"{ours / peer:.2f}"
    watched = peer_curve.minutes
    if peer_curve.note.startswith("time cap") and watched:
        return f"<= {ours / watched:.2f} (Joey NMT not there after {watched:.1f} min)"
    return "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--setup", action="store_true", help="create the Joey NMT venv and exit")
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-joeynmt")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "time_to_quality")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--minutes", type=float, default=60.0, help="time cap of each run")
    parser.add_argument(
        "--joey-attention",
        choices=["bahdanau", "luong"],
        default="bahdanau",
        help="Joey NMT's score (its luong is unscaled; see the module docstring)",
    )
    parser.add_argument(
        "--only",
        choices=["attnkit", "joey"],
        help="run one toolkit again and take the other's curve from --out",
    )
    args = parser.parse_args(argv)
    if args.setup:
        setup_joey(args.venv)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    curves = [measured("attnkit", args), measured("joey", args)]
    text = report(curves, args.threads)
    print(text)
    result = {"threads": args.threads, "curves": [asdict(c) for c in curves], "table": text}
    (args.out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


def measured(toolkit: str, args: argparse.Namespace) -> Curve:
    """Run ``toolkit`` (or, with ``--only`` naming the other one, load its saved curve)."""
    saved = args.out / f"{toolkit}.json"
    if args.only not in (None, toolkit):
        if not saved.is_file():
            raise SystemExit(f"--only {args.only}: no earlier {toolkit} curve in {saved}")
        data = json.loads(saved.read_text())
        return Curve(**{**data, "rows": [tuple(row) for row in data["rows"]]})
    if toolkit == "attnkit":
        curve = run_attnkit(args.out, args.threads, args.minutes)
    elif joey_installed(args.venv):
        spm_model = args.out / "attnkit" / "spm.model"
        curve = run_joey(spm_model, args)
    else:
        return Curve("Joey NMT", note=f"not installed (run with --setup; venv {args.venv})")
    saved.write_text(json.dumps(asdict(curve), indent=2) + "\n")
    return curve


if __name__ == "__main__":
    raise SystemExit(main())
