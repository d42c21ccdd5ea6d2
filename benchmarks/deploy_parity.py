"""Does the CTranslate2 export translate like the run it came from? Parity on the test split.

``python -m benchmarks.deploy_parity RUN [--threads N] [--json FILE]`` translates the
run's test split (test2016 for a Multi30k run) with attnkit's own search and with the
run's CTranslate2 exports (float32 and int8, written to ``RUN/ctranslate2`` and
``RUN/ctranslate2-int8`` when missing, as ``benchmarks.bench_deploy`` does), then prints:

- greedy: the share of sentences whose float32 export translation equals attnkit's
  (the target of the export issue: >= 99%), and the first differing sentences;
- beam 5 (the run's other search settings): the share of identical translations,
  sacreBLEU of attnkit, float32 and int8, and the differences float32 - attnkit
  (target: within 0.2) and int8 - float32 (target: within 0.5).

Every side decodes the same sentences with the same search settings through
``attnkit.nmt.analysis.evaluate.evaluate_run``; only the engine differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .bench_deploy import _exports

SHOWN = 3


def parity(run_dir: Path, threads: int, **overrides) -> dict:
    """Greedy agreement and beam-5 BLEU of attnkit and its float32/int8 exports.

    ``overrides``: search settings other than the run's (``coverage_penalty=0.0``, ...).
    """
    import torch

    from attnkit.nmt.analysis.evaluate import evaluate_run
    from attnkit.nmt.decoding.settings import SearchSettings
    from attnkit.nmt.export.engine import open_engine
    from attnkit.nmt.runs.loaded_run import load_run

    torch.set_num_threads(threads)
    run = load_run(run_dir)
    settings = SearchSettings.from_config(run.config.decode).with_overrides(**overrides)
    folders = _exports(run_dir)
    engines = {
        "attnkit": open_engine("attnkit", run),
        **{
            f"ctranslate2 {q}": open_engine("ctranslate2", run, export_dir=f, threads=threads)
            for q, f in folders.items()
        },
    }
    greedy = {
        n: evaluate_run(run, "test", settings, beam_size=1, engine=e) for n, e in engines.items()
    }
    beam = {
        n: evaluate_run(run, "test", settings, beam_size=5, engine=e) for n, e in engines.items()
    }
    ours, theirs = greedy["attnkit"].hypotheses, greedy["ctranslate2 float32"].hypotheses
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
    beams = zip(beam["attnkit"].hypotheses, beam["ctranslate2 float32"].hypotheses, strict=True)
    return {
        "run": str(run_dir),
        "sentences": len(ours),
        "greedy_identical_share": 1 - len(differ) / len(ours),
        "greedy_differences": [
            {"line": i + 1, "attnkit": ours[i], "ctranslate2": theirs[i]} for i in differ[:SHOWN]
        ],
        "beam5_identical_share": sum(a == b for a, b in beams) / len(ours),
        "greedy_bleu": {n: e.bleu.score for n, e in greedy.items()},
        "beam5_bleu": {n: e.bleu.score for n, e in beam.items()},
    }


def report(found: dict) -> str:
    """The parity figures as text, with the issue's targets."""
    g, b = found["greedy_bleu"], found["beam5_bleu"]
    f32_gap = b["ctranslate2 float32"] - b["attnkit"]
    int8_gap = b["ctranslate2 int8"] - b["ctranslate2 float32"]
    lines = [
        f"parity of {found['run']} and its CTranslate2 exports, "
        f"{found['sentences']} test sentences",
        f"greedy: float32 export = attnkit on {found['greedy_identical_share']:.2%} of sentences "
        "(target >= 99%)",
        *(
            f"  line {d['line']}: attnkit {d['attnkit']!r} | ctranslate2 {d['ctranslate2']!r}"
            for d in found["greedy_differences"]
        ),
        "sacreBLEU      greedy   beam 5",
        *(f"  {name:<22} {g[name]:6.2f}   {b[name]:6.2f}" for name in b),
        f"beam 5: float32 export = attnkit on {found['beam5_identical_share']:.2%} of sentences; "
        f"BLEU float32 - attnkit = {f32_gap:+.2f} (target within 0.2); "
        f"int8 - float32 = {int8_gap:+.2f} (target within 0.5)",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a Transformer run folder")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--coverage-penalty", type=float, help="instead of the run's")
    parser.add_argument("--length-penalty", type=float, help="GNMT alpha, instead of the run's")
    parser.add_argument("--no-repeat-ngram", type=int, help="instead of the run's")
    parser.add_argument(
        "--early-stopping", action="store_true", default=None, help="decode.early_stopping"
    )
    args = parser.parse_args(argv)
    found = parity(
        args.run,
        args.threads,
        coverage_penalty=args.coverage_penalty,
        length_penalty=args.length_penalty,
        no_repeat_ngram=args.no_repeat_ngram,
        early_stopping=args.early_stopping,
    )
    sys.stdout.write(report(found))
    if args.json:
        args.json.write_text(json.dumps(found, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
