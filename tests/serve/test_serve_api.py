"""The explorer's JSON API through FastAPI's test client: shapes, numbers, errors."""

from __future__ import annotations

import http.client
import io
import json
import math
import re
import select
import signal
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from attnkit.lessons import explain
from attnkit.nmt.decoding.translate import translate_lines
from attnkit.serve import Limits
from cli_helpers import assert_one_line_error, run
from serve_helpers import ServerProcess, make_app, make_runs

TEXT = "ein Mann geht\nein Hund rennt durch den Schnee nach Hause"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folders = make_runs(tmp_path_factory.mktemp("runs"))
    app, runs = make_app(folders)
    with TestClient(app) as client:
        yield client, {r.name: r for r in runs}


def post(client, body, path="/translate"):
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_runs_lists_every_run_with_its_architecture(served):
    client, _ = served
    runs = client.get("/runs").json()["runs"]
    assert [(r["name"], r["arch"]) for r in runs] == [
        ("rnn", "rnn"),
        ("transformer", "transformer"),
    ]


def test_runs_answers_the_keys_docs_serve_md_lists(served):
    client, _ = served
    doc = (Path(__file__).resolve().parents[2] / "docs" / "serve.md").read_text(encoding="utf-8")
    listed = re.search(r'`\{"runs": \[\{([^}]*)\}\]', doc).group(1)
    answer = client.get("/runs").json()
    assert [sorted(run) for run in answer["runs"]] == [sorted(re.findall(r'"(\w+)"', listed))] * 2
    assert answer["runs"][0]["direction"] == "toy copy task"  # de → en for Multi30k


@pytest.mark.parametrize("name", ["rnn", "transformer"])
def test_weights_are_translate_lines_weights_and_sum_to_one(served, name):
    client, runs = served
    data = post(client, {"text": TEXT, "run": name})
    expected = translate_lines(runs[name].run, TEXT.split("\n"))
    assert data["run"] == name and len(data["sentences"]) == 2
    for sentence, translation in zip(data["sentences"], expected, strict=True):
        assert sentence["translation"] == translation.text
        assert sentence["weights"] == translation.weights.tolist()  # the same numbers
        assert len(sentence["weights"]) == len(sentence["tgt_tokens"])
        for row in sentence["weights"]:
            assert len(row) == len(sentence["src_tokens"])
        assert sentence["weight_sums"] == pytest.approx([1.0] * len(sentence["weights"]), abs=1e-5)


def test_the_python_client_of_docs_serve_md_runs_against_the_api(served, monkeypatch, capsys):
    client, _ = served
    docs = (Path(__file__).parents[2] / "docs" / "serve.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", docs, re.S) if "urlopen" in b)

    def urlopen(request):  # the docs' request, answered by the app
        headers = dict(request.header_items())
        return io.BytesIO(client.post("/translate", content=request.data, headers=headers).content)

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    exec(block, {})
    sentence = post(client, {"text": "Ein Hund rennt."})["sentences"][0]
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(" <- ")[0] for line in printed] == sentence["tgt_tokens"]
    assert {line.split(" <- ")[1] for line in printed} <= set(sentence["src_tokens"])


def test_crlf_text_gives_the_sources_and_translations_of_lf_text(served):
    client, _ = served
    lf = post(client, {"text": TEXT})["sentences"]
    crlf = post(client, {"text": TEXT.replace("\n", "\r\n")})["sentences"]
    assert [s["source"] for s in crlf] == TEXT.split("\n")
    assert crlf == lf
    ended = post(client, {"text": TEXT + "\n"})["sentences"]  # pasted from a file
    assert ended == lf
    blank = post(client, {"text": TEXT + "\n\n"})["sentences"]
    assert blank[:2] == lf and blank[2]["translation"] == "" and len(blank) == 3


def test_a_byte_order_mark_before_the_text_is_dropped_as_translate_drops_it(served):
    client, _ = served  # a file saved with a BOM, read with open(path, encoding="utf-8")
    lf = post(client, {"text": TEXT})["sentences"]
    marked = post(client, {"text": "\ufeff" + TEXT})["sentences"]
    assert marked[0]["source"] == "ein Mann geht" and marked == lf


