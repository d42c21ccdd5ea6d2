"""Ensemble decoding: the mean of the members' probabilities, step by step and over a
whole hypothesis; one member decodes as itself; mixed architectures; bad members."""

from __future__ import annotations

import pytest
import torch

from attnkit.cli import main
from attnkit.nmt.data.tokenizer import WordTokenizer
from attnkit.nmt.decoding.engine import TorchEngine
from attnkit.nmt.decoding.ensemble import Ensemble, load_ensemble
from attnkit.nmt.decoding.search import beam_search, greedy_decode
from attnkit.nmt.decoding.translate import translate_lines
from attnkit.nmt.runs.checkpoint import save_checkpoint
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.nmt.vocab_ids import BOS, EOS
from conftest_nmt import TOY_VOCAB, make_run, pad, random_sequences, tiny_model, tiny_transformer


def _members():
    return [
        tiny_model(embed_dim=16, hidden_size=16, seed=1, score="additive"),
        tiny_transformer(seed=2),
        tiny_model(
            embed_dim=16,
            hidden_size=16,
            seed=3,
            rnn="lstm",
            input_feeding=True,
            query_timing="current",
        ),
    ]


def _sources(n: int = 5):
    return pad(random_sequences(n, 2, 8, torch.Generator().manual_seed(0)))


def test_a_step_is_the_log_of_the_members_mean_probability_and_mean_attention():
    members = _members()
    src, src_lengths = _sources()
    ensemble = Ensemble(members)
    tokens = torch.full((src.shape[0],), BOS)
    with torch.no_grad():
        log_probs, weights, _ = ensemble.step(
            tokens,
            ensemble.initial_state(ensemble.encode(src, src_lengths)),
            ensemble.encode(src, src_lengths),
        )
        own = []
        for model in members:
            memory = model.encode(src, src_lengths)
            own.append(model.step(tokens, model.initial_state(memory), memory))
    probs = torch.stack([logits.softmax(-1) for logits, _, _ in own]).mean(0)  # (B, V)
    torch.testing.assert_close(log_probs, probs.log(), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(src.shape[0]))
    torch.testing.assert_close(weights, torch.stack([w for _, w, _ in own]).mean(0))


def test_a_beam_hypothesis_scores_the_mean_probability_of_its_tokens_under_teacher_forcing():
    members = _members()
    src, src_lengths = _sources()
    hypotheses = beam_search(Ensemble(members), src, src_lengths, beam_size=3, length_penalty=0.0)
    for i, hyp in enumerate(hypotheses):
        gold = [*hyp.tokens, EOS] if hyp.ended else hyp.tokens
        tgt_in = torch.tensor([[BOS, *gold[:-1]]])
        one = (src[i : i + 1, : src_lengths[i]], src_lengths[i : i + 1])
        with torch.no_grad():
            probs = torch.stack([model(*one, tgt_in)[0][0].softmax(-1) for model in members])
        expected = probs.mean(0)[torch.arange(len(gold)), gold].log().sum()  # sum_t log mean_m p_m
        assert hyp.log_prob == pytest.approx(float(expected), abs=1e-4)


@pytest.mark.parametrize("search", ["greedy", "beam"])
@pytest.mark.parametrize("build", [tiny_model, tiny_transformer])
def test_one_member_or_two_copies_decode_as_the_model_itself(search, build):
    model = build(embed_dim=16, hidden_size=16) if build is tiny_model else build()
    src, src_lengths = _sources()

    def decode(m):
        if search == "greedy":
            return greedy_decode(m, src, src_lengths)
        return beam_search(m, src, src_lengths, beam_size=4)

    alone = decode(model)
    for ensemble in (Ensemble([model]), Ensemble([model, model])):
        for mine, theirs in zip(decode(ensemble), alone, strict=True):
            assert mine.tokens == theirs.tokens
            assert mine.log_prob == pytest.approx(theirs.log_prob, abs=1e-5)
            torch.testing.assert_close(mine.weights, theirs.weights)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_decoding_leaves_the_eval_mode_members_in_eval_mode(search):
    # An Ensemble is built in train mode (nn.Module's default); the search used to
    # "restore" that mode onto every member, switching their dropout on afterwards.
    members = [tiny_model(dropout=0.5), tiny_transformer(dropout=0.5, attention_dropout=0.5)]
    src, src_lengths = _sources()
    ensemble = Ensemble(members)
    if search == "greedy":
        greedy_decode(ensemble, src, src_lengths)
    else:
        beam_search(ensemble, src, src_lengths, beam_size=3)
    assert [m.training for m in members] == [False, False]
    assert ensemble.training  # its own mode, as it was
    tgt_in = torch.full((src.shape[0], 3), BOS)
    for model in members:  # no dropout: the same logits twice
        torch.testing.assert_close(
            model(src, src_lengths, tgt_in)[0], model(src, src_lengths, tgt_in)[0]
        )


def test_beams_share_memory_only_when_every_member_can():
    rnn, transformer = tiny_model(), tiny_transformer()
    assert transformer.beams_share_memory and rnn.beams_share_memory
    assert Ensemble([transformer, rnn]).beams_share_memory
    unshared = tiny_model()
    unshared.beams_share_memory = False  # an architecture that needs a memory row per beam
    assert not Ensemble([transformer, unshared]).beams_share_memory


def test_the_step_limit_is_the_smallest_members():
    short, long, rnn = tiny_transformer(max_positions=8), tiny_transformer(), tiny_model()
    assert Ensemble([rnn, long, short]).max_target_len == 8
    assert Ensemble([rnn, rnn]).max_target_len is None


