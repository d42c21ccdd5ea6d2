"""The explorer's web application: the page and the JSON API (FastAPI).

Routes (docs/serve.md):

- ``GET /``, ``GET /static/app.js``, ``GET /static/app.css``: the page, read
  once from the package (no path from a request is ever opened). Every ``GET``
  route answers ``HEAD`` too.
- ``GET /runs``: the runs being served, the limits, and the runs that could not
  be loaded (``missing``).
- ``POST /translate`` ``{"text", "run"?, "beam"?, "n_best"?}``: one result per
  line (:mod:`attnkit.serve.payload`).
- ``POST /explain`` ``{"query", "keys", "values"?, "scaled"?, "mask"?, "causal"?}``:
  :func:`attnkit.lessons.explain`'s trace as JSON, plus its text.

With ``hosts`` (what ``attnkit serve`` passes when it binds a loopback address), a
request whose ``Host`` header names another server is refused (403): a page of
another site that points its own name at 127.0.0.1 (DNS rebinding) cannot use
or read the API, as Jupyter's check of local host names refuses it.

Every error is JSON ``{"error": "..."}`` with a 4xx status: a malformed body
or a value out of range (422), text too long, too many lines or a body over
``Limits.max_body_bytes`` (413; the body is counted as it arrives, whatever
its transfer encoding, and refused as soon as it passes the limit), an
unknown run (404), a full queue (503). Translation runs in a worker thread,
one request at a time per run (each model is loaded once and shared
read-only), so the event loop keeps answering while a model works.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..lessons import explain
from ..nmt.data.text import is_blank
from ..nmt.decoding.settings import SearchSettings
from ..nmt.decoding.translate import translate_lines
from ..nmt.runs.loaded_run import LoadedRun
from .export import text_languages
from .limits import Limits
from .payload import run_info, sentence_payload

__all__ = [
    "LOOPBACK_NAMES",
    "ApiError",
    "BodyLimit",
    "Limits",
    "MissingRun",
    "ServedRun",
    "create_app",
]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")  # what a browser on this machine calls it
_READ = ["GET", "HEAD"]  # HEAD: the same headers as GET, no body (uvicorn drops it)
_STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}


@dataclass
class ServedRun:
    """A loaded run and the lock that lets one request at a time use its model."""

    name: str
    run: LoadedRun
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class MissingRun:
    """A run folder that was asked for but could not be loaded, and why."""

    name: str
    folder: str
    error: str


class ApiError(Exception):
    """A bad request, answered as ``{"error": message}`` with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Strict(BaseModel):
    """A request body: unknown fields and wrong JSON types are errors (``"no"`` is no
    boolean, ``"1"`` or ``true`` no number); an integer is a valid float."""

    model_config = ConfigDict(extra="forbid", strict=True)


N_BEST = 5  # hypotheses listed per sentence when the request names none


class TranslateRequest(_Strict):
    """``POST /translate``: lines of ``text`` with ``run`` (default the first), beam size
    ``beam`` (default the run's) and the ``n_best`` hypotheses to list."""

    text: str
    run: str | None = None
    beam: int | None = Field(default=None, ge=1, le=16)
    n_best: int | None = Field(default=N_BEST, ge=1, le=16)  # null: the default, as for beam


class ExplainRequest(_Strict):
    """``POST /explain``: the arguments of :func:`attnkit.lessons.explain` as JSON;
    ``scaled`` picks ``scaled_dot`` (else ``dot``), ``precision`` the decimals of the text."""

    query: list[float] | list[list[float]]
    keys: list[list[float]]
    values: list[list[float]] | None = None
    scaled: bool = True
    mask: list[bool] | list[list[bool]] | None = None
    causal: bool = False
    precision: int = Field(default=3, ge=0, le=10)