def test_a_short_sentence_padded_in_a_batch_puts_no_weight_on_padding(served):
    client, runs = served
    batched = post(client, {"text": TEXT, "run": "rnn"})["sentences"][0]
    alone = post(client, {"text": TEXT.split("\n")[0], "run": "rnn"})["sentences"][0]
    # the short line's rows cover its own S keys only and still sum to 1: padding got 0
    assert len(batched["src_tokens"]) < len(
        post(client, {"text": TEXT})["sentences"][1]["src_tokens"]
    )
    assert torch.allclose(
        torch.tensor(batched["weights"]), torch.tensor(alone["weights"]), atol=1e-6
    )
    assert all(math.isclose(sum(row), 1.0, abs_tol=1e-5) for row in batched["weights"])


def test_transformer_views_cover_every_layer_and_head_and_the_causal_mask(served):
    client, _ = served
    sentence = post(client, {"text": "ein Hund rennt", "run": "transformer"})["sentences"][0]
    views = sentence["views"]
    s, t = len(sentence["src_tokens"]), len(sentence["tgt_tokens"])
    assert _shape(views["cross"]) == (2, 2, t, s)
    assert _shape(views["encoder"]) == (2, 2, s, s)
    assert _shape(views["decoder"]) == (2, 2, t, t)
    assert len(views["decoder_inputs"]) == t and views["decoder_inputs"][0] == "<s>"
    for layer in views["decoder"]:
        for head in layer:
            for i, row in enumerate(head):
                assert all(w == 0.0 for w in row[i + 1 :])  # the future is masked
                assert sum(row) == pytest.approx(1.0, abs=1e-5)


def test_rnn_views_have_one_layer_one_head_and_no_self_attention(served):
    client, _ = served
    sentence = post(client, {"text": "ein Hund", "run": "rnn"})["sentences"][0]
    assert _shape(sentence["views"]["cross"])[:2] == (1, 1)
    assert sentence["views"]["encoder"] is None and sentence["views"]["decoder"] is None


def test_beam_hypotheses_come_best_first_and_start_with_the_translation(served):
    client, _ = served
    data = post(client, {"text": "ein Mann geht", "beam": 3, "n_best": 3})
    sentence = data["sentences"][0]
    scores = [h["score"] for h in sentence["hypotheses"]]
    assert data["beam"] == 3 and 1 <= len(scores) <= 3 and scores == sorted(scores, reverse=True)
    assert sentence["hypotheses"][0]["translation"] == sentence["translation"]


def test_null_options_take_their_defaults(served):
    # n_best: null was a 422 while beam: null and run: null meant the default
    client, _ = served
    given = post(client, {"text": "ein Mann geht", "beam": 8, "n_best": None, "run": None})
    default = post(client, {"text": "ein Mann geht", "beam": 8})
    assert given == default and len(default["sentences"][0]["hypotheses"]) == 5


def test_blank_lines_stay_aligned_as_empty_translations(served):
    client, _ = served
    sentences = post(client, {"text": "ein Mann\n\n\u200b\nein Hund"})["sentences"]
    assert [s["weights"] is None for s in sentences] == [False, True, True, False]
    assert sentences[1]["translation"] == "" and sentences[1]["views"] is None


def test_an_over_long_line_is_truncated_with_a_warning(served):
    client, _ = served
    data = post(client, {"text": "ein Mann " * 20, "run": "rnn"})
    assert data["sentences"][0]["truncated_from"] == 40
    assert "truncated" in data["warnings"][0]


def test_explain_returns_the_lessons_trace(served):
    client, _ = served
    body = {"query": [2, 0, 1], "keys": [[1, 0, 0], [0, 1, 0], [0, 0, 1]], "causal": False}
    data = post(client, body, "/explain")
    assert data["trace"] == explain([2, 0, 1], body["keys"]).to_dict()
    assert sum(data["trace"]["weights"][0]) == pytest.approx(1.0)
    assert "weights" in data["text"]


def test_explain_masks_and_causal_and_unscaled(served):
    client, _ = served
    keys = [[1, 0], [0, 1], [1, 1]]
    body = {"query": [[1, 0], [0, 1]], "keys": keys, "scaled": False, "mask": [True, False, True]}
    trace = post(client, body, "/explain")["trace"]
    assert trace["scale"] == 1.0 and trace["weights"][0][1] == 0.0
    rows = {"query": [[1, 0], [0, 1]], "keys": keys, "mask": [[True, True, False], [False] * 3]}
    per_query = post(client, rows, "/explain")["trace"]["weights"]
    assert per_query[0][2] == 0.0 and per_query[1] == [0.0, 0.0, 0.0]  # a fully masked row: 0
    causal = post(client, {"query": [[1, 0], [0, 1]], "keys": keys, "causal": True}, "/explain")
    assert causal["trace"]["weights"][0][2] == 0.0  # bottom-right aligned: q1 sees k1, k2


