"""Deploying a trained Transformer: attnkit's own search against its CTranslate2 export.

``python -m benchmarks.bench_deploy RUN [--quick] [--repeats N] [--beams 1 5]
[--thread-counts 1 2]`` measures, on the run's test split (test2016 for a Multi30k run),
sentences per second for greedy and beam-5 search on 1 and 2 threads (or the cells
chosen), for attnkit (PyTorch, fp32, and bf16 autocast on a CPU with
avx512_bf16/amx_bf16; at beam 5 also with ``decode.early_stopping``, the stopping rule
closest to CTranslate2's) and CTranslate2 (float32 and int8 exports of the same
checkpoint), plus the model's size on disk and each engine's peak RSS. Every measurement
runs in a fresh process (load, warm up on 20 sentences, then translate the whole split
from text to text), the engines alternate within each repeat, and the table gives
medians. Equal work: the same sentences, checkpoint, search settings (the run's input
cut, length limit, length penalty and n-gram blocking, from the export's
``attnkit_export.json``; ``BATCH`` = 64 sentences at a time on both sides, whatever
the run's ``decode.batch_size``) and threads.

The CTranslate2 worker imports only ctranslate2 and sentencepiece, as a deployment
would (no PyTorch, no attnkit): its peak RSS is what a server would hold; its int8
backend is the one attnkit's loader sets (``int8_backend``: MKL on a CPU without
VNNI), passed in the environment. Beam search
differs in details between the two (length normalisation, see
attnkit.nmt.export.engine), so beam figures compare the same work, not the same output.

The exports are written to RUN/ctranslate2 (float32) and RUN/ctranslate2-int8 when
missing. In the suite (``python -m benchmarks.run --only deploy``) the run comes from
``ATTNKIT_DEPLOY_RUN`` or ``runs/transformer``; without one the suite says "no run".
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .report import Result, Table

WARMUP = 20
BATCH = 64  # sentences a batch, both engines
QUICK_LINES = 100
DEFAULT_RUN = Path("runs/transformer")
EARLY = ", early stopping"  # attnkit with decode.early_stopping (beam search only)
ENGINES = (
    ("attnkit", "fp32"),
    ("attnkit", "fp32" + EARLY),
    ("attnkit", "bf16"),  # only where the CPU has fast bf16 (see _engines)
    ("attnkit", "bf16" + EARLY),
    ("ctranslate2", "float32"),
    ("ctranslate2", "int8"),
)


# ------------------------------------------------------------------ workers (fresh processes)
def _attnkit_worker(run_dir: str, lines: list[str], beam: int, threads: int, kind: str) -> float:
    import torch

    from attnkit.nmt.decoding.settings import SearchSettings
    from attnkit.nmt.decoding.translate import translate_lines
    from attnkit.nmt.runs.loaded_run import load_run

    torch.set_num_threads(threads)
    run = load_run(run_dir, precision=kind.split(",")[0])
    settings = SearchSettings.from_config(
        run.config.decode, beam_size=beam, early_stopping=kind.endswith(EARLY), batch_size=BATCH
    )
    with run.precision.autocast():
        translate_lines(run, lines[:WARMUP], settings)
        start = time.perf_counter()
        translate_lines(run, lines, settings)
        return time.perf_counter() - start


def _ct2_worker(run_dir: str, export: str, lines: list[str], beam: int, threads: int) -> float:
    import ctranslate2

    manifest = json.loads((Path(export) / "attnkit_export.json").read_text())
    decode = manifest["decode"]
    if manifest["tokenizer"] == "sentencepiece":
        import sentencepiece as spm

        src = spm.SentencePieceProcessor(model_file=str(Path(export) / manifest["src_tokenizer"]))
        tgt = spm.SentencePieceProcessor(model_file=str(Path(export) / manifest["tgt_tokenizer"]))
        encode, decode_text = (lambda b: src.encode(b, out_type=str)), tgt.decode
    else:
        encode, decode_text = (lambda b: [s.split() for s in b]), " ".join
    translator = ctranslate2.Translator(
        export, device="cpu", inter_threads=1, intra_threads=threads
    )

    cut = decode.get("max_input_len")  # attnkit cuts each source to the run's input limit

    def translate(batch_lines: list[str]) -> list[str]:
        pieces = [p[:cut] if cut else p for p in encode(batch_lines)]
        groups: dict[int, list[int]] = {}  # attnkit's length limit, one per source length
        for i, p in enumerate(pieces):
            limit = int(decode["max_len_a"] * (len(p) + 1) + decode["max_len_b"])
            groups.setdefault(limit, []).append(i)
        out = [""] * len(pieces)
        for limit, indices in groups.items():
            for start in range(0, len(indices), BATCH):
                chunk = indices[start : start + BATCH]
                results = translator.translate_batch(
                    [pieces[i] for i in chunk],
                    beam_size=beam,
                    length_penalty=decode.get("length_penalty", 1.0) if beam > 1 else 0.0,
                    no_repeat_ngram_size=decode.get("no_repeat_ngram", 0),
                    max_decoding_length=limit,
                    min_decoding_length=0,
                    max_input_length=0,
                    suppress_sequences=[["<pad>"], ["<s>"]],
                )
                for i, r in zip(chunk, results, strict=True):
                    out[i] = decode_text(r.hypotheses[0])
        return out

    translate(lines[:WARMUP])
    start = time.perf_counter()
    translate(lines)
    return time.perf_counter() - start


def _worker(args: argparse.Namespace) -> None:
    lines = json.loads(Path(args.lines).read_text())
    if args.worker == "attnkit":
        seconds = _attnkit_worker(args.run, lines, args.beam, args.threads, args.kind)
    else:
        seconds = _ct2_worker(args.run, args.export, lines, args.beam, args.threads)
    print(json.dumps({"sentences_per_s": len(lines) / seconds, "rss_mb": _peak_rss_mb()}))


def _peak_rss_mb() -> float:
    """This process's own peak resident size in MiB: ``VmHWM``, the high-water mark of
    the memory it has had since it started its program.

    Not ``ru_maxrss``: Linux carries the peak of the memory a process leaves at ``exec``
    into it, so a worker started by the driver (which has loaded torch and the model)
    would report at least the driver's peak.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # no /proc: an upper bound
    return peak / (2**20 if sys.platform == "darwin" else 1024)  # bytes there, KiB on Linux


