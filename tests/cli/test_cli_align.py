"""attnkit align and attnkit inspect end to end on a briefly trained reverse-task run."""

import json
from pathlib import Path

import pytest
import torch

from attnkit.cli import main
from cli_helpers import assert_one_line_error, run

REVERSE = str(Path(__file__).resolve().parents[2] / "configs" / "reverse.yaml")
TINY = [
    "--no-progress",
    "--set", "train.max_steps=30",
    "--set", "train.valid_every=30",
    "--set", "train.early_stopping=null",
    "--train.lr", "0.01",
    "--data.toy.train_size", "320",
    "--data.toy.valid_size", "10",
    "--data.toy.test_size", "12",
    "--model.hidden_size", "16",
    "--model.embed_dim=8",
    "--train.threads", "1",
]  # fmt: skip
SOURCES = "s1 s2 s3\ns4 s5\n"
TARGETS = "s3 s2 s1\ns5 s4\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli_align") / "reverse"
    assert main(["train", REVERSE, "--out", str(out), *TINY]) == 0
    return out


@pytest.fixture
def files(tmp_path):
    (tmp_path / "src").write_text(SOURCES)
    (tmp_path / "tgt").write_text(TARGETS)
    (tmp_path / "gold").write_text("1-3 2-2 3-1\n1p2 2-1\n")  # 1-based, reversed
    return tmp_path


def test_align_prints_one_pharaoh_line_per_pair_with_one_link_per_target_word(
    run_dir, files, capsys
):
    status, out, _ = run(capsys, "align", str(run_dir), "--src", str(files / "src"),
                         "--tgt", str(files / "tgt"))  # fmt: skip
    lines = out.splitlines()
    assert status == 0 and len(lines) == 2
    for line, n_src, n_tgt in zip(lines, (3, 2), (3, 2), strict=True):
        links = [tuple(map(int, item.split("-"))) for item in line.split()]
        assert sorted(j for _, j in links) == list(range(n_tgt))  # argmax: one per target word
        assert all(0 <= i < n_src for i, _ in links)


def test_align_with_gold_reports_aer_and_writes_the_file(run_dir, files, capsys):
    out_file = files / "links.txt"
    status, out, _ = run(capsys, "align", str(run_dir), "--src", str(files / "src"),
                         "--tgt", str(files / "tgt"), "--gold", str(files / "gold"),
                         "--out", str(out_file), "--method", "threshold",
                         "--threshold", "0.2")  # fmt: skip
    assert status == 0 and len(out_file.read_text().splitlines()) == 2
    assert "AER = " in out and "precision" in out and "threshold 0.2, shift 0" in out


def test_a_threshold_that_argmax_ignores_is_warned_of(run_dir, files, capsys):
    base = ["align", str(run_dir), "--src", str(files / "src"), "--tgt", str(files / "tgt")]
    _, plain, _ = run(capsys, *base)
    status, out, err = run(capsys, *base, "--threshold", "0.2")
    assert status == 0 and out == plain
    assert "warning: --threshold 0.2 has no effect with --method argmax" in err
    _, _, err = run(capsys, *base, "--threshold", "0.2", "--method", "threshold")
    assert "has no effect" not in err


def test_align_reads_a_bitext_file(run_dir, files, capsys):
    (files / "pairs").write_text("s1 s2 ||| s2 s1\n")
    status, out, _ = run(capsys, "align", str(run_dir), "--bitext", str(files / "pairs"))
    assert status == 0 and len(out.splitlines()) == 1


@pytest.mark.parametrize(
    ("gold", "message"),
    [
        ("1-1\n", "has 1 line but there are 2 sentence pairs"),
        ("1-1\n1-3\n", "gold, line 2: link 1-3 is outside the pair (2 source, 2 target words)"),
        ("1-1\n3p1\n", "gold, line 2: link 3p1 is outside the pair (2 source, 2 target words)"),
        ("1-1\n1-x\n", "gold, line 2: '1-x' is not a link"),
    ],
)
def test_bad_gold_is_a_one_line_error(run_dir, files, capsys, gold, message):
    (files / "gold").write_text(gold)
    status, _, err = run(capsys, "align", str(run_dir), "--src", str(files / "src"),
                         "--tgt", str(files / "tgt"), "--gold", str(files / "gold"))  # fmt: skip
    assert status == 2
    assert_one_line_error(err, "align", message)


def _links(text: str) -> list[set[tuple[int, int]]]:
    return [
        {tuple(map(int, item.split("-"))) for item in line.split()} for line in text.splitlines()
    ]