def test_the_page_and_its_files_ship_in_the_package_without_network(served):
    client, _ = served
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    for name in ("app.js", "app.css"):
        body = client.get(f"/static/{name}").text
        assert "http://" not in body and "https://" not in body
    assert "innerHTML" not in client.get("/static/app.js").text
    assert '<script src="static/app.js"' in page.text and "https://" not in page.text


def test_the_page_works_under_a_proxys_sub_path(tmp_path):
    """A reverse proxy serving the explorer at /attnkit/: the page's files and requests
    are relative to it (absolute ones went to the proxy's root)."""
    from urllib.parse import urljoin

    from starlette.applications import Starlette
    from starlette.routing import Mount

    app, _ = make_app(make_runs(tmp_path))
    with TestClient(Starlette(routes=[Mount("/attnkit", app=app)])) as client:
        page = client.get("/attnkit/").text
        for ref in re.findall(r'(?:src|href)="(?!data:)([^"]+)"', page):
            assert client.get(urljoin("/attnkit/", ref)).status_code == 200, ref
        script = client.get("/attnkit/static/app.js").text
        paths = re.findall(r'(?:askServer|postJSON)\("([^"]+)"', script)
        assert sorted(paths) == ["explain", "runs", "translate"]
        assert client.get(urljoin("/attnkit/", "runs")).json()["runs"]


@pytest.mark.parametrize("path", ["/", "/static/app.js", "/static/app.css", "/runs"])
def test_head_answers_as_get_does(served, path):
    client, _ = served
    got, head = client.get(path), client.head(path)
    assert head.status_code == 200, head.text
    assert head.headers["content-type"] == got.headers["content-type"]
    assert head.headers["content-length"] == got.headers["content-length"]


BAD_BODIES = [
    (b"", 422),
    (b"{", 422),
    (b"[]", 422),
    (b"null", 422),
    (b'{"text": 5}', 422),
    (b'{"text": ""}', 422),
    (b'{"text": "  \\n \\u200b "}', 422),
    (b'{"text": "ein", "beam": 0}', 422),
    (b'{"text": "ein", "beam": 1000}', 422),
    (b'{"text": "ein", "n_best": -1}', 422),
    (b'{"text": "ein", "beam": true}', 422),
    (b'{"text": "ein", "beam": "4"}', 422),
    (b'{"text": "ein", "n_best": 2.5}', 422),
    (b'{"text": "ein", "unknown": 1}', 422),
    (b'{"text": "ein", "run": "nope"}', 404),
    (b'{"text": "ein", "run": "../../etc/passwd"}', 404),
    (b'{"text": "\xff\xfe bad utf-8"}', 400),
    (b'{"text": "' + b"a" * 3000 + b'"}', 413),
    (b'{"text": "' + b"ein\\n" * 40 + b'"}', 413),
    (b"x" * 300_000, 413),
]


@pytest.mark.parametrize(("body", "status"), BAD_BODIES, ids=range(len(BAD_BODIES)))
def test_bad_translate_bodies_get_a_json_4xx_and_the_server_keeps_serving(served, body, status):
    client, _ = served
    response = client.post("/translate", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]
    assert client.post("/translate", json={"text": "ein Mann"}).status_code == 200


