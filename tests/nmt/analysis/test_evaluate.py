"""Evaluate a whole test set: every line scored and written in order, your own files,
and one-line errors (exit status 2) for test sets that cannot be scored."""

import gzip

import pytest
from sacrebleu.metrics import BLEU

from attnkit.nmt.analysis.metrics import sacre_bleu
from attnkit.nmt.data.tokenizer import WordTokenizer
from attnkit.nmt.decoding.translate import translate_lines
from attnkit.nmt.runs.loaded_run import load_run
from cli_helpers import assert_one_line_error, run
from conftest_nmt import make_run

PAIRS = {"ein Mann": "a man", "zwei Hunde laufen": "two dogs run", "eine Frau": "a woman"}
TEST_DE = ["ein Mann", "", "zwei Hunde laufen", "eine Frau"]  # line 2 empty: an empty output
TEST_EN = ["a man", "a dog", "two dogs run", "a woman"]


def write_lines(path, lines, *, gz=False):
    data = "".join(f"{line}\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return str(path)


def files_run(folder, test_de, test_en):
    """An untrained run whose config reads train/valid/test files from ``folder``."""
    split = {
        name: {
            "src": write_lines(folder / f"{name}.de", de),
            "tgt": write_lines(folder / f"{name}.en", en),
        }
        for name, de, en in (
            ("train", list(PAIRS), list(PAIRS.values())),
            ("valid", list(PAIRS), list(PAIRS.values())),
            ("test", test_de, test_en),
        )
    }
    tok = WordTokenizer.train([*PAIRS, *PAIRS.values()])
    return make_run(folder, tok, data={"toy": None, **split})


@pytest.fixture(scope="module")
def eval_run(tmp_path_factory):
    return files_run(tmp_path_factory.mktemp("eval"), TEST_DE, TEST_EN)


def test_every_pair_is_scored_and_the_output_stays_line_aligned(eval_run, capsys, tmp_path):
    hyps_path = tmp_path / "hyps.txt"
    status, out, err = run(capsys, "evaluate", str(eval_run), "--output", str(hyps_path))
    assert status == 0 and "Traceback" not in err
    lines = out.splitlines()
    assert lines[0] == (
        "test: 4 sentences, beam 2 (1 with an empty source, given an empty translation; all scored)"
    )
    hyps = hyps_path.read_text(encoding="utf-8").split("\n")
    assert len(hyps) == 5 and hyps[1] == "" and hyps[4] == ""  # 4 lines + final newline
    expected = [t.text for t in translate_lines(load_run(eval_run), TEST_DE)]
    assert hyps[:4] == expected
    assert lines[1] == str(sacre_bleu(expected, TEST_EN))  # on all 4 references


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzipped"])
def test_own_files_are_scored_like_the_split(eval_run, capsys, tmp_path, gz):
    status, split_out, _ = run(capsys, "evaluate", str(eval_run))
    assert status == 0
    own_de = TEST_DE[:1] + ["\u200b"] + TEST_DE[2:]  # only looks non-empty: scored as empty
    src = write_lines(tmp_path / ("own.de.gz" if gz else "own.de"), own_de, gz=gz)
    ref = write_lines(tmp_path / "own.en", TEST_EN)
    status, out, err = run(capsys, "evaluate", str(eval_run), "--src", src, "--ref", ref)
    assert status == 0 and err == ""
    assert out.splitlines()[0].startswith(f"{src}: 4 sentences, beam 2 (1 with an empty source")
    assert out.splitlines()[1:] == split_out.splitlines()[1:]  # same scores and signatures
    assert "nrefs:1|case:mixed|eff:no|tok:13a" in out


@pytest.mark.parametrize(
    ("files", "options", "expected"),
    [
        ({"s.de": ["a", "b"], "r.en": ["A", "B", "C"]}, [], "{dir}/r.en, line 3 has no partner"),
        ({"s.de": ["a"]}, [], "corpus file not found: {dir}/r.en"),
        ({"s.de": ["a", "b \udcff"], "r.en": ["A", "B"]}, [], "{dir}/s.de, line 2: invalid UTF-8"),
        ({"s.de": ["a"], "r.en": ["A"]}, ["--split", "test"], "either --split or --src/--tgt"),
        ({"s.de": ["a"], "r.en": ["A"]}, ["--no-ref"], "--src and --tgt go together"),
        ({"s.de": ["", "\ufeff"], "r.en": ["A", ""]}, [], "no sentence pairs in {dir}/s.de (2"),
    ],
    ids=["line-counts", "missing", "utf8", "split-and-src", "src-alone", "no-pairs"],
)
def test_own_files_that_cannot_be_scored_are_one_line_errors(
    eval_run, capsys, tmp_path, files, options, expected
):
    for name, lines in files.items():
        data = "".join(f"{line}\n" for line in lines).encode("utf-8", "surrogateescape")
        (tmp_path / name).write_bytes(data)
    argv = ["evaluate", str(eval_run), "--src", str(tmp_path / "s.de")]
    argv += [] if "--no-ref" in options else ["--ref", str(tmp_path / "r.en")]
    argv += [o for o in options if o != "--no-ref"]
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert_one_line_error(err, "evaluate", expected.format(dir=tmp_path))


@pytest.mark.parametrize(
    ("test_de", "test_en", "detail"),
    [
        ([], [], ""),
        (["", "\u200b", "x"], ["a", "b", "\u200e"], " (3 lines, each with an empty side)"),
    ],
    ids=["no-lines", "all-empty"],
)
def test_a_split_without_sentence_pairs_is_a_one_line_error(
    tmp_path, capsys, test_de, test_en, detail
):
    folder = files_run(tmp_path, test_de, test_en)
    status, out, err = run(capsys, "evaluate", str(folder))
    assert status == 2 and out == ""
    assert_one_line_error(err, "evaluate", f"no sentence pairs in the test split{detail}")


@pytest.mark.parametrize("command", ["evaluate", "inspect"])
def test_a_run_without_test_files_says_what_to_score_instead(tmp_path, capsys, command):
    # a user corpus often comes as train + valid only; `attnkit evaluate RUN` (test by
    # default) said "the config's data section has no 'test' files" and no way on
    lines = (list(PAIRS), list(PAIRS.values()))
    split = {
        name: {
            "src": write_lines(tmp_path / f"{name}.de", lines[0]),
            "tgt": write_lines(tmp_path / f"{name}.en", lines[1]),
        }
        for name in ("train", "valid")
    }
    tok = WordTokenizer.train([*PAIRS, *PAIRS.values()])
    (tmp_path / "run").mkdir()
    folder = make_run(tmp_path / "run", tok, data={"toy": None, **split})
    status, out, err = run(capsys, command, str(folder))
    assert status == 2 and out == ""
    assert_one_line_error(
        err, command, "no test split (data.test): score your own files with --src FILE --tgt"
    )
    assert "--split valid" in err
    status, out, _ = run(capsys, command, str(folder), "--split", "valid")
    assert status == 0 and "valid" in out


def test_a_chinese_target_is_scored_with_sacrebleus_chinese_tokenizer(tmp_path, capsys):
    # the run's data.tgt_lang picks sacreBLEU's tokenizer, as `sacrebleu -l de-zh` does:
    # 13a read each unspaced Chinese line as one word
    refs = ["一个男人在走路。", "两只狗在跑。", "一个女人。", "猫。"]
    folder = files_run(tmp_path, TEST_DE, refs)
    config = folder / "config.yaml"
    config.write_text(config.read_text().replace("tgt_lang: en", "tgt_lang: zh"))
    hyps_path = tmp_path / "hyps.txt"
    status, out, err = run(capsys, "evaluate", str(folder), "--output", str(hyps_path))
    assert status == 0 and "Traceback" not in err
    hyps = hyps_path.read_text(encoding="utf-8").splitlines()
    expected = BLEU(tokenize="zh").corpus_score(hyps, [refs])
    bleu, _, lowered = out.splitlines()[1:]
    assert bleu.startswith(f"BLEU = {expected.score:.2f}  (") and "|tok:zh|" in bleu
    assert "|case:lc|" in lowered and "|tok:zh|" in lowered
