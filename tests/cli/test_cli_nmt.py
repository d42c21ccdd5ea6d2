"""End to end through the CLI: train the reverse preset briefly, translate, evaluate, errors."""

import gzip
import io
import os
import threading
from pathlib import Path

import pytest

from attnkit.cli import main

REVERSE = str(Path(__file__).resolve().parents[2] / "configs" / "reverse.yaml")
TINY = [
    "--no-progress",
    "--set", "train.max_steps=40",
    "--set", "train.valid_every=20",
    "--set", "train.early_stopping=null",
    "--train.lr", "0.01",
    "--data.toy.train_size", "640",
    "--data.toy.valid_size", "20",
    "--data.toy.test_size", "15",
    "--model.hidden_size", "24",
    "--model.embed_dim=16",
    "--train.threads", "1",
]  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "reverse"
    assert main(["train", REVERSE, "--out", str(out), *TINY]) == 0
    return out


def test_train_writes_the_run_folder(run_dir):
    for name in (
        "config.yaml",
        "vocab.json",
        "best.json",
        "last.json",
        "metrics.jsonl",
        "learning_curve.png",
    ):
        assert (run_dir / name).is_file(), name
    saved = (run_dir / "config.yaml").read_text()
    assert "hidden_size: 24" in saved and "max_steps: 40" in saved and "name: reverse" in saved