# ------------------------------------------------------------------ the driver
def _exports(run_dir: Path) -> dict[str, Path]:
    from attnkit.nmt.export.ctranslate2 import export_run, read_manifest

    folders = {"float32": run_dir / "ctranslate2", "int8": run_dir / "ctranslate2-int8"}
    for quantization, folder in folders.items():
        try:
            manifest = read_manifest(folder)
            # exports made before the manifest held the whole search rules are made again
            fresh = manifest["quantization"] == quantization and "no_repeat_ngram" in manifest.get(
                "decode", {}
            )
        except (FileNotFoundError, ValueError):
            fresh = False
        if not fresh:
            export_run(run_dir, folder, quantization)
    return folders


def _engines(beam: int) -> tuple[tuple[str, str], ...]:
    """The engines to time: early stopping changes nothing without a beam, and bf16 is
    timed only on a CPU that has fast bf16 (elsewhere PyTorch emulates it, slowly)."""
    from attnkit.nmt.precision import cpu_bf16_flag

    bf16 = cpu_bf16_flag() is not None
    return tuple(
        (engine, kind)
        for engine, kind in ENGINES
        if (beam > 1 or not kind.endswith(EARLY)) and (bf16 or not kind.startswith("bf16"))
    )


def _measure(engine, quant, run_dir, export, lines_file, beam, threads) -> dict:
    cmd = [
        sys.executable, "-m", "benchmarks.bench_deploy", str(run_dir), "--worker", engine,
        "--lines", str(lines_file), "--beam", str(beam), "--threads", str(threads),
    ]  # fmt: skip
    if export is not None:
        cmd += ["--export", str(export)]
    if engine == "attnkit":
        cmd += ["--kind", quant]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    if engine == "ctranslate2":  # the backend attnkit's own loader picks (MKL without VNNI)
        from attnkit.nmt.export.ctranslate2 import int8_backend

        int8_backend(env)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _model_mb(run_dir: Path) -> float:
    """attnkit's model on disk: the model tensors of the best checkpoint, fp32."""
    from attnkit.nmt.runs.loaded_run import load_run

    model = load_run(run_dir).model
    return sum(p.numel() * 4 for p in model.state_dict().values()) / 2**20


