"""Shared helpers for the explorer's tests: tiny run folders and a served app.

Imported explicitly (``from serve_helpers import ...``), not a pytest conftest.
"""

from __future__ import annotations

from attnkit.nmt.tokenizer import WordTokenizer
from attnkit.nmt.translate import load_run
from attnkit.serve import Limits, ServedRun, create_app
from conftest_nmt import make_run

CORPUS = ["ein Mann geht nach Hause", "ein Hund rennt durch den Schnee", "zwei Frauen essen"]
TRANSFORMER = {
    "arch": "transformer",
    "d_model": 16,
    "heads": 2,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "ff_dim": 32,
    "dropout": 0.0,
    "attention_dropout": 0.0,
}


def make_runs(base) -> dict:
    """Two untrained word-level run folders under ``base``: ``rnn`` and ``transformer``."""
    tok = WordTokenizer.train(CORPUS)
    (base / "rnn").mkdir()
    (base / "transformer").mkdir()
    return {
        "rnn": make_run(base / "rnn", tok, data={"max_src_len": 8}),
        "transformer": make_run(base / "transformer", tok, model=TRANSFORMER),
    }


def make_app(folders: dict, limits: Limits | None = None):
    """The explorer app over the run folders (the first is the default), and its runs."""
    runs = [ServedRun(name, load_run(folder)) for name, folder in folders.items()]
    return create_app(runs, limits), runs