def test_align_symmetrizes_with_a_reverse_run_in_one_command(run_dir, files, capsys):
    # the reverse task is its own inverse, so the run also aligns target -> source
    base = ["align", str(run_dir), "--src", str(files / "src"), "--tgt", str(files / "tgt")]
    _, forward, _ = run(capsys, *base)
    _, backward, _ = run(capsys, "align", str(run_dir), "--src", str(files / "tgt"),
                         "--tgt", str(files / "src"))  # fmt: skip
    reverse = [{(i, j) for j, i in pair} for pair in _links(backward)]
    for method in ("intersection", "union", "grow-diag-final-and"):
        status, out, err = run(capsys, *base, "--symmetrize", method, "--reverse-run",
                               str(run_dir), "--gold", str(files / "gold"))  # fmt: skip
        got = _links(out)
        assert status == 0 and len(got) == 2, err
        for f, r, g in zip(_links(forward), reverse, got, strict=True):
            assert f & r <= g <= f | r
            if method != "grow-diag-final-and":
                assert g == (f & r if method == "intersection" else f | r)
        assert f"{method} with {run_dir}" in err and "AER = " in err
        # one run for both directions: fine for this self-inverse toy task, but said
        assert f"warning: --reverse-run {run_dir} translates de->en, the same direction" in err
    status, _, err = run(capsys, *base, "--symmetrize", "union")
    assert status == 2
    assert_one_line_error(err, "align", "--symmetrize and --reverse-run go together")


def test_align_agreement_keeps_links_whose_two_weights_multiply_past_tau(run_dir, files, capsys):
    from attnkit.nmt.analysis.align import AlignOptions, align_words, read_bitext
    from attnkit.nmt.analysis.symmetrize import agreement_links
    from attnkit.nmt.runs.loaded_run import load_run

    (files / "pairs").write_text("s1 s2 s3 ||| s3 s2 s1\ns4 s5 ||| s5 s4\n")
    src, tgt = read_bitext(files / "pairs")
    loaded = load_run(run_dir)
    forward = align_words(loaded.model, loaded.src_tok, loaded.tgt_tok, src, tgt, AlignOptions())
    backward = align_words(loaded.model, loaded.src_tok, loaded.tgt_tok, tgt, src, AlignOptions())
    base = ["align", str(run_dir), "--bitext", str(files / "pairs"), "--reverse-run", str(run_dir)]
    counts = []
    for tau in ("0.02", "0.1"):
        status, out, err = run(capsys, *base, "--symmetrize", "agreement", "--threshold", tau)
        assert status == 0, err
        for f, b, got in zip(forward, backward, _links(out), strict=True):
            product = f.weights * b.weights.T  # (target words, source words)
            want = {(i, j) for j, i in (product >= float(tau)).nonzero().tolist()}
            assert got == want
        counts.append(sum(map(len, _links(out))))
    assert counts[0] > counts[1] > 0  # a lower tau keeps more links
    status, out, err = run(capsys, *base, "--symmetrize", "mutual", "--threshold", "0.02")
    assert status == 0, err
    for f, b, got in zip(forward, backward, _links(out), strict=True):
        assert got == agreement_links(f.weights, b.weights, 0.02, mutual=True)
        assert got <= agreement_links(f.weights, b.weights, 0.02)  # a subset of agreement
        assert len({i for i, _ in got}) == len(got) == len({j for _, j in got})  # one per word
    status, _, err = run(capsys, *base, "--symmetrize", "agreement", "--threshold", "0")
    assert status == 2
    assert_one_line_error(err, "align", "--threshold must be in (0, 1], got 0.0")


def test_align_jump_prior_smooths_both_directions_before_the_rule(run_dir, files, capsys):
    from attnkit.nmt.analysis.align import AlignOptions, align_words, read_bitext
    from attnkit.nmt.analysis.jump_prior import jump_smoothed
    from attnkit.nmt.analysis.symmetrize import agreement_links
    from attnkit.nmt.runs.loaded_run import load_run

    (files / "pairs").write_text("s1 s2 s3 s4 ||| s4 s3 s2 s1\ns4 s5 ||| s5 s4\n")
    src, tgt = read_bitext(files / "pairs")
    loaded = load_run(run_dir)
    raw = [align_words(loaded.model, loaded.src_tok, loaded.tgt_tok, a, b, AlignOptions())
           for a, b in ((src, tgt), (tgt, src))]  # fmt: skip
    base = ["align", str(run_dir), "--bitext", str(files / "pairs"), "--reverse-run",
            str(run_dir), "--symmetrize", "mutual", "--threshold", "0.02"]  # fmt: skip
    status, out, err = run(capsys, *base, "--jump-prior", "0.5")
    assert status == 0, err
    for f, b, got in zip(*raw, _links(out), strict=True):
        fw, bw = jump_smoothed(f.weights, 0.5), jump_smoothed(b.weights, 0.5)
        assert not torch.equal(fw, f.weights)
        assert got == agreement_links(fw, bw, 0.02, mutual=True)
    status, _, err = run(capsys, *base, "--jump-prior", "-1")
    assert status == 2
    assert_one_line_error(err, "align", "--jump-prior must be >= 0 and finite, got -1.0")


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_align_jump_prior_must_be_finite(files, capsys, bad):
    status, _, err = run(capsys, "align", str(files / "no_run"), "--src", str(files / "src"),
                         "--tgt", str(files / "tgt"), "--jump-prior", bad)  # fmt: skip
    assert status == 2
    assert_one_line_error(err, "align", f"--jump-prior must be >= 0 and finite, got {bad}")


