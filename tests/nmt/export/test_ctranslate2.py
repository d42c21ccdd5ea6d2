"""A Transformer run exported to CTranslate2 translates as attnkit does: the same greedy
tokens and attention (float32), nearly the same with int8 weights; RNN runs and stale
exports are refused; the CLI exports, translates and evaluates with --engine ctranslate2.

Skipped without ctranslate2 (pip install 'attnkit[export]'), except under CI, where a
missing engine fails.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
from pathlib import Path

import pytest
import torch

from attnkit.cli import main
from attnkit.nmt.config import RunConfig
from attnkit.nmt.data.tokenizer import WordTokenizer
from attnkit.nmt.decoding.translate import translate_lines
from attnkit.nmt.decoding.views import attention_views, pick
from attnkit.nmt.export.ctranslate2 import MANIFEST, export_run, import_ctranslate2, int8_backend
from attnkit.nmt.export.engine import open_engine
from attnkit.nmt.runs.checkpoint import load_checkpoint, save_checkpoint
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.nmt.training.loop import train
from conftest_nmt import make_run

if os.environ.get("CI"):
    import_ctranslate2()  # under CI the engine must be there: fail, never skip
else:
    int8_backend(os.environ)  # before CTranslate2 is first imported
    pytest.importorskip("ctranslate2", reason="needs ctranslate2: pip install 'attnkit[export]'")

SYMBOLS = [f"s{i}" for i in range(1, 9)]
# The reverse task on 8 symbols with a tiny Transformer (as tests/nmt/training/test_train.py).
TOY = {
    "data": {
        "toy": {"task": "reverse", "num_symbols": 8, "min_len": 2, "max_len": 6},
        "max_src_len": None,
        "max_tgt_len": None,
    },
    "tokenizer": {"kind": "word", "vocab_size": 50},
    "model": {
        "arch": "transformer",
        "d_model": 16,
        "heads": 4,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "ff_dim": 32,
        "share_embeddings": True,
    },
    "train": {"batch_size": 32, "lr": 0.01, "max_steps": 30, "valid_every": 10, "seed": 3},
    "decode": {"beam_size": 2, "max_len_a": 1.0, "max_len_b": 2},
}


def sentences(n, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choices(SYMBOLS, k=rng.randint(1, 9))) for _ in range(n)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A toy pre-LN Transformer (sinusoidal positions, shared embeddings), trained briefly."""
    run_dir = tmp_path_factory.mktemp("transformer")
    train(RunConfig.from_dict(TOY), run_dir, progress_bar=False, echo=lambda line: None)
    return run_dir


@pytest.fixture(scope="module")
def post_ln(tmp_path_factory):
    """An untrained post-LN Transformer with learned positions and separate embeddings."""
    tok = WordTokenizer([*("<pad>", "<unk>", "<s>", "</s>"), *SYMBOLS])
    model = {
        "arch": "transformer",
        "d_model": 16,
        "heads": 2,
        "encoder_layers": 2,
        "decoder_layers": 3,
        "ff_dim": 24,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "norm_first": False,
        "positions": "learned",
        "max_positions": 32,
        "share_embeddings": False,
        "alignment_layer": 1,
    }
    folder = tmp_path_factory.mktemp("post_ln")
    return make_run(folder, tok, model=model, decode={"max_len_a": 1.5, "max_len_b": 2})


def assert_same_greedy(run_dir, lines):
    loaded = load_run(run_dir)
    ours = translate_lines(loaded, lines, beam_size=1)
    theirs = translate_lines(loaded, lines, beam_size=1, engine=open_engine("ctranslate2", loaded))
    assert [t.tgt_pieces for t in theirs] == [t.tgt_pieces for t in ours]
    assert [t.text for t in theirs] == [t.text for t in ours]
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(b.weights, a.weights, atol=1e-5, rtol=0)
        # log-probabilities; CTranslate2 normalises over the tokens the search may emit only
        assert a.score - 1e-4 <= b.score <= 0
    return ours


@pytest.mark.parametrize("run_name", ["trained", "post_ln"])
def test_float32_export_gives_attnkits_greedy_translations_exactly(run_name, request):
    run_dir = request.getfixturevalue(run_name)
    info = export_run(run_dir)
    assert info.path == run_dir / "ctranslate2" and info.quantization == "float32"
    lines = sentences(300)
    ours = assert_same_greedy(run_dir, lines)
    assert len({t.text for t in ours}) > 1