def create_app(
    runs: list[ServedRun],
    limits: Limits | None = None,
    missing: list[MissingRun] | None = None,
    *,
    hosts: Collection[str] | None = None,
) -> FastAPI:
    """The application serving ``runs`` (the first is the default of ``/translate``);
    ``missing`` lists the runs that could not be loaded (``GET /runs`` and the page say so);
    ``hosts``: the names a request's ``Host`` header may give (its port aside, any case;
    e.g. :data:`LOOPBACK_NAMES`), others answered 403; None: any name.

    Raises:
        ValueError: two runs share a name, or there is no run to serve.
    """
    if not runs:
        raise ValueError("no run to serve")
    limits = limits or Limits()
    by_name = {served.name: served for served in runs}
    if len(by_name) != len(runs):
        raise ValueError(f"run names must be unique, got {[s.name for s in runs]}")
    pages = {name: _read_static(name) for name in _STATIC}
    pending = _Counter(limits.max_pending)
    app = FastAPI(title="attnkit explorer", docs_url=None, redoc_url=None)
    if hosts is not None:
        _check_hosts(app, hosts)
    _add_error_handlers(app, limits)  # its body limit the outermost middleware

    @app.api_route("/", methods=_READ)
    def index() -> Response:
        return Response(pages["index.html"], media_type=_STATIC["index.html"])

    @app.api_route("/static/{name}", methods=_READ)
    def static(name: str) -> Response:
        if name not in pages or name == "index.html":
            raise ApiError(404, f"no such file: {name!r}")
        return Response(pages[name], media_type=_STATIC[name])

    @app.api_route("/runs", methods=_READ)
    def list_runs() -> dict[str, Any]:
        return {
            "runs": [run_info(s.name, s.run) for s in runs],
            "limits": asdict(limits),
            "missing": [asdict(m) for m in missing or ()],
        }

    @app.post("/translate")
    async def translate(request: TranslateRequest) -> dict[str, Any]:
        served = _choose_run(by_name, runs, request.run)
        lines = _check_text(request.text, limits)
        with pending.slot():
            return await run_in_threadpool(_translate, served, lines, request)

    @app.post("/explain")
    def explain_route(request: ExplainRequest) -> dict[str, Any]:
        return _explain(request, limits)

    return app


def _read_static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def _choose_run(by_name: dict[str, ServedRun], runs: list[ServedRun], name: str | None):
    if name is None:
        return runs[0]
    if name not in by_name:
        raise ApiError(404, f"no run named {name!r}; serving {sorted(by_name)}")
    return by_name[name]


def _check_text(text: str, limits: Limits) -> list[str]:
    """The request's lines (split at ``\\n``, a ``\\r`` before it dropped, a final newline
    ending the last line, a leading byte order mark dropped), or an error for empty, too
    long or too many."""
    text = text.removeprefix("\ufeff")  # as attnkit translate drops it from its input
    if is_blank(text):
        raise ApiError(422, "text is empty: type a sentence to translate")
    if len(text) > limits.max_chars:
        raise ApiError(
            413, f"text has {len(text)} characters; the limit is {limits.max_chars} per request"
        )
    # as attnkit translate reads a file: CRLF or LF, and a final newline ends the last line
    lines = [line.removesuffix("\r") for line in text.removesuffix("\n").split("\n")]
    filled = sum(not is_blank(line) for line in lines)
    if filled > limits.max_lines:
        raise ApiError(413, f"text has {filled} lines; the limit is {limits.max_lines} per request")
    return lines


def _translate(served: ServedRun, lines: list[str], request: TranslateRequest) -> dict[str, Any]:
    """Runs in a worker thread; the run's lock keeps its model to one request at a time.
    The run's precision (``attnkit serve --precision``) is entered here, in that thread."""
    run, n_best = served.run, request.n_best or N_BEST
    settings = SearchSettings.from_config(run.config.decode, beam_size=request.beam)
    warnings: list[str] = []
    with served.lock, run.precision.autocast():
        translations = translate_lines(run, lines, settings, n_best=n_best, warn=warnings.append)
        sentences = [
            sentence_payload(run, t, line, n_best=n_best)
            for line, t in enumerate(translations, start=1)
        ]
    return {
        "run": served.name,
        "beam": settings.beam_size,
        "sentences": sentences,
        "warnings": warnings,
        "languages": text_languages(run.config.data),
    }