def _folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def measure_run(
    run_dir: Path, quick: bool, repeats: int, beams=(1, 5), thread_counts=(1, 2)
) -> Result:
    from attnkit.nmt.config import RunConfig
    from attnkit.nmt.data.corpus import load_split
    from attnkit.nmt.data.text import is_blank

    config = RunConfig.load(run_dir / "config.yaml")
    lines = [s for s in load_split(config.data, "test").src if not is_blank(s)]
    lines = lines[:QUICK_LINES] if quick else lines
    exports = _exports(run_dir)
    lines_file = run_dir / ".bench_deploy_lines.json"
    lines_file.write_text(json.dumps(lines))
    model_mb = _model_mb(run_dir)
    sizes = {
        **{("attnkit", kind): model_mb for engine, kind in ENGINES if engine == "attnkit"},
        **{("ctranslate2", q): _folder_mb(f) for q, f in exports.items()},
    }
    settings = [(beam, threads) for beam in beams for threads in thread_counts]
    samples: dict[tuple, list[dict]] = {}
    try:
        for _ in range(1 if quick else repeats):
            for beam, threads in settings:
                for engine, quant in _engines(beam):  # alternated within each repeat
                    export = exports.get(quant) if engine == "ctranslate2" else None
                    found = _measure(engine, quant, run_dir, export, lines_file, beam, threads)
                    samples.setdefault((engine, quant, beam, threads), []).append(found)
    finally:
        lines_file.unlink(missing_ok=True)
    table = Table(
        f"deploy: {run_dir.name}, {len(lines)} test sentences, medians of "
        f"{1 if quick else repeats} fresh processes",
        ["engine", "weights", "beam", "threads", "sentences/s", "x attnkit", "peak RSS MB",
         "model MB"],
    )  # fmt: skip
    ratios = {}
    for beam, threads in settings:
        base = statistics.median(
            s["sentences_per_s"] for s in samples[("attnkit", "fp32", beam, threads)]
        )
        for engine, quant in _engines(beam):
            found = samples[(engine, quant, beam, threads)]
            rate = statistics.median(s["sentences_per_s"] for s in found)
            rss = statistics.median(s["rss_mb"] for s in found)
            table.add(engine, quant, beam, threads, round(rate, 1), round(rate / base, 2),
                      round(rss), round(sizes[(engine, quant)], 1))  # fmt: skip
            if engine == "ctranslate2":
                ratios[f"deploy_{quant}_vs_attnkit_beam{beam}_t{threads}"] = rate / base
            elif quant != "fp32":
                key = quant.replace(EARLY, "_early_stopping")
                ratios[f"deploy_attnkit_{key}_vs_fp32_beam{beam}_t{threads}"] = rate / base
    return Result([table], ratios)


def run(quick: bool) -> Result:
    """The suite's entry: the run from ATTNKIT_DEPLOY_RUN or runs/transformer, else "no run"."""
    run_dir = Path(os.environ.get("ATTNKIT_DEPLOY_RUN", DEFAULT_RUN))
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return _skipped("ctranslate2 is not installed (pip install 'attnkit[export]')")
    if not (run_dir / "best.json").is_file():
        return _skipped(
            f"no run: no trained Transformer in {run_dir}; train one (attnkit train "
            f"configs/transformer.yaml --out {run_dir}) or set ATTNKIT_DEPLOY_RUN"
        )
    return measure_run(run_dir, quick, repeats=3)


def _skipped(reason: str) -> Result:
    table = Table("deploy", ["status"])
    table.add(reason)
    return Result([table], {})


def _positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return value


def _check_driver(p: argparse.ArgumentParser, run_dir: Path) -> None:
    """Refuse, before any export or timing, a run folder without a config or a missing
    ctranslate2 (each a one-line usage error, as the suite's own run() says them)."""
    if not (run_dir / "config.yaml").is_file():
        p.error(f"run: not a run folder (no config.yaml): {run_dir}")
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        p.error("ctranslate2 is not installed (pip install 'attnkit[export]')")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_deploy", description=__doc__)
    p.add_argument("run", help="a trained Transformer run folder")
    p.add_argument("--quick", action="store_true", help=f"{QUICK_LINES} sentences, one repeat")
    p.add_argument("--repeats", type=_positive, default=3)
    p.add_argument("--beams", type=_positive, nargs="+", default=[1, 5], help="beam sizes to time")
    p.add_argument(
        "--thread-counts", type=_positive, nargs="+", default=[1, 2], help="thread counts to time"
    )
    p.add_argument("--worker", choices=("attnkit", "ctranslate2"), help=argparse.SUPPRESS)
    p.add_argument("--export", help=argparse.SUPPRESS)
    p.add_argument("--lines", help=argparse.SUPPRESS)
    p.add_argument("--beam", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--kind", default="fp32", help=argparse.SUPPRESS)  # e.g. "bf16, early stopping"
    args = p.parse_args(argv)
    if args.worker:
        _worker(args)
        return 0
    _check_driver(p, Path(args.run))
    result = measure_run(Path(args.run), args.quick, args.repeats, args.beams, args.thread_counts)
    for table in result.tables:
        print(table.to_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