def test_beam_search_attention_is_the_models_even_where_the_tokens_differ(trained):
    export_run(trained)
    loaded = load_run(trained)
    lines = sentences(60, seed=1)
    ours = translate_lines(loaded, lines, beam_size=3)
    theirs = translate_lines(
        loaded, lines, beam_size=3, engine=open_engine("ctranslate2", loaded), n_best=2
    )
    for t in theirs:  # the first row too (CTranslate2's own is another sentence's)
        views = attention_views(loaded.model, t.src_ids, t.output_ids, "cpu")
        torch.testing.assert_close(t.weights, pick(views.cross, None, None), atol=1e-5, rtol=0)
    # CTranslate2 normalises beam scores by length ** alpha (attnkit: GNMT), so the
    # translations may differ; on this toy model a good part agrees.
    assert sum(a.tgt_pieces == b.tgt_pieces for a, b in zip(ours, theirs, strict=True)) >= 10
    assert all(1 <= len(t.hypotheses) <= 2 for t in theirs)


def test_int8_export_is_smaller_and_translates_nearly_the_same(trained, tmp_path):
    full = export_run(trained, tmp_path / "fp32")
    small = export_run(trained, tmp_path / "int8", "int8")
    assert small.size_bytes < full.size_bytes
    loaded = load_run(trained)
    lines = sentences(200, seed=2)
    ours = translate_lines(loaded, lines, beam_size=1)
    engine = open_engine("ctranslate2", loaded, export_dir=small.path)
    theirs = translate_lines(loaded, lines, beam_size=1, engine=engine)
    same = sum(a.tgt_pieces == b.tgt_pieces for a, b in zip(ours, theirs, strict=True))
    assert same >= 0.9 * len(lines)