def test_align_layer_auto_chooses_on_a_development_set(run_dir, files, capsys):
    (files / "dev").write_text("s1 s2 s3 ||| s3 s2 s1\ns4 s5 ||| s5 s4\n")
    base = ["align", str(run_dir), "--bitext", str(files / "dev")]
    status, out, err = run(capsys, *base, "--layer", "auto", "--dev-bitext",
                           str(files / "dev"), "--dev-gold", str(files / "gold"))  # fmt: skip
    assert status == 0 and len(out.splitlines()) == 2, err
    assert "--layer auto on 2 development pairs: layer 0, head " in err
    assert "the lowest of " in err
    status, _, err = run(capsys, *base, "--layer", "auto")
    assert status == 2
    assert_one_line_error(err, "align", "--layer auto needs --dev-bitext FILE and --dev-gold")


def test_align_without_input_and_bad_layer_are_one_line_errors(run_dir, files, capsys):
    status, _, err = run(capsys, "align", str(run_dir))
    assert status == 2
    assert_one_line_error(err, "align", "give --src FILE and --tgt FILE")
    status, _, err = run(capsys, "align", str(run_dir), "--bitext", str(files / "src"))
    assert_one_line_error(err, "align", "src, line 1: expected 'source ||| target'")
    (files / "pairs").write_text("s1 ||| s1\n")
    status, _, err = run(capsys, "align", str(run_dir), "--bitext", str(files / "pairs"),
                         "--layer", "x")  # fmt: skip
    assert_one_line_error(err, "align", "--layer must be a whole number or 'mean', got 'x'")
    status, _, err = run(capsys, "align", str(run_dir), "--bitext", str(files / "pairs"),
                         "--head", "3")  # fmt: skip
    assert_one_line_error(err, "align", "head 3 does not exist: the layer has 1 (0..0)")
    status, _, err = run(capsys, "align", str(run_dir), "--bitext", str(files / "pairs"),
                         "--head", "all")  # fmt: skip
    assert_one_line_error(err, "align", "--head must be a whole number or 'mean', got 'all'")


@pytest.mark.parametrize(("command", "option"), [("align", "--out"), ("inspect", "--json")])
def test_a_folder_named_as_the_output_file_is_refused_before_the_work(
    run_dir, files, capsys, command, option
):
    # align --gold and inspect print their figures on stdout before the file is written:
    # an empty stdout shows that nothing was computed only to be lost
    argv = [command, str(run_dir), "--src", str(files / "src"), "--tgt", str(files / "tgt")]
    gold = ["--gold", str(files / "gold")] if command == "align" else []
    status, out, err = run(capsys, *argv, *gold, option, str(files))
    assert status == 2 and out == ""
    message = f"{option} {files} is a folder; give the name of a file to write"
    assert_one_line_error(err, command, message)


@pytest.mark.parametrize(
    ("command", "option", "reads"),
    [("align", "--out", "--src"), ("align", "--out", "--gold"), ("inspect", "--json", "--tgt")],
)
def test_an_output_that_is_an_input_file_is_refused_and_the_input_kept(
    run_dir, files, capsys, command, option, reads
):
    # before, the whole corpus was aligned or inspected and the result then replaced the
    # input file it was read from
    argv = [command, str(run_dir), "--src", str(files / "src"), "--tgt", str(files / "tgt")]
    gold = ["--gold", str(files / "gold")] if command == "align" else []
    given = files / reads[2:]
    before = given.read_text()
    status, out, err = run(capsys, *argv, *gold, option, str(given))
    assert status == 2 and out == ""
    message = f"{option} {given} is the file {reads} reads: writing it would replace that input"
    assert_one_line_error(err, command, message)
    assert given.read_text() == before


def test_inspect_prints_and_writes_the_figures_with_zero_padding_mass(run_dir, tmp_path, capsys):
    json_file, picture = tmp_path / "figures.json", tmp_path / "coverage.png"
    status, out, _ = run(capsys, "inspect", str(run_dir), "--split", "test", "--beam", "2",
                         "--json", str(json_file), "--plot", str(picture))  # fmt: skip
    assert status == 0 and "mean_entropy" in out and "under_covered" in out
    figures = json.loads(json_file.read_text())
    assert figures["padding_mass"] == 0.0 and figures["sentences"] == 12
    assert 0.0 <= figures["under_covered"] <= 1.0 and -1.0 <= figures["monotonicity"] <= 1.0
    assert picture.stat().st_size > 0


