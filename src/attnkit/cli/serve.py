"""CLI command group for :mod:`attnkit.serve`: ``attnkit serve RUN_DIR [RUN_DIR ...]``.

Loads each run once, prints the URL and serves the explorer with uvicorn until
Ctrl-C, which shuts down cleanly with exit status 0 (stopping is how a server
ends) once the requests that have arrived are answered (a client still sending its
body is dropped; a second Ctrl-C stops it at once); SIGTERM also shuts down
cleanly, then ends with the signal's status 143.
Binds 127.0.0.1 unless ``--host`` says otherwise; on a loopback address it answers only
requests whose ``Host`` names it (localhost, 127.0.0.1, ::1, ``--allow-host NAME``), so a
page of another site cannot reach it by DNS rebinding. A run folder that cannot be
loaded is named on stderr (and in ``GET /runs`` and on the page) and the others
are served; only when none loads is it an error (status 2). ``--max-body-bytes``,
``--max-chars`` and ``--max-lines`` set :class:`attnkit.serve.Limits`; ``--device`` and
``--threads`` are translate's.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import sys
from pathlib import Path

from .decoding import precision_option
from .errors import UsageError
from .run_dir import (
    apply_threads,
    check_run_folder,
    checkpoint_option,
    device_option,
    threads_option,
)

# option -> (Limits field, help); the defaults are Limits' own
_LIMITS = {
    "--max-body-bytes": ("max_body_bytes", "bytes of a request body, however it is sent"),
    "--max-chars": ("max_chars", "characters of text per translation request"),
    "--max-lines": ("max_lines", "non-blank lines per translation request"),
}


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
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name requests may give besides localhost, 127.0.0.1 and ::1 when the "
        "server binds one of those (e.g. a reverse proxy's name; repeatable); other names "
        "are refused, as a page of another site renamed to this address (DNS rebinding) is",
    )
    checkpoint_option(p)
    device_option(p)
    threads_option(p, "the translations")
    precision_option(p)
    _limit_options(p)
    p.set_defaults(func=_run_serve)


def _limit_options(p: argparse.ArgumentParser) -> None:
    from ..serve.limits import Limits

    group = p.add_argument_group("limits", "larger requests are refused with status 413")
    for option, (field, text) in _LIMITS.items():
        default = getattr(Limits(), field)
        group.add_argument(
            option, type=int, default=default, metavar="N", help=f"{text} (default %(default)s)"
        )


def _limits(args: argparse.Namespace):
    """The :class:`~attnkit.serve.Limits` the options give.

    Raises:
        UsageError: a limit below 1.
    """
    from ..serve.limits import Limits

    values = {}
    for option, (field, _) in _LIMITS.items():
        value = getattr(args, field)
        if value < 1:
            raise UsageError(f"{option} must be >= 1, got {value}")
        values[field] = value
    return Limits(**values)


def run_names(folders: list[str]) -> list[str]:
    """One name per run folder: its folder name, numbered when two would be equal.

    The name is the folder as given (``.`` and ``..`` worked out), not where a
    symbolic link to it points: ``runs/quick`` linked to ``runs/2026-12-07`` is ``quick``.
    """
    names: list[str] = []
    for folder in folders:
        name = Path(os.path.abspath(folder)).name or "run"
        base, n = name, 2
        while name in names:
            name, n = f"{base}-{n}", n + 1
        names.append(name)
    return names


def _run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from ..serve import create_app

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be in 0..65535, got {args.port}")
    limits = _limits(args)
    hosts = allowed_hosts(args.host, args.allow_host)
    if hosts is None and args.allow_host:
        raise UsageError(
            f"--allow-host names the hosts of a server on a loopback address; --host "
            f"{args.host} answers requests for any name"
        )
    apply_threads(args.threads)
    runs, missing = _load_runs(args.runs, args.checkpoint, args.precision, args.device)
    sock = _listen(args.host, args.port)
    port = sock.getsockname()[1]
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"attnkit serve: http://{shown}:{port}/  (Ctrl-C stops)", flush=True)
    app = create_app(runs, limits, missing, hosts=hosts)
    config = uvicorn.Config(app, log_level="warning")
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises Ctrl-C after shutting down
        _server_class(uvicorn)(config).run(sockets=[sock])
    print("attnkit serve: stopped", file=sys.stderr)
    return 0


def _server_class(uvicorn):
    """uvicorn's server, except that stopping it (Ctrl-C, SIGTERM) first drops the connections
    still sending a request body: uvicorn waits for every request to be answered, and
    one whose body never comes (a client cut off, a stalled upload) kept it waiting for
    ever. Requests that have arrived whole are still answered before it stops, and it
    says so on stderr; a second Ctrl-C stops it at once, without a traceback for each
    request it cuts (a client that stopped reading its answer: ``curl ... | less``)."""

    class Server(uvicorn.Server):
        async def shutdown(self, sockets=None) -> None:
            busy = 0
            # uvicorn's own attributes, read with defaults: another version without them
            # waits as uvicorn does, it does not fail at Ctrl-C
            for connection in list(getattr(self.server_state, "connections", ())):
                cycle = getattr(connection, "cycle", None)
                if cycle is None or getattr(cycle, "response_complete", True):
                    continue
                transport = getattr(connection, "transport", None)
                if getattr(cycle, "more_body", False) and transport is not None:
                    transport.close()  # the application reads a disconnect
                else:
                    busy += 1
            if busy:
                requests = "request" if busy == 1 else "requests"
                print(
                    f"attnkit serve: waiting for {busy} {requests} to be answered "
                    "(Ctrl-C again stops now)",
                    file=sys.stderr,
                    flush=True,
                )
            await super().shutdown(sockets)

        def handle_exit(self, sig, frame) -> None:
            if self.should_exit and sig == signal.SIGINT:  # uvicorn stops now, cutting requests
                logging.getLogger("uvicorn.error").disabled = True  # each would be a traceback
            super().handle_exit(sig, frame)

    return Server


def allowed_hosts(host: str, extra: list[str]) -> list[str] | None:
    """The ``Host`` names a server bound to ``host`` answers: on a loopback address (the
    default), :data:`~attnkit.serve.app.LOOPBACK_NAMES`, ``host`` itself and ``extra``
    (``--allow-host``); None (any name) on another address, which other machines reach
    by names of their own."""
    from ..serve.app import LOOPBACK_NAMES

    try:
        loopback = host.lower().rstrip(".") == "localhost" or (
            ipaddress.ip_address(host.strip("[]")).is_loopback
        )
    except ValueError:  # a host name other than localhost
        loopback = False
    return [*LOOPBACK_NAMES, host, *extra] if loopback else None


def _load_runs(folders: list[str], checkpoint: str, precision: str = "auto", device: str = "cpu"):
    """The runs that load, on ``device`` (``--device``), and the missing ones (each named on
    stderr).

    Raises:
        UsageError: none of the folders loads (the message names each and why).
        ValueError: a bad ``--device``.
    """
    from ..nmt.device import resolve_device
    from ..nmt.runs.loaded_run import load_run
    from ..serve import MissingRun, ServedRun

    place = str(resolve_device(device, "--device"))
    runs, missing = [], []
    for name, folder in zip(run_names(folders), folders, strict=True):
        try:
            check_run_folder(folder)  # a missing run: named with the command that makes it
            run = load_run(
                folder,
                checkpoint=checkpoint,
                device=place,
                precision=precision,
                option="--precision",
            )
            runs.append(ServedRun(name, run))
        except (UsageError, ValueError, FileNotFoundError, OSError) as err:
            missing.append(MissingRun(name, folder, str(err)))
    if not runs:
        raise UsageError("; ".join(m.error for m in missing))
    for m in missing:
        print(f"attnkit serve: warning: not serving {m.folder}: {m.error}", file=sys.stderr)
    if runs[0].run.precision.name == "bf16":  # one setting, one device for every run
        print(f"attnkit: precision {runs[0].run.precision.reason}", file=sys.stderr)
    return runs, missing


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