def test_the_export_folder_holds_the_model_tokenizer_card_and_manifest(trained, tmp_path):
    out = tmp_path / "model"
    export_run(trained, out)
    names = {p.name for p in out.iterdir()}
    assert {
        "model.bin",
        "config.json",
        "README.md",
        MANIFEST,
        "tokenizer.json",
        "vocab.json",
    } <= names
    vocab = json.loads((out / "shared_vocabulary.json").read_text())
    assert vocab[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert vocab == json.loads((trained / "vocab.json").read_text())
    ct2_config = json.loads((out / "config.json").read_text())
    assert ct2_config["add_source_eos"] is True and ct2_config["layer_norm_epsilon"] == 1e-5
    manifest = json.loads((out / MANIFEST).read_text())
    assert (
        manifest["checkpoint_sha256"] == json.loads((trained / "best.json").read_text())["sha256"]
    )
    card = (out / "README.md").read_text()
    assert (
        "# toy reverse task Transformer" in card
        and "Licence of the training data" in card
        and "toy task" in card
    )
    evaluate = f"attnkit evaluate {trained.resolve()} --engine ctranslate2 --export-dir "
    assert f"`{evaluate}{out.resolve()}`" in card  # the command scores this export
    export_run(trained, out, "int8")  # replaced whole, nothing left beside it
    assert json.loads((out / MANIFEST).read_text())["quantization"] == "int8"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_the_cards_command_pastes_into_a_shell_with_spaces_in_the_paths(trained, tmp_path):
    run_dir = tmp_path / "my runs" / "de en"
    shutil.copytree(trained, run_dir)
    out = tmp_path / "my exports" / "de en"
    export_run(run_dir, out)
    card = (out / "README.md").read_text()
    (command,) = re.findall(r"`(attnkit evaluate [^`]*)`", card)
    argv = shlex.split(command)
    assert argv == [
        "attnkit", "evaluate", str(run_dir.resolve()), "--engine", "ctranslate2",
        "--export-dir", str(out.resolve()),
    ]  # fmt: skip
    assert "test BLEU" not in card  # nothing records one: no row that is always empty
    assert "test_bleu" not in json.loads((out / MANIFEST).read_text())


@pytest.mark.parametrize("quantization", ["int8", "int8_float32"])
def test_an_8bit_exports_card_names_the_int8_backend_a_cpu_without_vnni_needs(
    trained, tmp_path, quantization
):
    """attnkit sets CT2_USE_MKL=1 for its own engine on a CPU without VNNI (without it the
    int8 export gave the float32 model's greedy output for 93 of 200 toy sentences on an
    AVX2-only AMD EPYC, with it 178); a deployer following the card was not told."""
    export_run(trained, tmp_path / "small", quantization)
    card = (tmp_path / "small" / "README.md").read_text()
    assert "set the environment variable `CT2_USE_MKL=1` before `ctranslate2` is imported" in card
    assert "none of avx512_vnni, avx_vnni, amx_int8" in card
    export_run(trained, tmp_path / "full")
    assert "CT2_USE_MKL" not in (tmp_path / "full" / "README.md").read_text()


def test_the_manifests_decode_rules_give_attnkits_greedy_translations_in_ctranslate2(
    post_ln, tmp_path
):
    """A deployer who passes ``decode`` of attnkit_export.json to CTranslate2 (as the card
    shows) gets attnkit's greedy output, n-gram blocking and the input limit included."""
    import ctranslate2

    config = (post_ln / "config.yaml").read_text()
    blocked = tmp_path / "run"
    shutil.copytree(post_ln, blocked)
    config = config.replace("no_repeat_ngram: 0", "no_repeat_ngram: 2")
    (blocked / "config.yaml").write_text(config.replace("max_input_len: null", "max_input_len: 5"))
    export_run(blocked, tmp_path / "ct2")
    rules = json.loads((tmp_path / "ct2" / MANIFEST).read_text())["decode"]
    assert (rules["no_repeat_ngram"], rules["max_input_len"]) == (2, 5)
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu")
    lines = sentences(40, seed=5)
    ours = translate_lines(load_run(blocked), lines, beam_size=1)
    for line, translation in zip(lines, ours, strict=True):
        pieces = line.split()[: rules["max_input_len"]]
        limit = int(rules["max_len_a"] * (len(pieces) + 1) + rules["max_len_b"])
        out = translator.translate_batch(
            [pieces],
            beam_size=1,
            no_repeat_ngram_size=rules["no_repeat_ngram"],
            length_penalty=rules["length_penalty"],
            min_decoding_length=0,
            max_decoding_length=limit,
            suppress_sequences=[["<pad>"], ["<s>"]],
        )
        assert " ".join(out[0].hypotheses[0]) == translation.text


def test_the_cards_length_limit_stops_at_the_position_table(post_ln, tmp_path):
    """The card's snippet, for the longest source it lets through (31 pieces at
    max_positions 32), gives CTranslate2 a decoding limit it can reach: 1.5 * 32 + 2 = 50
    steps stopped it with 'No position encodings are defined for positions >= 32'."""
    import ctranslate2

    from attnkit.nmt.export.model_card import _usage  # a sentencepiece run's card shows it

    export_run(post_ln, tmp_path / "ct2")
    snippet = _usage(json.loads((tmp_path / "ct2" / MANIFEST).read_text()))
    expression = re.search(r"max_decoding_length=(.+?), suppress", snippet).group(1)
    pieces = (SYMBOLS * 8)[:31]
    limit = eval(expression, {"pieces": pieces})  # noqa: S307 (our own card's arithmetic)
    assert limit == 32
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu")
    out = translator.translate_batch(
        [pieces], beam_size=1, max_decoding_length=limit, min_decoding_length=limit
    )
    assert len(out[0].hypotheses[0]) == limit


def test_an_rnn_run_is_refused_with_the_reason(tmp_path):
    run_dir = make_run(tmp_path, WordTokenizer([*("<pad>", "<unk>", "<s>", "</s>"), *SYMBOLS]))
    with pytest.raises(ValueError, match="no attention-RNN model"):
        export_run(run_dir)
    assert not (run_dir / "ctranslate2").exists()


def test_an_export_onto_a_file_is_refused_and_the_file_kept(trained, tmp_path, capsys):
    target = tmp_path / "model"
    target.write_text("not a folder")
    assert main(["export", str(trained), str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"attnkit export: error: {target} is a file, not a folder; choose a folder for the export"
    ]
    assert target.read_text() == "not a folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_an_export_of_an_older_checkpoint_is_refused(post_ln, tmp_path):
    out = tmp_path / "old"
    export_run(post_ln, out)
    weights = load_checkpoint(post_ln / "best.json").model
    save_checkpoint(post_ln, "best", {k: v + 0.01 for k, v in weights.items()}, {})
    try:
        with pytest.raises(ValueError, match="export it again: attnkit export"):
            open_engine("ctranslate2", load_run(post_ln), export_dir=out)
    finally:
        save_checkpoint(post_ln, "best", weights, {})


def test_an_export_of_another_checkpoint_names_the_one_it_holds(trained, tmp_path):
    out = tmp_path / "last_export"
    export_run(trained, out, checkpoint="last")
    with pytest.raises(ValueError) as err:
        open_engine("ctranslate2", load_run(trained), export_dir=out, checkpoint="best")
    assert str(err.value) == (
        f"{out} holds {trained}'s 'last' checkpoint, not 'best': pass --checkpoint last, or "
        f"export 'best' to another folder (attnkit export {trained} OTHER_FOLDER "
        "--checkpoint best)"
    )


def test_another_runs_export_is_refused_without_advice_to_overwrite_it(trained, post_ln, tmp_path):
    out = tmp_path / "post_ln_export"
    export_run(post_ln, out)
    with pytest.raises(ValueError) as err:
        open_engine("ctranslate2", load_run(trained), export_dir=out)
    assert str(err.value) == (
        f"{out} is an export of {post_ln.resolve()}, not of {trained}; export this run "
        f"(attnkit export {trained} --checkpoint best) and use its folder"
    )


def test_the_ctranslate2_engine_refuses_an_rnn_run_with_the_reason(tmp_path, capsys):
    run_dir = make_run(tmp_path, WordTokenizer([*("<pad>", "<unk>", "<s>", "</s>"), *SYMBOLS]))
    assert main(["translate", str(run_dir), "s1 s2", "--engine", "ctranslate2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        f"attnkit translate: error: {run_dir} is an RNN run (model.arch: rnn); CTranslate2 "
        "runs only Transformer runs: use attnkit's own search (--engine attnkit)"
    )


def test_an_export_of_the_averaged_checkpoint_records_its_own_step_and_bleu(trained, tmp_path):
    weights = load_checkpoint(trained / "best.json").model
    state = {"averaged_steps": [20, 30], "step": 30, "valid_bleu": 12.5}
    save_checkpoint(trained, "averaged", weights, state)
    try:
        out = tmp_path / "averaged"
        export_run(trained, out, checkpoint="averaged")
        manifest = json.loads((out / MANIFEST).read_text())
        assert manifest["checkpoint"] == "averaged"
        assert manifest["step"] == 30 and manifest["valid_bleu"] == 12.5
        record = json.loads((trained / "averaged.json").read_text())
        assert manifest["checkpoint_sha256"] == record["sha256"]
    finally:
        for path in trained.glob("averaged.*"):
            path.unlink()


def test_the_engines_default_checkpoint_is_the_exports_default_auto(trained, tmp_path):
    """export_run and load_run default to ``auto``; open_engine defaulted to ``best`` and
    refused their export ("holds 'averaged' checkpoint, not 'best'") of a run whose
    ``auto`` is not ``best``."""
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir, ignore=shutil.ignore_patterns("choice.json"))
    weights = load_checkpoint(run_dir / "best.json").model
    state = {"averaged_steps": [20, 30], "step": 30, "valid_bleu": 50.0, "best_bleu": 40.0}
    save_checkpoint(run_dir, "averaged", {k: v + 0.01 for k, v in weights.items()}, state)
    assert export_run(run_dir).manifest["checkpoint"] == "averaged"
    loaded = load_run(run_dir)
    lines = sentences(20, seed=4)
    ours = translate_lines(loaded, lines, beam_size=1)
    theirs = translate_lines(loaded, lines, beam_size=1, engine=open_engine("ctranslate2", loaded))
    assert [t.text for t in theirs] == [t.text for t in ours]


def test_an_export_of_last_records_the_bleu_of_its_own_step_not_the_runs_best(trained, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir)
    weights = load_checkpoint(run_dir / "best.json").model
    progress = {"step": 30, "best_step": 20, "best_bleu": 40.0}
    save_checkpoint(run_dir, "last", weights, {"progress": progress})
    rows = [{"step": 10, "valid_bleu": 30.0}, {"step": 20, "valid_bleu": 40.0}]
    rows.append({"step": 30, "valid_bleu": 25.0})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    export_run(run_dir, tmp_path / "last", checkpoint="last")
    manifest = json.loads((tmp_path / "last" / MANIFEST).read_text())
    assert manifest["step"] == 30 and manifest["valid_bleu"] == 25.0
    card = (tmp_path / "last" / "README.md").read_text()
    assert "| validation BLEU (attnkit, during training) | 25.00 |" in card
    # saved between validations (Ctrl-C): no validation scored these weights
    save_checkpoint(run_dir, "last", weights, {"progress": {**progress, "step": 35}})
    export_run(run_dir, tmp_path / "last", checkpoint="last")
    manifest = json.loads((tmp_path / "last" / MANIFEST).read_text())
    assert manifest["step"] == 35 and manifest["valid_bleu"] is None


def test_cli_exports_then_translates_and_evaluates_with_ctranslate2(trained, tmp_path, capsys):
    out = tmp_path / "ct2"
    assert main(["export", str(trained), "--quantization", "float32", str(out)]) == 0
    assert "exported:" in capsys.readouterr().out
    args = [str(trained), "s1 s2 s3", "s4 s5", "--beam", "1"]
    assert main(["translate", *args]) == 0
    ours = capsys.readouterr().out
    assert main(["translate", *args, "--engine", "ctranslate2", "--export-dir", str(out)]) == 0
    assert capsys.readouterr().out == ours
    assert (
        main(["evaluate", str(trained), "--engine", "ctranslate2", "--export-dir", str(out)]) == 0
    )
    assert "BLEU" in capsys.readouterr().out


def test_cli_ctranslate2_decodes_in_the_exports_type_not_bf16(
    trained, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "ct2"
    assert main(["export", str(trained), "--quantization", "float32", str(out)]) == 0
    capsys.readouterr()
    args = ["translate", str(trained), "s1 s2 s3", "--engine", "ctranslate2"]
    args += ["--export-dir", str(out)]
    assert main([*args, "--precision", "fp32"]) == 0
    fp32 = capsys.readouterr().out
    assert main([*args, "--precision", "bf16"]) == 2
    assert "--precision bf16 is for attnkit's own search" in capsys.readouterr().err
    monkeypatch.setenv("ATTNKIT_PRECISION", "bf16")  # what auto picks on a CPU with bf16
    assert main(args) == 0
    captured = capsys.readouterr()
    assert captured.out == fp32 and "precision bf16" not in captured.err


def test_cli_without_ctranslate2_says_how_to_install_it(trained, monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "ctranslate2", None)
    assert main(["export", str(trained)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    hint = "CTranslate2 is not installed; install it with: pip install 'attnkit[export]'"
    assert err == [f"attnkit export: error: {hint}"]
    assert main(["translate", str(trained), "s1", "--engine", "ctranslate2"]) == 2
    assert "pip install 'attnkit[export]'" in capsys.readouterr().err


def test_cli_export_dir_needs_the_ctranslate2_engine(trained, capsys):
    assert main(["translate", str(trained), "s1", "--export-dir", "x"]) == 2
    assert "--export-dir needs --engine ctranslate2" in capsys.readouterr().err


def test_parity_benchmark_finds_the_float32_export_greedy_identical(trained):
    from benchmarks.deploy_parity import parity, report

    found = parity(trained, threads=1)
    assert found["sentences"] > 0 and found["greedy_identical_share"] == 1.0
    assert found["greedy_differences"] == []
    bleu = found["greedy_bleu"]
    assert bleu["ctranslate2 float32"] == bleu["attnkit"]
    assert abs(bleu["ctranslate2 int8"] - bleu["attnkit"]) < 20
    assert "= attnkit on 100.00% of sentences" in report(found)


@pytest.mark.parametrize(
    ("flags", "preset", "expected"),
    [
        ("fpu avx2 fma", None, "1"),  # no VNNI: MKL's int8
        ("fpu avx2 avx512_vnni", None, None),  # VNNI: CTranslate2's own choice
        ("fpu avx2 avx_vnni", None, None),
        ("fpu avx2", "0", "0"),  # the user's setting stands
    ],
)
def test_the_int8_backend_is_mkl_only_on_a_cpu_without_vnni(flags, preset, expected):
    environ = {} if preset is None else {"CT2_USE_MKL": preset}
    int8_backend(environ, cpu_flags=flags)
    assert environ.get("CT2_USE_MKL") == expected


def test_an_export_that_cannot_be_written_names_the_export_folder(trained, capsys):
    out = Path("/proc/attnkit-export")  # nothing can be made in /proc, not even by root
    if not Path("/proc/self").exists():
        pytest.skip("no /proc")
    assert main(["export", str(trained), str(out)]) == 74
    err = capsys.readouterr().err
    assert err.startswith(f"attnkit export: error: cannot write {out}: "), err
    assert ".tmp" not in err


@pytest.mark.parametrize(
    ("src_lang", "example"),
    [("de", "'Ein Hund rennt.'"), ("fr", "'Un chien court.'"), ("xx", "'A sentence in xx.'")],
)
def test_the_cards_example_sentence_is_in_the_runs_source_language(src_lang, example):
    """An en->fr export's card encoded 'Ein Hund rennt.' with the English tokenizer."""
    from attnkit.nmt.export.model_card import _usage

    decode = {"max_input_len": 8, "beam_size": 1, "length_penalty": 1.0, "no_repeat_ngram": 0}
    decode |= {"max_len_a": 1.5, "max_len_b": 2}
    m = {"src_tokenizer": "s.model", "tgt_tokenizer": "t.model", "model": {}, "decode": decode}
    assert f"sp_src.encode({example}, out_type=str)" in _usage(m | {"src_lang": src_lang})
