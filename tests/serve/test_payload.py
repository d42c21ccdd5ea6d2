"""The explorer's sentence payload: the library's record plus every view, n-best from search."""

from __future__ import annotations

import pytest

from attnkit.nmt.decoding.records import translation_record
from attnkit.nmt.decoding.translate import translate_lines
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.serve.payload import run_info, sentence_payload
from serve_helpers import make_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folders = make_runs(tmp_path_factory.mktemp("payload"))
    return {name: load_run(folder) for name, folder in folders.items()}


def test_payload_is_the_library_record_plus_views(runs):
    run = runs["transformer"]
    (t, blank) = translate_lines(run, ["ein Hund rennt", ""], beam_size=3, n_best=2)
    payload = sentence_payload(run, t, 1, n_best=2)
    record = translation_record(t, 1, hypotheses=2, decimals=None)
    assert {k: payload[k] for k in record} == record
    assert payload["weights"] == t.weights.tolist()
    assert [h["translation"] for h in payload["hypotheses"]] == [h.text for h in t.hypotheses]
    assert payload["hypotheses"][0]["translation"] == payload["translation"]
    views = payload["views"]
    assert len(views["cross"][0][0]) == len(t.tgt_pieces)  # (L, H, T, S)
    assert views["decoder_inputs"][0] == "<s>" and len(views["decoder_inputs"]) == len(t.tgt_pieces)
    assert all(abs(s - 1) < 1e-5 for s in payload["weight_sums"])
    empty = sentence_payload(run, blank, 2, n_best=2)
    assert empty["weights"] is None and empty["views"] is None and empty["hypotheses"] == []


def test_greedy_lists_the_translation_alone_and_run_info_names_the_run(runs):
    run = runs["rnn"]
    (t,) = translate_lines(run, ["ein Mann"], beam_size=1, n_best=5)
    payload = sentence_payload(run, t, 1, n_best=5)
    assert [h["translation"] for h in payload["hypotheses"]] == [t.text]
    assert payload["views"]["encoder"] is None
    info = run_info("rnn", run)
    assert info["name"] == "rnn" and info["arch"] == "rnn"
    assert info["direction"] == "toy copy task"  # not the unused de/en defaults
