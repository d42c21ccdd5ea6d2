"""Shared helpers for the explorer's tests: tiny run folders and a served app.

Imported explicitly (``from serve_helpers import ...``), not a pytest conftest.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from attnkit.nmt.data.tokenizer import WordTokenizer
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.serve import Limits, ServedRun, create_app
from conftest_nmt import make_run

SRC = Path(__file__).resolve().parents[1] / "src"
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


class ServerProcess:
    """``attnkit serve FOLDER...`` in a child process on a free port of 127.0.0.1.

    ``url`` is what the command printed; :meth:`stop` sends Ctrl-C (SIGINT) and
    returns the exit status. ``args`` are run folders and options.
    """

    def __init__(self, *args) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
        argv = [sys.executable, "-m", "attnkit", "serve", *map(str, args), "--port", "0"]
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        line = self.process.stdout.readline()  # blocks until the command prints its URL
        match = re.search(r"http://127\.0\.0\.1:\d+/", line)
        if match is None:
            self.process.kill()
            raise RuntimeError(
                f"attnkit serve did not start: {line!r} {self.process.stderr.read()}"
            )
        self.url = match.group(0)

    def stop(self) -> int:
        """Ctrl-C, then the exit status; what the command wrote on stderr is in ``stderr``."""
        self.process.send_signal(signal.SIGINT)
        try:
            _, self.stderr = self.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            raise
        return self.process.returncode