def test_inspect_json_is_strict_json_when_monotonicity_is_undefined(run_dir, tmp_path, capsys):
    # one-word sources: every sentence's monotonicity is undefined (NaN), which the JSON
    # file gives as null (JSON has no NaN: json.loads in other languages, jq, refuse it)
    (tmp_path / "src").write_text("s1\ns2\n")
    json_file = tmp_path / "figures.json"
    status, out, _ = run(capsys, "inspect", str(run_dir), "--src", str(tmp_path / "src"),
                         "--tgt", str(tmp_path / "src"), "--json", str(json_file))  # fmt: skip
    assert status == 0 and "monotonicity: nan" in out

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    figures = json.loads(json_file.read_text(), parse_constant=refuse)
    assert figures["monotonicity"] is None and figures["monotonicity_sentences"] == 0
    assert figures["padding_mass"] == 0.0


def test_inspect_on_files_and_bad_arguments(run_dir, files, capsys):
    status, out, _ = run(capsys, "inspect", str(run_dir), "--src", str(files / "src"),
                         "--tgt", str(files / "tgt"))  # fmt: skip
    assert status == 0 and "sentences: 2" in out
    status, _, err = run(capsys, "inspect", str(run_dir), "--split", "test", "--src", "x")
    assert_one_line_error(err, "inspect", "give --split or --src/--tgt, not both")
    status, _, err = run(capsys, "inspect", str(run_dir), "--plot", str(files / "c.txt"))
    assert_one_line_error(err, "inspect", "cannot save a picture as 'c.txt'")


def test_inspect_keeps_blank_lines_so_warnings_name_the_files_line(run_dir, tmp_path, capsys):
    import shutil

    import yaml

    short = shutil.copytree(run_dir, tmp_path / "short")  # reads at most 2 tokens a source
    config = yaml.safe_load((short / "config.yaml").read_text())
    config["decode"]["max_input_len"] = 2
    (short / "config.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "src").write_text("s1 s2\n\ns3 s2 s1\n")
    (tmp_path / "tgt").write_text("s2 s1\ns4\ns1 s2 s3\n")
    status, out, err = run(capsys, "inspect", str(short), "--src", str(tmp_path / "src"),
                           "--tgt", str(tmp_path / "tgt"))  # fmt: skip
    assert status == 0 and "sentences: 3" in out  # as evaluate counts them
    assert "line 3: 3 tokens, truncated" in err
    (tmp_path / "src").write_text("\n\n\n")
    status, _, err = run(capsys, "inspect", str(short), "--src", str(tmp_path / "src"),
                         "--tgt", str(tmp_path / "tgt"))  # fmt: skip
    assert_one_line_error(err, "inspect", "sources has 3 lines, all blank: nothing to inspect")


def test_search_options_reach_the_decoder_and_bad_values_are_one_line_errors(
    run_dir, tmp_path, capsys
):
    json_file = tmp_path / "figures.json"
    status, _, _ = run(capsys, "inspect", str(run_dir), "--beam", "3", "--coverage-penalty",
                       "0.4", "--no-repeat-ngram", "2", "--early-stopping",
                       "--length-penalty", "1.4", "--json", str(json_file))  # fmt: skip
    figures = json.loads(json_file.read_text())
    assert status == 0 and figures["coverage_penalty"] == 0.4 and figures["no_repeat_ngram"] == 2
    assert figures["length_penalty"] == 1.4
    assert figures["early_stopping"] is True
    status, out, _ = run(capsys, "translate", str(run_dir), "s1 s1 s1 s1 s1 s1",
                         "--no-repeat-ngram", "1")  # fmt: skip
    assert status == 0 and len(out.split()) == len(set(out.split()))
    status, _, err = run(capsys, "evaluate", str(run_dir), "--coverage-penalty", "-1")
    assert status == 2
    assert_one_line_error(err, "evaluate", "--coverage-penalty must be >= 0, got -1.0")
    status, _, err = run(capsys, "translate", str(run_dir), "s1", "--length-penalty", "-0.5")
    assert status == 2
    assert_one_line_error(err, "translate", "--length-penalty must be >= 0, got -0.5")
    for option, value in (("--length-penalty", "1e308"), ("--coverage-penalty", "inf")):
        status, _, err = run(capsys, "translate", str(run_dir), "s1", option, value)
        assert status == 2
        message = f"{option} must be at most 100 (GNMT's weights are about 0.2 to 2), got "
        assert_one_line_error(err, "translate", message + str(float(value)))