def _explain(request: ExplainRequest, limits: Limits) -> dict[str, Any]:
    matrices = {"query": request.query, "keys": request.keys, "values": request.values}
    for name, rows in matrices.items():
        if rows is None:
            continue
        width = max((len(r) for r in rows if isinstance(r, list)), default=0)
        if len(rows) > limits.max_explain or width > limits.max_explain:
            raise ApiError(413, f"{name} is limited to {limits.max_explain} rows and columns")
    _check_mask_shape(request)
    try:
        trace = explain(
            request.query,
            request.keys,
            request.values,
            score="scaled_dot" if request.scaled else "dot",
            mask=request.mask,
            causal=request.causal,
        )
    except ValueError as err:
        raise ApiError(422, str(err)) from None
    return {"trace": trace.to_dict(), "text": trace.to_text(request.precision)}


def _check_mask_shape(request: ExplainRequest) -> None:
    """A mask of one boolean per key, or one such row per query: the API's shapes, none
    stretched (:func:`~attnkit.lessons.explain` would broadcast ``[true]`` to every key)."""
    mask, keys = request.mask, len(request.keys)
    if mask is None:
        return
    vector = not mask or not isinstance(mask[0], list)
    queries = 1 if not isinstance(request.query[0], list) else len(request.query)
    rows = [mask] if vector else mask
    if (not vector and len(rows) != queries) or any(len(row) != keys for row in rows):
        shape = f"{len(mask)}" if vector else f"{len(mask)} rows of {[len(r) for r in mask]}"
        raise ApiError(
            422,
            f"mask must hold one boolean per key ({keys}) or one such row per query "
            f"({queries}), got {shape}",
        )


