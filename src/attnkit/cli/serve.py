"""CLI command group for :mod:`attnkit.serve`: ``attnkit serve RUN_DIR [RUN_DIR ...]``.

Loads each run once, prints the URL and serves the explorer with uvicorn until
Ctrl-C, which shuts down cleanly with exit status 0 (stopping is how a server
ends); SIGTERM also shuts down cleanly, then ends with the signal's status 143.
Binds 127.0.0.1 unless ``--host`` says otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
from pathlib import Path

from .errors import UsageError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serve``."""
    p = subparsers.add_parser(
        "serve",
        help="explore translations and their attention in the browser",
        description="Serve a local web page (and a JSON API) that translates with the given "
        "runs and shows their attention, plus the worked example of attention.",
        epilog="example: attnkit serve runs/quick runs/transformer --port 8000",
    )
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="trained run folders")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="port (default %(default)s; 0 = any)")
    p.add_argument("--checkpoint", choices=("best", "last"), default="best")
    p.set_defaults(func=_run_serve)


def run_names(folders: list[str]) -> list[str]:
    """One name per run folder: its folder name, numbered when two would be equal."""
    names: list[str] = []
    for folder in folders:
        name = Path(folder).resolve().name or "run"
        base, n = name, 2
        while name in names:
            name, n = f"{base}-{n}", n + 1
        names.append(name)
    return names


def _run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from ..nmt.runs.loaded_run import load_run
    from ..serve import ServedRun, create_app

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be in 0..65535, got {args.port}")
    runs = [
        ServedRun(name, load_run(folder, checkpoint=args.checkpoint))
        for name, folder in zip(run_names(args.runs), args.runs, strict=True)
    ]
    sock = _listen(args.host, args.port)
    port = sock.getsockname()[1]
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"attnkit serve: http://{shown}:{port}/  (Ctrl-C stops)", flush=True)
    config = uvicorn.Config(create_app(runs), log_level="warning")
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises Ctrl-C after shutting down
        uvicorn.Server(config).run(sockets=[sock])
    print("attnkit serve: stopped", file=sys.stderr)
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (bound here, so the URL printed is the real one)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as err:
        raise UsageError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    return sock
