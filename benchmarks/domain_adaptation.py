"""What fine-tuning (``train.init_from``) buys: a general model adapted to a small domain.

From the root of a clone, with the shared data beside it::

    python -m benchmarks.domain_adaptation --out runs/domain [--parent-steps 800]
        [--steps 300] [--threads 2]

English->French. The general model is ``configs/align.yaml`` (Tatoeba: 142k short
everyday pairs) trained ``--parent-steps`` steps. The domain is TICO-19 (3,071
COVID-19 sentences from PubMed, Wikipedia and others; CC0), split by line into
train (all but the last 1,000), valid (500) and test (the last 500). Three runs are
scored on the same TICO test pairs with sacreBLEU (``attnkit evaluate``):

- ``general``: the Tatoeba model as it is;
- ``scratch``: the same model trained ``--steps`` steps on TICO train alone
  (its own tokenizer: 2,000 pieces; 8,000 do not fit so little text);
- ``fine-tuned``: the Tatoeba model trained ``--steps`` more steps on TICO train
  (``train.init_from``: its weights and tokenizer, a fresh optimizer).

Each run is trained once (seed 1); the runs of ``OUT`` are reused when they exist.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICO = ROOT.parent / "shared" / "data" / "tico19_en_fr" / "all.en-fr.tmx.zip"
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
SPLITS = {"train": slice(None, -1000), "valid": slice(-1000, -500), "test": slice(-500, None)}


def tico_pairs(path: Path) -> list[tuple[str, str]]:
    """The (English, French) segments of the TICO-19 translation memory, in file order."""
    with zipfile.ZipFile(path) as archive:
        root = ET.fromstring(archive.read(archive.namelist()[0]))
    pairs = []
    for unit in root.iter("tu"):
        segs = {tuv.get(XML_LANG): " ".join(tuv.findtext("seg", "").split()) for tuv in unit}
        pairs.append((segs["en"], segs["fr"]))
    return pairs


def write_splits(pairs: list[tuple[str, str]], folder: Path) -> dict[str, tuple[Path, Path]]:
    """train/valid/test as line-aligned ``SPLIT.en`` / ``SPLIT.fr`` files in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, part in SPLITS.items():
        en, fr = folder / f"{split}.en", folder / f"{split}.fr"
        en.write_text("".join(p[0] + "\n" for p in pairs[part]), encoding="utf-8")
        fr.write_text("".join(p[1] + "\n" for p in pairs[part]), encoding="utf-8")
        files[split] = (en, fr)
    return files


def attnkit(*argv: str) -> str:
    """Run the CLI; its stdout (stderr passes through)."""
    done = subprocess.run(
        [sys.executable, "-m", "attnkit", *argv], check=True, stdout=subprocess.PIPE, text=True
    )
    return done.stdout


def train(config: str, run: Path, *overrides: str) -> None:
    if not (run / "choice.json").is_file():
        attnkit("train", config, "--out", str(run), "--no-progress", *overrides)


def tico_data(files: dict[str, tuple[Path, Path]]) -> list[str]:
    """``--set`` overrides that train on the TICO splits (longer sentences than Tatoeba's)."""
    split = ", ".join(
        f"{name}: {{src: {files[name][0]}, tgt: {files[name][1]}}}" for name in ("train", "valid")
    )
    return ["--set", f"data={{{split}, src_lang: en, tgt_lang: fr}}"]


def bleu(run: Path, test: tuple[Path, Path], threads: int) -> float:
    out = attnkit("evaluate", str(run), "--src", str(test[0]), "--tgt", str(test[1]),
                  "--threads", str(threads))  # fmt: skip
    return float(re.search(r"BLEU[^=]*= ([0-9.]+)", out).group(1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("runs/domain"))
    p.add_argument("--parent-steps", type=int, default=800)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    files = write_splits(tico_pairs(TICO), args.out / "tico")
    common = ["--train.threads", str(args.threads), "--train.max_minutes", "60"]
    lengths = ["--data.max_src_len", "80", "--data.max_tgt_len", "80"]
    domain = [*tico_data(files), *lengths, "--train.max_steps", str(args.steps)]
    domain += ["--train.valid_every", str(max(args.steps // 3, 1)), "--train.epochs", "1000"]
    general = args.out / "general"
    train("configs/align.yaml", general, *common, "--train.max_steps", str(args.parent_steps))
    train("configs/align.yaml", args.out / "scratch", *common, *domain,
          "--tokenizer.vocab_size", "2000")  # fmt: skip
    train("configs/align.yaml", args.out / "fine-tuned", *common, *domain,
          "--train.init_from", str(general), "--train.lr", "0.0005")  # fmt: skip
    counts = {
        name: len(en.read_text(encoding="utf-8").splitlines()) for name, (en, _) in files.items()
    }
    print(f"TICO-19 en->fr: {counts['train']} train / {counts['valid']} valid / "
          f"{counts['test']} test pairs; {args.threads} threads")  # fmt: skip
    print(f"{'run':<12} {'test BLEU':>9}")
    for name in ("general", "scratch", "fine-tuned"):
        print(f"{name:<12} {bleu(args.out / name, files['test'], args.threads):>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
