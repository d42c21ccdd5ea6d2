"""The toy Transformer presets: valid, and the reverse one learns within a fixed step budget.

The full preset takes about two minutes of one core (benchmarks/toy_transformer.py
measures test exact match >= 95%); here the same settings on a reduced task
(sequences of 3-6 of 10 symbols, a narrower model, 250 steps) must reach a
clear majority of exact reversals in about 15 s of one core.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attnkit.cli import main
from attnkit.nmt.config import RunConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
REDUCED = [
    "--data.toy.max_len", "6",
    "--data.toy.num_symbols", "10",
    "--data.toy.train_size", "2000",
    "--data.toy.valid_size", "50",
    "--data.toy.test_size", "50",
    "--model.d_model", "64",
    "--model.ff_dim", "128",
    "--train.warmup_steps", "100",
    "--train.max_steps", "250",
    "--train.valid_every", "50",
    "--train.early_stopping", "null",
    "--train.threads", "1",
]  # fmt: skip


@pytest.mark.parametrize("task", ["reverse", "copy"])
def test_the_toy_transformer_presets_are_transformers_on_their_task(task):
    config = RunConfig.load(CONFIGS / f"{task}_transformer.yaml")
    assert config.model.arch == "transformer" and config.data.toy.task == task


def test_the_reverse_transformer_learns_within_250_steps(tmp_path, capsys):
    from attnkit.nmt.analysis.evaluate import evaluate_run
    from attnkit.nmt.runs.loaded_run import load_run

    out = tmp_path / "rev"
    preset = str(CONFIGS / "reverse_transformer.yaml")
    assert main(["train", preset, "--out", str(out), "--no-progress", *REDUCED]) == 0
    result = evaluate_run(load_run(out), "test", beam_size=1)
    exact = sum(h == r for h, r in zip(result.hypotheses, result.references, strict=True))
    assert exact >= 0.7 * len(result.references), f"{exact} of {len(result.references)}"