def test_a_json_body_sent_as_a_form_is_told_to_say_json(served):
    client, _ = served
    form = {"content-type": "application/x-www-form-urlencoded"}  # what curl -d sends
    response = client.post("/translate", content=json.dumps({"text": "ein Hund"}), headers=form)
    assert response.status_code == 422
    assert response.json() == {
        "error": "body: sent as application/x-www-form-urlencoded; send JSON with the header "
        "Content-Type: application/json"
    }
    # no Content-Type at all, as requests.post(url, data=json.dumps(...)) sends it
    bare = client.post("/translate", content=json.dumps({"text": "ein Hund"}))
    assert bare.status_code == 422
    assert bare.json() == {
        "error": "body: sent without a Content-Type header; send JSON with the header "
        "Content-Type: application/json"
    }
    headers = {"content-type": "application/json; charset=utf-8"}
    response = client.post("/translate", content=json.dumps({"text": 5}), headers=headers)
    assert response.json() == {"error": "body.text: Input should be a valid string"}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b'{"text": "ein",}', "Expecting property name enclosed in double quotes at character 15"),
        (b'{"text": "ein"', "Expecting ',' delimiter at character 14"),
        (b"   ", "Expecting value at character 3"),
    ],
)
def test_a_body_that_is_not_json_is_told_why_and_where(served, body, error):
    client, _ = served  # was "body.15: JSON decode error", as if 15 were a field
    response = client.post("/translate", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert response.json() == {"error": f"body is not valid JSON: {error}"}


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [("GET", "/translate", "POST"), ("PUT", "/explain", "POST"), ("POST", "/runs", "GET")],
)
def test_a_wrong_method_is_a_json_405_that_names_the_allowed_ones(served, method, path, allowed):
    client, _ = served
    response = client.request(method, path, json={"text": "ein"})
    assert response.status_code == 405 and response.json()["error"]
    assert allowed in response.headers.get("allow", "").split(", ")


BAD_EXPLAIN = [
    {"keys": [[1, 0]]},
    {"query": [1, 0], "keys": []},
    {"query": [1, 0], "keys": [[1, 0, 0]]},
    {"query": [1, 0], "keys": [[1, 0], [1]]},
    {"query": [1, 0], "keys": [[1, 0]], "values": [[1], [2]]},
    {"query": [1, 0], "keys": [[1, 0]], "mask": [True, False, True]},
    {"query": ["a", 0], "keys": [[1, 0]]},
    b'{"query": [1e400, 0], "keys": [[1, 0]]}',
    b'{"query": [NaN, 0], "keys": [[1, 0]]}',
    {"query": [1e308, 0], "keys": [[1e308, 0]]},  # finite input, an overflowing score
    {"query": [1] * 100, "keys": [[1] * 100]},
    # wrong JSON types are errors, not coerced: "no" is no false, "1" and true no numbers
    {"query": [1, 0], "keys": [[1, 0]], "scaled": "no"},
    {"query": [1, 0], "keys": [[1, 0]], "causal": 1},
    {"query": ["1", "0"], "keys": [[1, 0]]},
    {"query": [True, False], "keys": [[1, 0]]},
    {"query": [1, 0], "keys": [[1, 0], [0, 1]], "mask": ["yes", "no"]},
    {"query": [1, 0], "keys": [[1, 0], [0, 1]], "mask": [1, 0]},
    {"query": [1, 0], "keys": [[1, 0]], "precision": "3"},
    # a mask is one boolean per key, or one row per query: never stretched to fit
    {"query": [1, 0], "keys": [[1, 0], [0, 1]], "mask": [True]},
    {"query": [[1, 0], [0, 1]], "keys": [[1, 0], [0, 1]], "mask": [[True, False]]},
    {"query": [1, 0], "keys": [[1, 0], [0, 1]], "mask": [[True], [False]]},
    {"query": [1, 0], "keys": [[1, 0], [0, 1]], "mask": []},
]


@pytest.mark.parametrize("body", BAD_EXPLAIN, ids=range(len(BAD_EXPLAIN)))
def test_bad_explain_bodies_get_a_json_4xx(served, body):
    client, _ = served
    if isinstance(body, bytes):
        response = client.post(
            "/explain", content=body, headers={"content-type": "application/json"}
        )
    else:
        response = client.post("/explain", json=body)
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["error"]


def test_a_full_queue_answers_503_and_a_waiting_request_still_succeeds(tmp_path):
    app, runs = make_app(make_runs(tmp_path), Limits(max_pending=1))
    results = {}
    with TestClient(app) as client:
        runs[0].lock.acquire()  # the model is busy
        waiting = threading.Thread(
            target=lambda: results.update(first=client.post("/translate", json={"text": "ein"}))
        )
        waiting.start()
        time.sleep(0.5)
        second = client.post("/translate", json={"text": "ein Mann"})
        runs[0].lock.release()
        waiting.join(timeout=30)
    assert second.status_code == 503 and "busy" in second.json()["error"]
    assert results["first"].status_code == 200


