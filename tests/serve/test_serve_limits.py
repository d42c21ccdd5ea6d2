"""The explorer's request limits: a body is counted as it arrives and refused (413) as soon as
it passes the limit, chunked or not; ``attnkit serve`` sets the limits from its options."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request

import pytest

from attnkit.serve import Limits
from serve_helpers import ServerProcess, make_app, make_runs

CHUNK = 64 * 1024
HUGE = 50 * 1024 * 1024  # 50 MB of JSON: {"text": "aaaa..."}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    return make_app(make_runs(tmp_path_factory.mktemp("runs")))[0]


def post_in_chunks(app, *, declared: bool, total: int = HUGE, headers=()):
    """POST /translate with a ``total``-byte JSON body handed over in 64 KiB chunks.

    Returns (status, answer, bytes pulled from ``receive`` when the answer started, bytes
    pulled in all: the refused rest is read and dropped after the answer).
    """
    body_head = b'{"text": "'
    pulled = 0
    chunks = (total - len(body_head) - 2) // CHUNK

    async def receive():
        nonlocal pulled
        sent = pulled // CHUNK
        if sent == 0 and pulled == 0:
            piece, more = body_head, True
        elif sent < chunks:
            piece, more = b"a" * CHUNK, True
        else:
            piece, more = b'"}', False
        pulled += len(piece)
        return {"type": "http.request", "body": piece, "more_body": more}

    headers = [(b"content-type", b"application/json"), (b"host", b"test"), *headers]
    headers.append(
        (b"content-length", str(total).encode()) if declared else (b"transfer-encoding", b"chunked")
    )
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/translate", "raw_path": b"/translate", "root_path": "",
        "query_string": b"", "headers": headers, "client": ("127.0.0.1", 1), "server": ("test", 80),
    }  # fmt: skip
    sent: list[dict] = []
    answered = None

    async def send(message):
        nonlocal answered
        answered = pulled if answered is None else answered
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body), answered, pulled


@pytest.mark.parametrize("declared", [False, True], ids=["chunked", "content-length"])
def test_a_huge_body_is_refused_before_more_than_the_limit_is_read(app, declared):
    status, answer, answered, pulled = post_in_chunks(app, declared=declared)
    limit = Limits().max_body_bytes
    assert status == 413 and f"request body over {limit} bytes" in answer["error"]
    assert answered <= limit + CHUNK
    if declared:
        assert answered == 0  # the header alone says it is too big
    assert pulled > HUGE - CHUNK  # then the rest is dropped, so that the client can read it


def test_a_refused_body_is_dropped_up_to_a_bound(app, monkeypatch):
    monkeypatch.setattr("attnkit.serve.app.DISCARD_BYTES", 10 * CHUNK)
    *_, pulled = post_in_chunks(app, declared=True)
    assert pulled <= 12 * CHUNK  # a body of any size is not read on and on


def test_a_client_waiting_for_100_continue_is_not_waited_for(app):
    expect = [(b"expect", b"100-continue")]  # curl: it sends no body after the 413
    status, _, _, pulled = post_in_chunks(app, declared=True, headers=expect)
    assert status == 413 and pulled == 0


def test_a_chunked_body_under_the_limit_is_read_whole(app):
    status, answer, *_ = post_in_chunks(app, declared=False, total=2 * CHUNK)
    assert status == 413 and "characters; the limit is 2000" in answer["error"]  # read whole


def raw_chunked_post(url: str, size: int) -> tuple[int, int]:
    """POST ``size`` bytes chunked to ``url``/translate over a socket; (status, bytes sent)."""
    host, port = url.split("//")[1].strip("/").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    head = (
        f"POST /translate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    )
    sock.sendall(head.encode())
    sent, chunk = 0, b"a" * CHUNK
    sock.settimeout(0.001)
    answer = b""
    while sent < size and not answer:
        try:
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
            answer = sock.recv(4096)
        except (TimeoutError, BlockingIOError):
            continue
        except (BrokenPipeError, ConnectionResetError):
            break
    sock.settimeout(30)
    answer += b"" if answer else sock.recv(4096)
    sock.close()
    return int(answer.split(b" ")[1]), sent


def test_attnkit_serve_options_set_the_limits(tmp_path):
    folders = make_runs(tmp_path).values()
    options = ["--max-body-bytes", "100000", "--max-chars", "10", "--max-lines", "1"]
    server = ServerProcess(*folders, *options)
    try:
        with urllib.request.urlopen(server.url + "runs", timeout=30) as response:
            limits = json.load(response)["limits"]
        status, sent = raw_chunked_post(server.url, HUGE)
    finally:
        assert server.stop() == 0
    assert (limits["max_body_bytes"], limits["max_chars"], limits["max_lines"]) == (100000, 10, 1)
    assert status == 413 and sent < HUGE // 10  # answered long before the 50 MB were sent


def test_a_client_that_sends_its_whole_body_first_reads_the_413(tmp_path):
    """urllib (as requests) sends the whole body before it reads: the refused body is read
    and dropped, so the client gets the 413's JSON, not a broken pipe or a reset."""
    server = ServerProcess(make_runs(tmp_path)["rnn"], "--max-body-bytes", "1000")
    body = json.dumps({"text": "a " * 2_000_000}).encode()  # 4 MB: far past the socket buffers
    try:
        for _ in range(2):  # and the server keeps answering
            request = urllib.request.Request(
                server.url + "translate", data=body, headers={"Content-Type": "application/json"}
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=30)
            assert refused.value.code == 413
            assert json.load(refused.value) == {
                "error": "request body over 1000 bytes (the server's limit)"
            }
    finally:
        assert server.stop() == 0