def test_translate_arguments_one_line_each(run_dir, capsys):
    assert main(["translate", str(run_dir), "s1 s2 s3", "s4 s5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert all(set(line.split()) <= {f"s{i}" for i in range(20)} for line in lines)


def test_translate_stdin_keeps_empty_lines_aligned(run_dir, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("s1 s2\n\ns3 s4 s5\n   \n"))
    assert main(["translate", str(run_dir), "--beam", "3"]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert len(lines) == 5 and lines[4] == ""  # 4 outputs + final newline
    assert lines[0] and lines[1] == "" and lines[2] and lines[3] == ""


def test_a_sentence_that_names_a_file_is_translated_with_a_hint(run_dir, capsys, tmp_path):
    # evaluate, inspect and align take --src FILE; `attnkit translate RUN test.de` printed a
    # translation of the file's name, with nothing to say that the file was not read
    source = tmp_path / "test.de"
    source.write_text("s1 s2\ns3 s4\n")
    assert main(["translate", str(run_dir), str(source), "s1 s2"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2
    assert f"warning: {source} is a file; translating its name as a sentence" in captured.err
    assert f"attnkit translate {run_dir} --src {source}" in captured.err
    assert main(["translate", str(run_dir), "s1 s2", " ".join(["s3"] * 200)]) == 0
    assert "is a file" not in capsys.readouterr().err  # 599 characters: no name, no error


def test_translate_src_reads_a_file_plain_or_gzipped_as_stdin_is_read(
    run_dir, capsys, monkeypatch, tmp_path
):
    text = "s1 s2\n\ns3 s4 s5\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main(["translate", str(run_dir)]) == 0
    piped = capsys.readouterr().out
    plain, packed = tmp_path / "test.de", tmp_path / "test.de.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    for source in (plain, packed):
        assert main(["translate", str(run_dir), "--src", str(source)]) == 0
        assert capsys.readouterr().out == piped and len(piped.splitlines()) == 3
    assert main(["translate", str(run_dir), "--src", str(plain), "s1"]) == 2
    assert "give sentences or --src FILE, not both" in capsys.readouterr().err
    assert main(["translate", str(run_dir), "--src", str(tmp_path / "nothing.de")]) == 2
    assert "--src " in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_translate_src_reads_a_pipe_as_evaluate_does(run_dir, capsys, tmp_path):
    """``--src <(cut -f1 test.tsv)`` is a pipe, not a regular file: translate refused it
    ('no such file') where evaluate and the README's pipe example read it."""
    text = "s1 s2\n\ns3 s4 s5\n"
    plain, pipe = tmp_path / "test.de", tmp_path / "pipe.de"
    plain.write_text(text)
    assert main(["translate", str(run_dir), "--src", str(plain)]) == 0
    from_file = capsys.readouterr().out
    os.mkfifo(pipe)
    writer = threading.Thread(target=pipe.write_text, args=(text,), daemon=True)
    writer.start()
    assert main(["translate", str(run_dir), "--src", str(pipe)]) == 0
    writer.join()
    assert capsys.readouterr().out == from_file and len(from_file.splitlines()) == 3
    assert main(["translate", str(run_dir), "--src", str(tmp_path)]) == 2
    assert f"--src {tmp_path} is a folder, not a file" in capsys.readouterr().err


def test_translate_show_attention_and_plot(run_dir, capsys, tmp_path):
    plots = tmp_path / "heatmaps"
    assert (
        main(["translate", str(run_dir), "s1 s2 s3", "--show-attention", "--plot", str(plots)]) == 0
    )
    captured = capsys.readouterr()
    out, err = captured.out.splitlines(), captured.err.splitlines()
    assert len(out) == 1 and out[0]  # stdout: the translation only
    assert err[0] == f"line 1: {out[0]}"
    alignment = [row for row in err[1:] if not row.startswith("heatmap: ")]
    assert alignment and all("<-" in row for row in alignment)
    weight = float(alignment[0].split()[-1])
    assert 0.0 <= weight <= 1.0
    assert (plots / "sentence_001.png").read_bytes()[:4] == b"\x89PNG"


def test_evaluate_prints_sacrebleu_signature_and_chrf(run_dir, capsys, tmp_path):
    hyps = tmp_path / "hyps.txt"
    assert main(["evaluate", str(run_dir), "--split", "test", "--output", str(hyps)]) == 0
    out = capsys.readouterr().out
    assert "test: 15 sentences" in out
    assert "BLEU = " in out and "nrefs:1|case:mixed" in out
    assert "chrF = " in out and "BLEU (lowercased) = " in out
    assert len(hyps.read_text().splitlines()) == 15


@pytest.mark.parametrize(("command", "option"), [("evaluate", "--output"), ("translate", "--html")])
def test_a_folder_named_as_the_output_file_is_refused_before_translating(
    run_dir, capsys, tmp_path, command, option
):
    argv = [command, str(run_dir), *(["s1 s2"] if command == "translate" else [])]
    assert main([*argv, option, str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing translated first
    message = f"{option} {tmp_path} is a folder; give the name of a file to write"
    assert captured.err.strip().splitlines()[-1] == f"attnkit {command}: error: {message}"


@pytest.mark.parametrize(
    ("command", "option", "reads"),
    [
        ("translate", "--attention-json", "--src"),
        ("translate", "--attention-out", "--src"),
        ("translate", "--html", "--src"),
        ("evaluate", "--output", "--src"),
        ("evaluate", "--output", "--tgt"),
    ],
)
def test_an_output_that_is_an_input_file_is_refused_and_the_input_kept(
    run_dir, capsys, tmp_path, command, option, reads
):
    # before, --attention-json/--attention-out emptied --src before it was read (nothing
    # translated, status 0), and --html / evaluate --output replaced the input afterwards
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("s1 s2 s3\ns4 s5\n")
    tgt.write_text("s3 s2 s1\ns5 s4\n")
    given = {"--src": src, "--tgt": tgt}[reads]
    link = tmp_path / "link.txt"  # the same file under another name
    link.symlink_to(given.name)
    argv = [command, str(run_dir), "--src", str(src)]
    argv += ["--tgt", str(tgt)] if command == "evaluate" else []
    argv += ["--show-attention"] if option == "--attention-out" else []
    for name in (given, link):
        assert main([*argv, option, str(name)]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""  # refused before anything was translated
        message = (
            f"{option} {name} is the file {reads} reads: writing it would replace that input; "
            "give another name"
        )
        assert captured.err.strip().splitlines()[-1] == f"attnkit {command}: error: {message}"
    assert src.read_text() == "s1 s2 s3\ns4 s5\n" and tgt.read_text() == "s3 s2 s1\ns5 s4\n"


def test_an_output_that_is_the_file_on_stdin_is_refused_and_the_input_kept(run_dir, tmp_path):
    # attnkit translate RUN --attention-json in.txt < in.txt: before, in.txt was emptied
    # before a line was read, and the command said nothing and ended with status 0
    import subprocess
    import sys

    given = tmp_path / "in.txt"
    given.write_text("s1 s2 s3\ns4 s5\n")
    command = [sys.executable, "-m", "attnkit", "translate", str(run_dir)]
    with given.open("rb") as stdin:
        done = subprocess.run(
            [*command, "--attention-json", str(given)], stdin=stdin, capture_output=True, text=True
        )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"attnkit translate: error: --attention-json {given} is the file standard input reads: "
        "writing it would replace that input; give another name"
    )
    assert given.read_text() == "s1 s2 s3\ns4 s5\n"


def test_evaluate_output_dash_is_refused_not_written_to_a_file_named_dash(
    run_dir, capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", str(run_dir), "--output", "-"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines()[-1] == (
        "attnkit evaluate: error: --output -: stdout carries the scores; give a file name"
    )
    assert not (tmp_path / "-").exists()


def error_of(argv, capsys):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    return err


def test_config_errors_exit_2_with_one_clear_message(capsys, tmp_path):
    err = error_of(["train", REVERSE, "--out", str(tmp_path), "--model.hidden_size", "0"], capsys)
    assert "attnkit train: error:" in err and "model.hidden_size: must be > 0, got 0" in err
    err = error_of(["train", REVERSE, "--set", "train.lr_rate=1"], capsys)
    assert "train.lr_rate: unknown key" in err
    err = error_of(["train", str(tmp_path / "none.yaml")], capsys)
    assert "config file not found" in err
    assert not (tmp_path / "config.yaml").exists()


def test_existing_run_needs_resume_or_overwrite(run_dir, capsys):
    err = error_of(["train", REVERSE, "--out", str(run_dir), *TINY], capsys)
    assert "--resume" in err and "--overwrite" in err
    assert main(["train", REVERSE, "--out", str(run_dir), "--resume", *TINY]) == 0
    assert "reusing" in capsys.readouterr().err


def test_translate_errors(run_dir, capsys, tmp_path):
    assert "has no config.yaml (not a training run folder)" in error_of(
        ["translate", str(tmp_path), "s1"], capsys
    )
    assert "--beam must be >= 1" in error_of(
        ["translate", str(run_dir), "s1", "--beam", "0"], capsys
    )


def test_layer_without_an_attention_sink_is_named_not_ignored(run_dir, capsys):
    assert main(["translate", str(run_dir), "s1 s2", "--layer", "0"]) == 0
    err = capsys.readouterr().err
    assert "warning: --layer chooses the attention that --plot" in err
    assert main(["translate", str(run_dir), "s1 s2", "--layer", "0", "--show-attention"]) == 0
    assert "changes nothing" not in capsys.readouterr().err


CPU_ALLOCATOR = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 25600000000 bytes. Error code 12 (Cannot allocate memory)"
)  # what `attnkit evaluate RUN --beam 100000` met, 45 s in


@pytest.mark.parametrize("command", [["translate", "s1 s2"], ["evaluate"]])
def test_a_beam_too_wide_for_memory_is_one_line_naming_the_beam(
    run_dir, capsys, monkeypatch, command
):
    import attnkit.nmt.decoding.search as search

    def out_of_memory(*args):
        raise RuntimeError(CPU_ALLOCATOR)

    monkeypatch.setattr(search, "beam_search_n_best", out_of_memory)
    argv = [command[0], str(run_dir), *command[1:], "--beam", "100000"]
    err = error_of(argv, capsys)
    assert "out of memory" in err and "beam 100000" in err and "smaller --beam" in err
    assert err.count("\n") == 1, err


def test_other_runtime_errors_of_the_search_are_not_called_out_of_memory(run_dir, monkeypatch):
    import attnkit.nmt.decoding.search as search

    def broken(*args):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    monkeypatch.setattr(search, "beam_search_n_best", broken)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        main(["translate", str(run_dir), "s1 s2", "--beam", "2"])


def test_two_outputs_on_one_file_are_refused_before_the_work(run_dir, capsys, tmp_path):
    # before, --attention-out and --attention-json both wrote same.txt: garbled, status 0
    same = tmp_path / "same.txt"
    argv = ["translate", str(run_dir), "s1 s2", "--show-attention", "--attention-out", str(same)]
    assert main([*argv, "--attention-json", str(same)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not same.exists()
    assert captured.err.strip().endswith(
        f"--attention-json {same} and --attention-out {same} are the same file; give each its own"
    )
    assert main([*argv, "--attention-json", str(tmp_path / "other.jsonl")]) == 0