def test_concurrent_requests_all_get_the_same_answer(served):
    client, _ = served
    answers = []
    threads = [
        threading.Thread(target=lambda: answers.append(post(client, {"text": "ein Hund rennt"})))
        for _ in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(answers) == 6 and all(a == answers[0] for a in answers)


def _shape(nested) -> tuple[int, ...]:
    shape = []
    while isinstance(nested, list):
        shape.append(len(nested))
        nested = nested[0]
    return tuple(shape)


def test_attnkit_serve_prints_its_url_serves_and_stops_cleanly(tmp_path):
    server = ServerProcess(*make_runs(tmp_path).values())
    try:
        with urllib.request.urlopen(server.url + "runs", timeout=30) as response:
            names = [r["name"] for r in json.load(response)["runs"]]
    finally:
        status = server.stop()
    assert server.url.startswith("http://127.0.0.1:") and names == ["rnn", "transformer"]
    assert status == 0


def test_ctrl_c_stops_attnkit_serve_while_a_client_is_still_sending_its_body(tmp_path):
    server = ServerProcess(make_runs(tmp_path)["rnn"])
    host, port = server.url.split("//")[1].strip("/").split(":")
    body = json.dumps({"text": "ein Mann geht"}).encode()
    head = f"POST /translate HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=30) as stalled:
        stalled.sendall(head.encode() + body[:5])  # and the rest never comes
        with urllib.request.urlopen(server.url + "runs", timeout=30) as response:
            assert response.status == 200  # the request has reached the server
        assert server.stop() == 0  # stop() waits 20 s, then kills and fails: it waited on
    assert "Traceback" not in server.stderr and "stopped" in server.stderr


def next_stderr_line(server: ServerProcess, start: str) -> str:
    """The next line the server writes on stderr that begins with ``start`` ("" if none comes
    within a minute: a hang guard)."""
    while select.select([server.process.stderr], [], [], 60)[0]:
        line = server.process.stderr.readline()
        if not line or line.startswith(start):
            return line
    return ""


def test_ctrl_c_says_what_it_waits_for_and_a_second_one_stops_quietly(tmp_path):
    """A client that stops reading its answer (curl ... | less) keeps a request open."""
    big = ["--max-chars", "100000", "--max-lines", "1000"]
    server = ServerProcess(make_runs(tmp_path)["transformer"], *big)
    host, port = server.url.split("//")[1].strip("/").split(":")
    body = json.dumps({"text": "ein Hund rennt durch den Schnee\n" * 300}).encode()
    head = (
        f"POST /translate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    try:
        with socket.socket() as stalled:
            stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stalled.settimeout(120)
            stalled.connect((host, int(port)))
            stalled.sendall(head.encode() + body)
            assert stalled.recv(15) == b"HTTP/1.1 200 OK"  # megabytes follow, unread
            server.process.send_signal(signal.SIGINT)
            said = next_stderr_line(server, "attnkit serve: waiting")
    finally:
        status = server.stop()  # the second Ctrl-C
    assert said == "attnkit serve: waiting for 1 request to be answered (Ctrl-C again stops now)\n"
    assert status == 0
    assert "Traceback" not in server.stderr and server.stderr.endswith("attnkit serve: stopped\n")


def test_attnkit_serve_without_a_run_folder_is_a_one_line_error(tmp_path, capsys):
    # named as translate names it, with the command that makes it (was "config.yaml not
    # found; is ... a training run folder?")
    missing = tmp_path / "missing"
    status, _, err = run(capsys, "serve", str(missing))
    assert status == 2
    assert_one_line_error(
        err, "serve", f"run folder {missing} not found; 'attnkit train CONFIG.yaml --out {missing}'"
    )


def test_attnkit_serve_serves_the_runs_it_can_load_and_lists_the_missing(tmp_path):
    folders = make_runs(tmp_path)
    gone = tmp_path / "gone"
    server = ServerProcess(folders["rnn"], gone, folders["transformer"])
    try:
        with urllib.request.urlopen(server.url + "runs", timeout=30) as response:
            data = json.load(response)
        translated = _post_json(server.url + "translate", {"text": "ein Hund", "run": "rnn"})
    finally:
        status = server.stop()
    assert [r["name"] for r in data["runs"]] == ["rnn", "transformer"]
    assert [(m["name"], m["folder"]) for m in data["missing"]] == [("gone", str(gone))]
    assert data["missing"][0]["error"].startswith(f"run folder {gone} not found; ")
    assert translated["sentences"][0]["translation"] is not None and status == 0
    assert f"attnkit serve: warning: not serving {gone}: " in server.stderr


def _status_for_host(url: str, path: str, host: str) -> tuple[int, dict]:
    """``GET url+path`` with the header ``Host: host``: the status and the JSON answer."""
    address = url.split("//")[1].strip("/")
    connection = http.client.HTTPConnection(address, timeout=30)
    try:
        connection.request("GET", path, headers={"Host": host})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def test_attnkit_serve_on_localhost_answers_only_its_own_host_names(tmp_path):
    # a page of evil.example whose name re-resolved to 127.0.0.1 (DNS rebinding) sends
    # "Host: evil.example:PORT", and read /runs (run folders, their paths) and translated
    folder = make_runs(tmp_path)["rnn"]
    server = ServerProcess(folder, "--allow-host", "Proxy.Example")
    port = server.url.rstrip("/").rsplit(":", 1)[1]
    try:
        answers = {
            host: _status_for_host(server.url, "/runs", host)
            for host in (f"evil.example:{port}", f"localhost:{port}", f"127.0.0.1:{port}",
                         f"[::1]:{port}", "proxy.example", "127.0.0.1.evil.example")
        }  # fmt: skip
    finally:
        assert server.stop() == 0
    statuses = {host: status for host, (status, _) in answers.items()}
    assert statuses == {
        f"evil.example:{port}": 403,
        f"localhost:{port}": 200,
        f"127.0.0.1:{port}": 200,
        f"[::1]:{port}": 200,
        "proxy.example": 200,
        "127.0.0.1.evil.example": 403,
    }
    refused = answers[f"evil.example:{port}"][1]
    assert "evil.example" in refused["error"] and "DNS rebinding" in refused["error"]


def test_allow_host_on_a_public_address_is_a_one_line_error(tmp_path, capsys):
    folder = make_runs(tmp_path)["rnn"]
    status, _, err = run(capsys, "serve", str(folder), "--host", "0.0.0.0", "--allow-host", "x")
    assert status == 2
    assert_one_line_error(err, "serve", "--host 0.0.0.0 answers requests for any name")


def test_a_served_app_without_missing_runs_lists_none(served):
    client, _ = served
    assert client.get("/runs").json()["missing"] == []


def _post_json(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def test_an_allowed_host_given_with_a_final_dot_or_capitals_matches_as_the_header_does(served):
    # the Host header is compared without its port, final dot and case; the names
    # --allow-host gave kept their final dot, so "proxy.example." refused every request
    from attnkit.cli.serve import allowed_hosts
    from attnkit.serve.app import create_app

    _, runs = served
    # "other.example:8443", a name given with its port, never matched: ports are compared
    # by no one, the header's is dropped
    app = create_app(
        list(runs.values()), hosts=["Proxy.Example.", "LOCALHOST", "other.example:8443"]
    )
    with TestClient(app) as client:
        statuses = {
            host: client.get("/runs", headers={"Host": host}).status_code
            for host in (
                "proxy.example",
                "PROXY.EXAMPLE.:8443",
                "localhost:8000",
                "evil.example",
                "other.example:8443",
            )
        }
    assert statuses == {
        "proxy.example": 200,
        "PROXY.EXAMPLE.:8443": 200,
        "localhost:8000": 200,
        "evil.example": 403,
        "other.example:8443": 200,
    }
    assert allowed_hosts("LOCALHOST", []) is not None  # a loopback server, whatever the case
    assert allowed_hosts("localhost.", []) is not None and allowed_hosts("0.0.0.0", []) is None


def test_translate_names_the_languages_of_a_run_of_real_text_and_none_for_a_toy_task(
    served, tmp_path
):
    from attnkit.nmt.config import RunConfig
    from attnkit.serve.export import text_languages

    client, _ = served
    assert post(client, {"text": "ein Mann"})["languages"] is None  # a toy copy task
    files = {"src": str(tmp_path / "a.fr"), "tgt": str(tmp_path / "a.en")}
    data = {"train": files, "valid": files, "src_lang": "fr", "tgt_lang": "en"}
    config = RunConfig.from_dict({"data": data})
    assert text_languages(config.data) == {"source": "fr", "target": "en"}
