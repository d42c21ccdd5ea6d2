"""inspect_run on a tiny untrained run: the figures are those of the attention that made
the outputs (checked against sentence-by-sentence forced decoding without padding)."""

import pytest
import sacrebleu
import torch

from attnkit.nmt.analysis.inspect import inspect_run
from attnkit.nmt.data.tokenizer import WordTokenizer
from attnkit.nmt.decoding.translate import translate_lines
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.nmt.vocab_ids import BOS, EOS
from conftest_nmt import make_run

# Different lengths, so the forced batch is padded; the blank line gets no figures.
SOURCES = ["s1 s2 s3", "", "s4 s5 s6 s7 s1", "s2"]
REFERENCES = ["s1 s2 s3", "s1", "s4 s5 s6 s7 s1", "s2"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tok = WordTokenizer.train(["s1 s2 s3 s4", "s5 s6 s7"])
    return load_run(make_run(tmp_path_factory.mktemp("inspect"), tok))


@pytest.fixture(scope="module")
def found(run):
    return inspect_run(run, SOURCES, REFERENCES)


def unpadded_coverage(run, source: str, output: str) -> torch.Tensor:
    """Each source word's summed attention over the output words, one sentence, no padding."""
    src = torch.tensor([[*run.src_tok.encode(source), EOS]])
    tgt_in = torch.tensor([[BOS, *run.tgt_tok.encode(output)]])
    with torch.no_grad():
        _, weights = run.model(src, torch.tensor([src.shape[1]]), tgt_in)  # (1, T, S)
    return weights[0, :-1, :-1].sum(0)  # </s> left out on both sides


def test_outputs_are_the_runs_translations_and_a_blank_source_gets_none(run, found):
    assert found.hypotheses == [t.text for t in translate_lines(run, SOURCES)]
    assert found.hypotheses[1] == ""
    assert found.summary.sentences == len(SOURCES)


def test_scores_are_sacrebleu_of_the_outputs(found):
    assert found.bleu.score == pytest.approx(
        sacrebleu.corpus_bleu(found.hypotheses, [REFERENCES]).score
    )
    assert found.chrf.score == pytest.approx(
        sacrebleu.corpus_chrf(found.hypotheses, [REFERENCES]).score
    )


def test_padding_in_the_forced_batch_gets_exactly_zero_mass(found):
    assert found.summary.padding_mass == 0.0


def test_coverage_is_one_value_per_source_word_as_without_padding(run, found):
    words = [s for s in SOURCES if s.strip()]
    assert found.coverage.shape == (sum(len(s.split()) for s in words),)
    pairs = zip(SOURCES, found.hypotheses, strict=True)
    expected = torch.cat([unpadded_coverage(run, s, h) for s, h in pairs if s.strip()])
    torch.testing.assert_close(found.coverage.sort().values, expected.sort().values)
    output_words = sum(len(h.split()) for h in found.hypotheses)
    assert float(found.coverage.sum()) <= output_words + 1e-5  # each word row sums to <= 1


def test_coverage_figures_summarise_the_coverage(found):
    cover, summary = found.coverage, found.summary
    assert summary.mean_coverage == pytest.approx(float(cover.mean()))
    assert summary.under_covered == pytest.approx(float((cover < 0.5).float().mean()))
    assert summary.over_covered == pytest.approx(float((cover > 1.5).float().mean()))


def test_a_long_source_is_truncated_with_a_warning(tmp_path):
    tok = WordTokenizer.train(["s1 s2 s3 s4", "s5 s6 s7"])
    run = load_run(make_run(tmp_path, tok, decode={"max_input_len": 3}))
    heard = []
    found = inspect_run(run, ["s1 s2 s3 s4 s5 s6", "s7"], ["s1", "s7"], warn=heard.append)
    assert len(heard) == 1
    assert found.coverage.shape == (3 + 1,)  # the 3 tokens kept, and "s7"


@pytest.mark.parametrize(
    ("sources", "references"), [(["s1"], ["s1", "s2"]), ([], [])], ids=["mismatch", "empty"]
)
def test_sources_and_references_must_match_and_not_be_empty(run, sources, references):
    with pytest.raises(ValueError, match="must match and not be empty"):
        inspect_run(run, sources, references)


def test_sources_that_are_all_blank_are_an_error_not_figures_of_nothing(run):
    with pytest.raises(ValueError, match="sources has 2 lines, all blank: nothing to inspect"):
        inspect_run(run, ["", " \u200b"], ["s1", "s2"])


def test_an_output_cut_at_the_position_table_is_measured_on_the_steps_search_took(tmp_path):
    # A Transformer with 6 positions emits at most 6 tokens; an output cut there has
    # no </s> step, and forcing one (a 7th decoder position) used to raise.
    tok = WordTokenizer.train(["s1 s2 s3 s4", "s5 s6 s7"])
    model = {"arch": "transformer", "d_model": 8, "heads": 2, "encoder_layers": 1,
             "decoder_layers": 1, "ff_dim": 8, "dropout": 0.0, "max_positions": 6}  # fmt: skip
    decode = {"beam_size": 1, "max_len_a": 1.0, "max_len_b": 10}
    run = load_run(make_run(tmp_path, tok, model=model, decode=decode))
    sources = ["s1 s2 s3 s4 s5", "s6 s7"]
    translations = translate_lines(run, sources)
    assert [len(t.tgt_pieces) for t in translations] == [6, 6]  # cut: no </s>
    found = inspect_run(run, sources, ["s1", "s6"])
    # every output step is a word's: its coverage sums all rows of search's own weights
    expected = torch.cat([t.weights[:, :-1].sum(0) for t in translations])  # </s> column out
    torch.testing.assert_close(found.coverage.sort().values, expected.sort().values)