def test_members_must_share_vocabularies():
    with pytest.raises(ValueError, match=r"member 1 has src_vocab_size=15, member 0 12"):
        Ensemble([tiny_model(), tiny_model(vocab=TOY_VOCAB + 3)])
    with pytest.raises(ValueError, match="at least one member"):
        Ensemble([])


SENTENCES = ["ein Mann läuft", "eine Frau singt", "ein Hund", "der Mann singt laut"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs with the same tokenizer and other weights, and one with another tokenizer."""
    tok = WordTokenizer.train(SENTENCES)
    first = make_run(tmp_path_factory.mktemp("first"), tok)
    second = make_run(tmp_path_factory.mktemp("second"), tok)
    torch.manual_seed(7)
    weights = {k: torch.randn_like(v) for k, v in load_run(second).model.state_dict().items()}
    save_checkpoint(second, "best", weights, {})
    other = make_run(tmp_path_factory.mktemp("other"), WordTokenizer.train(SENTENCES[:2]))
    return first, second, other


def test_load_ensemble_reads_the_other_runs_and_refuses_another_tokenizer(runs):
    first, second, other = runs
    run = load_run(first)
    ensemble = load_ensemble(run, [second], checkpoint="best")
    assert ensemble.members[0] is run.model and len(ensemble.members) == 2
    for name, value in load_run(second).model.state_dict().items():
        assert torch.equal(ensemble.members[1].state_dict()[name], value), name
    with pytest.raises(ValueError, match=rf"{other}'s source tokenizer differs from {first}'s"):
        load_ensemble(run, [other], checkpoint="best")


def test_the_cli_decodes_with_the_ensemble(runs, capsys):
    first, second, _ = runs
    run = load_run(first)
    expected = TorchEngine(load_ensemble(run, [second], checkpoint="best"))
    together = translate_lines(run, SENTENCES, engine=expected, n_best=2)
    wanted = [t.text for t in together]
    alone = [t.text for t in translate_lines(run, SENTENCES)]
    assert wanted != alone  # the second member changes the translations
    # the weights are a mean of two models' softmaxes: the page must not read one softmax
    named = {t.weights_from for r in together for t in (r, *r.hypotheses) if t.weights is not None}
    assert named == {"search, the mean of 2 models' views"}
    assert main(["translate", str(first), *SENTENCES, "--ensemble", str(second)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == wanted
    assert f"ensemble of 2 runs: {first} (best), {second} (best)" in captured.err


def test_the_cli_names_the_option_of_a_bad_ensemble_folder_and_warns_of_repeats(
    runs, tmp_path, capsys
):
    first, second, _ = runs
    assert main(["translate", str(first), "ein Hund", "--ensemble", str(tmp_path)]) == 2
    assert f"--ensemble {tmp_path}: {tmp_path} has no config.yaml" in capsys.readouterr().err
    assert main(["translate", str(first), "ein Hund", "--ensemble", str(first)]) == 0
    err = capsys.readouterr().err
    assert f"--ensemble {first} is already in the ensemble: its model counts twice" in err


def test_the_cli_refuses_an_ensemble_for_another_engine(runs, capsys):
    first, second, _ = runs
    args = ["evaluate", str(first), "--ensemble", str(second), "--engine", "ctranslate2"]
    assert main(args) == 2
    assert "--ensemble decodes with attnkit's own search" in capsys.readouterr().err


def test_under_bf16_autocast_a_step_is_float32_and_near_the_float32_step():
    members = _members()
    src, src_lengths = _sources()
    ensemble = Ensemble(members)
    tokens = torch.full((src.shape[0],), BOS)

    def first_step():
        memory = ensemble.encode(src, src_lengths)
        return ensemble.step(tokens, ensemble.initial_state(memory), memory)

    with torch.no_grad():
        exact = first_step()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = first_step()
    assert low[0].dtype == low[1].dtype == torch.float32
    torch.testing.assert_close(low[0].exp().sum(-1), torch.ones(src.shape[0]))
    # bf16 keeps 8 significant bits: probabilities and weights within a few hundredths
    torch.testing.assert_close(low[0].exp(), exact[0].exp(), atol=2e-2, rtol=0)
    torch.testing.assert_close(low[1], exact[1], atol=2e-2, rtol=0)


def test_an_rnn_run_with_a_transformer_member_cuts_sources_to_the_members_positions(
    runs, tmp_path, capsys
):
    """The first run (an RNN) has no position table, the member (a Transformer) has one:
    a longer source is truncated with a warning, as the Transformer alone truncates it,
    instead of failing on its positions and ending the whole translation."""
    first, _, _ = runs
    tok = load_run(first).src_tok
    model = {"arch": "transformer", "d_model": 8, "heads": 2, "encoder_layers": 1}
    model |= {"decoder_layers": 1, "ff_dim": 8, "max_positions": 6}
    short = make_run(tmp_path, tok, model=model)
    long = " ".join(SENTENCES)  # 12 words
    assert main(["translate", str(first), long, "ein Hund", "--ensemble", str(short)]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2
    assert "line 1: 12 tokens, truncated to the model's limit of 5" in captured.err
    run = load_run(first)
    engine = TorchEngine(load_ensemble(run, [short], checkpoint="best"))
    assert engine.max_source_len == 6
    found = translate_lines(run, [long], engine=engine)
    assert found[0].truncated_from == 12 and len(found[0].src_ids) == 5