class _Counter:
    """Counts requests waiting for or using a model; refuses more than ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit, self.count, self.lock = limit, 0, threading.Lock()

    def slot(self) -> _Counter:
        with self.lock:
            if self.count >= self.limit:
                busy = f"busy: {self.limit} translations are running or waiting; try again"
                raise ApiError(503, busy)
            self.count += 1
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.count -= 1


DISCARD_BYTES = 64 << 20  # of a refused body, read and dropped so that its client reads the 413


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes is answered 413 as soon as it is
    known, before the application reads the rest.

    A ``Content-Length`` over the limit (or not a number) is refused before any
    byte of the body is read. Otherwise the body is counted as the application
    pulls it from ``receive`` (chunked or not); the chunk that passes the limit
    is never handed on, and whatever the application would have answered is
    replaced by the 413. Once the 413 is sent, the rest of the body (up to
    :data:`DISCARD_BYTES`) is read and dropped, unkept: a client that sends its
    whole body before it reads the answer (urllib, requests) reads the 413
    instead of a broken pipe, and the connection stays open for its next request.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        size = headers.get(b"content-length")
        if size is not None and (not size.isdigit() or int(size) > self.limit):
            # a client that waits for "100 Continue" sends no body after the 413
            waits = headers.get(b"expect", b"").lower() == b"100-continue"
            await self._refuse(send, None if waits else receive)
            return
        over, received, more = False, 0, True

        async def counted() -> Message:
            nonlocal over, received, more
            message = await receive()
            more = message["type"] == "http.request" and message.get("more_body", False)
            received += len(message.get("body", b""))
            if received > self.limit:
                over = True
                raise HTTPException(413, self.message)
            return message

        async def guarded(message: Message) -> None:
            if not over:
                await send(message)
            elif message["type"] == "http.response.start":
                await self._refuse(send, receive if more else None)

        await self.app(scope, counted, guarded)

    @property
    def message(self) -> str:
        return f"request body over {self.limit} bytes (the server's limit)"

    async def _refuse(self, send: Send, rest: Receive | None) -> None:
        """The 413, then the rest of the body from ``rest`` dropped (None: no more to come)."""
        response = _error(413, self.message)
        start = {"type": "http.response.start", "status": 413, "headers": response.raw_headers}
        await send(start)
        await send({"type": "http.response.body", "body": response.body, "more_body": True})
        if rest is not None:
            await _discard(rest, DISCARD_BYTES)
        await send({"type": "http.response.body", "body": b""})


async def _discard(receive: Receive, most: int) -> None:
    """Read and drop a request body until it ends or ``most`` bytes have gone."""
    dropped = 0
    while dropped <= most:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
        dropped += len(message.get("body", b""))


def _add_error_handlers(app: FastAPI, limits: Limits) -> None:
    """Every error as ``{"error": ...}`` JSON; bodies over the limit refused as they arrive."""

    @app.middleware("http")
    async def internal_error(request: Request, call_next):
        try:
            return await call_next(request)
        except Exception:  # an unexpected failure: say so, never a traceback page
            return _error(500, "internal error while handling the request")

    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)  # the outermost: added last

    @app.exception_handler(ApiError)
    async def api_error(_: Request, err: ApiError) -> JSONResponse:
        return _error(err.status, err.message)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, err: HTTPException) -> JSONResponse:
        detail = str(err.detail)
        if err.status_code == 400:  # FastAPI could not read the body (e.g. invalid UTF-8)
            detail += ": send a JSON object encoded in UTF-8"
        return _error(err.status_code, detail, err.headers)  # e.g. a 405's Allow

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        return _error(422, _not_json(request, err.errors()) or _describe(err.errors()))


def _check_hosts(app: FastAPI, hosts: Collection[str]) -> None:
    """Refuse (403) a request whose ``Host`` header names none of ``hosts``; one without a
    ``Host`` header (HTTP/1.0 from a script, never a browser) is served."""
    allowed = {_allowed_name(name) for name in hosts}

    @app.middleware("http")
    async def known_host(request: Request, call_next):
        header = request.headers.get("host")
        name = _host_name(header) if header is not None else None
        if header is None or name in allowed:
            return await call_next(request)
        return _error(
            403,
            f"Host {header!r} is not a name of this server ({', '.join(sorted(allowed))}): "
            "a page of another site that points its own name at this address (DNS "
            "rebinding) is refused; open the URL attnkit serve printed, or add the name "
            "with attnkit serve --allow-host NAME",
        )


def _allowed_name(name: str) -> str:
    """An allowed name as :func:`_host_name` reads a header: any case, without brackets, a
    final dot or a port (``proxy.example:8443``); a bare IPv6 address (``::1``) as it is."""
    bare_ipv6 = name.count(":") > 1 and not name.startswith("[")
    return name.lower().rstrip(".") if bare_ipv6 else _host_name(name)


def _host_name(header: str) -> str:
    """The name of a ``Host`` header without its port, brackets or final dot, lower case
    (``[::1]:8000`` -> ``::1``); ``""`` for one that is no host name."""
    try:
        name = urlsplit(f"//{header}").hostname
    except ValueError:  # an unclosed "[" and the like
        return ""
    return (name or "").rstrip(".")


_SAY_JSON = "send JSON with the header Content-Type: application/json"


def _not_json(request: Request, errors: Any) -> str | None:
    """Why a body was not read as JSON, when its ``Content-Type`` says another format
    (``curl -d`` sends ``application/x-www-form-urlencoded``), or is missing and the body
    was not read as an object (``requests.post(url, data=text)`` sends none); else None."""
    kind = request.headers.get("content-type")
    if kind is None:
        unread = any(tuple(e.get("loc", ())) == ("body",) for e in errors)
        return f"body: sent without a Content-Type header; {_SAY_JSON}" if unread else None
    if "json" in kind.partition(";")[0].lower():
        return None
    return f"body: sent as {kind}; {_SAY_JSON}"


def _describe(errors: Any) -> str:
    """pydantic's errors as one line: ``body.text: Field required; ...`` (first three);
    a body that is no JSON as ``body is not valid JSON: Expecting value at character 8``
    (FastAPI puts the character in ``loc``, as if it were a field)."""
    parts = []
    for item in list(errors)[:3]:
        if item.get("type") == "json_invalid":
            why, where = item.get("ctx", {}).get("error", "invalid"), item["loc"][-1]
            return f"body is not valid JSON: {why} at character {where}"
        loc = ".".join(str(x) for x in item.get("loc", ()))
        parts.append(f"{loc}: {item.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)
