"""RNNTranslator: config validation, packing, teacher-forced == step-by-step, gradients, errors."""

from __future__ import annotations

import itertools

import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load_file, save_file

from attnkit.nmt.models.rnn import RNNConfig, RNNTranslator
from attnkit.nmt.models.rnn.encoder import RNNEncoder
from attnkit.nmt.vocab_ids import BOS, EOS, PAD
from conftest_nmt import (
    TOY_VOCAB,
    Encode,
    assert_per_sentence_gradients,
    pad,
    step_by_step,
    tiny_model,
)

SCORES = ("dot", "scaled_dot", "general", "concat", "additive")
TIMINGS = (("previous", False), ("current", False), ("current", True))


@pytest.fixture
def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three sentences of different lengths, in no particular order."""
    src, src_lengths = pad([[4, 5, 6], [7, 8, 9, 10, 11], [5, 5]])
    tgt_in, _ = pad([[BOS, 6, 5, 4], [BOS, 11, 10, 9, 8, 7], [BOS, 5]])
    return src, src_lengths, tgt_in


# ---------------------------------------------------------------- config


def test_config_defaults_and_unknown_key() -> None:
    config = RNNConfig()
    assert (config.query_timing, config.score, config.rnn) == ("previous", "additive", "gru")
    with pytest.raises(ValidationError, match="hiden_size"):
        RNNConfig(hiden_size=3)


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"query_timing": "previous", "input_feeding": True}, "input_feeding"),
        ({"score": "dot", "attention_hidden": 8}, "attention_hidden"),
        ({"dropout": 1.0}, "dropout"),
        ({"hidden_size": 0}, "hidden_size"),
        ({"score": "scaled"}, "score"),
    ],
)
def test_config_rejects_bad_values(fields: dict, needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        RNNConfig(**fields)


# ---------------------------------------------------------------- encoder


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_encoder_packing_makes_a_sentence_independent_of_its_batch(rnn: str) -> None:
    torch.manual_seed(0)
    encoder = RNNEncoder(TOY_VOCAB, 8, 6, num_layers=2, rnn=rnn).eval()
    src, lengths = pad([[4, 5, 6], [7, 8, 9, 10, 11], [5, 5]])
    together = encoder(src, lengths)
    for i, n in enumerate(lengths.tolist()):
        alone = encoder(src[i : i + 1, :n], lengths[i : i + 1])
        torch.testing.assert_close(together.states[i, :n], alone.states[0], atol=1e-6, rtol=0)
        torch.testing.assert_close(together.final_hidden[i], alone.final_hidden[0])
        assert torch.all(together.states[i, n:] == 0)
    # final = [forward state at the last real token; backward state at the first]
    d = encoder.hidden_size
    last = lengths - 1
    forward_last = together.states[torch.arange(3), last, :d]  # (B, D)
    torch.testing.assert_close(together.final_hidden[:, :d], forward_last)
    torch.testing.assert_close(together.final_hidden[:, d:], together.states[:, 0, d:])
    assert (together.final_cell is None) == (rnn == "gru")


# ---------------------------------------------------------------- decoder paths


@pytest.mark.parametrize(
    ("rnn", "timing", "score"), list(itertools.product(("gru", "lstm"), TIMINGS, SCORES))
)
def test_teacher_forced_pass_equals_step_by_step_decoding(rnn, timing, score, batch) -> None:
    query_timing, input_feeding = timing
    model = tiny_model(
        rnn=rnn,
        score=score,
        query_timing=query_timing,
        input_feeding=input_feeding,
        encoder_layers=2,
        decoder_layers=2,
    )
    src, src_lengths, tgt_in = batch
    logits, weights = model(src, src_lengths, tgt_in)
    assert logits.shape == (3, 6, TOY_VOCAB + 1) and weights.shape == (3, 6, 5)

    step_logits, step_weights, _ = step_by_step(model, src, src_lengths, tgt_in)
    torch.testing.assert_close(step_logits, logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(step_weights, weights, atol=1e-5, rtol=0)


@pytest.mark.parametrize("timing", TIMINGS)
def test_weights_sum_to_one_over_real_source_tokens_only(timing, batch) -> None:
    model = tiny_model(query_timing=timing[0], input_feeding=timing[1])
    src, src_lengths, tgt_in = batch
    _, weights = model(src, src_lengths, tgt_in)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 6))
    real = (torch.arange(5)[None, :] < src_lengths[:, None])[:, None, :]  # (B, 1, S)
    assert torch.all(weights.masked_select(~real.expand_as(weights)) == 0)


@pytest.mark.parametrize("timing", TIMINGS)
def test_key_projection_runs_once_per_forward_pass(timing, batch, monkeypatch) -> None:
    model = tiny_model(query_timing=timing[0], input_feeding=timing[1])
    score = model.decoder.attention.score
    calls = []
    original = score.prepare_keys
    monkeypatch.setattr(score, "prepare_keys", lambda keys: calls.append(1) or original(keys))
    model(*batch)
    assert len(calls) == 1


def test_dot_score_projects_encoder_states_to_the_decoder_width(batch) -> None:
    model = tiny_model(score="dot")
    assert model.decoder.key_proj.weight.shape == (6, 12)  # (D, 2D)
    enc = model.encode(*batch[:2])
    assert enc.keys.shape == (3, 5, 6) and enc.states.shape == (3, 5, 12)
    assert tiny_model(score="general").decoder.key_proj is None


def test_projected_dot_score_equals_general_score_with_copied_weights(batch) -> None:
    dot, general = tiny_model(score="dot"), tiny_model(score="general", seed=1)
    weights = dict(dot.state_dict())
    weights["decoder.attention.score.weight.weight"] = weights.pop("decoder.key_proj.weight")
    general.load_state_dict(weights)
    torch.testing.assert_close(general(*batch)[0], dot(*batch)[0])


def test_scaled_dot_score_divides_the_projected_dot_by_sqrt_d(batch) -> None:
    dot, scaled = tiny_model(score="dot"), tiny_model(score="scaled_dot", seed=1)
    scaled.load_state_dict(dot.state_dict())
    enc = dot.encode(*batch[:2])
    query = torch.randn(3, 4, 6)  # (B, Tq, D)
    raw = dot.decoder.attention.score(query, enc.keys)
    torch.testing.assert_close(scaled.decoder.attention.score(query, enc.keys), raw / 6**0.5)


def test_prepare_zeroes_the_padding_states_once_so_steps_need_not(batch) -> None:
    """The decoder promises its attention layer zero values at padding: even NaN
    there from an encoder would not reach a step's output."""
    model = tiny_model(query_timing="current")
    src, src_lengths, tgt_in = batch
    encoded = model.encoder(src, src_lengths)
    padding = torch.arange(5)[None, :] >= src_lengths[:, None]  # (B, S)
    poisoned = encoded._replace(states=encoded.states.masked_fill(padding[..., None], float("nan")))
    memory = model.decoder.prepare(poisoned, src_lengths)
    assert torch.all(memory.states[padding] == 0)
    logits, weights, _ = model.step(tgt_in[:, 0], model.initial_state(memory), memory)
    clean = model.encode(src, src_lengths)
    expected_logits, expected_weights, _ = model.step(
        tgt_in[:, 0], model.initial_state(clean), clean
    )
    torch.testing.assert_close(logits, expected_logits)
    torch.testing.assert_close(weights, expected_weights)


def test_index_select_expands_encoder_output_for_beams(batch) -> None:
    model = tiny_model(rnn="lstm", query_timing="current", input_feeding=True)
    src, src_lengths, tgt_in = batch
    enc = model.encode(src, src_lengths)
    index = torch.tensor([2, 2, 0])
    picked = enc.index_select(index)
    logits, weights, _ = model.step(tgt_in[index, 0], model.initial_state(picked), picked)
    full_logits, full_weights, _ = model.step(tgt_in[:, 0], model.initial_state(enc), enc)
    torch.testing.assert_close(logits, full_logits[index])
    torch.testing.assert_close(weights, full_weights[index])


def test_teacher_forcing_zero_ignores_gold_tokens_after_bos(batch) -> None:
    model = tiny_model()
    src, src_lengths, tgt_in = batch
    other = tgt_in.clone()
    other[:, 1:] = torch.randint(4, TOY_VOCAB, other[:, 1:].shape, generator=torch.manual_seed(1))
    a, wa = model(src, src_lengths, tgt_in, teacher_forcing=0.0)
    b, wb = model(src, src_lengths, other, teacher_forcing=0.0)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(wa, wb)
    gold, _ = model(src, src_lengths, tgt_in)
    assert not torch.allclose(a, gold)


# ---------------------------------------------------------------- training


@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_gradients_reach_every_parameter(rnn, timing, batch) -> None:
    model = tiny_model(rnn=rnn, query_timing=timing[0], input_feeding=timing[1]).train()
    src, src_lengths, tgt_in = batch
    logits, _ = model(src, src_lengths, tgt_in)
    tgt_out = torch.roll(tgt_in, -1, dims=1)
    tgt_out[:, -1] = EOS
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt_out.flatten()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_tied_output_embeddings_use_the_embedding_matrix(batch, tmp_path) -> None:
    model = tiny_model(tie_output_embeddings=True)
    keys = set(model.state_dict())
    assert "decoder.output.weight" not in keys and "decoder.output_bias" in keys
    src, src_lengths, tgt_in = batch
    before, _ = model(src, src_lengths, tgt_in)
    with torch.no_grad():
        model.decoder.embedding.weight[7] += 1.0
    after, _ = model(src, src_lengths, tgt_in)
    assert not torch.allclose(before[..., 7], after[..., 7])


@pytest.mark.parametrize("tie", [False, True])
def test_state_dict_saves_to_safetensors_and_reloads(tie, batch, tmp_path) -> None:
    model = tiny_model(rnn="lstm", tie_output_embeddings=tie, score="dot")
    save_file(model.state_dict(), tmp_path / "w.safetensors")
    fresh = tiny_model(rnn="lstm", tie_output_embeddings=tie, score="dot", seed=1)
    fresh.load_state_dict(load_file(tmp_path / "w.safetensors"))
    torch.testing.assert_close(fresh(*batch)[0], model(*batch)[0], atol=0, rtol=0)


# ---------------------------------------------------------------- errors


def test_bad_inputs_raise_value_errors_naming_the_argument(batch) -> None:
    model = tiny_model()
    src, src_lengths, tgt_in = batch
    cases = [
        ((src[0], src_lengths, tgt_in), "src must"),
        ((src.float(), src_lengths, tgt_in), "src must"),
        ((src, src_lengths[:2], tgt_in), "src_lengths has B=2"),
        ((src, torch.tensor([3, 0, 2]), tgt_in), "src_lengths must lie in"),
        ((src, torch.tensor([3, 6, 2]), tgt_in), "src_lengths must lie in"),
        ((src, src_lengths, tgt_in[:2]), "tgt_in must be"),
        ((src, src_lengths, tgt_in[:, :0]), "tgt_in must be"),
        ((src, src_lengths, tgt_in + TOY_VOCAB), "tgt_in holds token ids"),
        ((src + TOY_VOCAB, src_lengths, tgt_in), "src holds token ids"),
    ]
    for args, needle in cases:
        with pytest.raises(ValueError, match=needle):
            model(*args)
    with pytest.raises(ValueError, match="teacher_forcing"):
        model(src, src_lengths, tgt_in, teacher_forcing=1.5)
    enc = model.encode(src, src_lengths)
    with pytest.raises(ValueError, match="prev_tokens"):
        model.step(tgt_in[:2, 0], model.initial_state(enc), enc)
    with pytest.raises(ValueError, match="state has B=2"):
        model.step(tgt_in[:, 0], model.initial_state(enc).index_select(torch.tensor([0, 1])), enc)
    beams = tgt_in[:, 0].repeat_interleave(2)  # two beams a sentence may share the memory
    with pytest.raises(ValueError, match=r"state has B=3 rows but prev_tokens has 6 \(memory: 3"):
        model.step(beams, model.initial_state(enc), enc)


def test_vocabulary_too_small_is_rejected() -> None:
    with pytest.raises(ValueError, match="tgt_vocab_size"):
        RNNTranslator(RNNConfig(), 10, 4)


@pytest.mark.parametrize(
    "settings",
    [{"query_timing": "previous"}, {"query_timing": "current"}, {"rnn": "lstm"}],
    ids=["gru-previous", "gru-current", "lstm"],
)
def test_torch_func_grad_jvp_and_forward_ad_agree_with_backward(settings):
    # The GRU and the Bahdanau loop are autograd Functions without setup_context or jvp:
    # torch.func.grad / jvp of the model stopped with a RuntimeError asking for
    # setup_context, and forward-mode AD with "You must implement the jvp function".
    # An LSTM over sentences of several lengths runs over a packed sequence:
    # torch.func.grad stopped with "Cannot access data pointer of Tensor that doesn't
    # have storage", forward-mode AD in _pack_padded_sequence and mkldnn_rnn_layer.
    import torch.autograd.forward_ad as fwAD

    model = tiny_model(**settings).double()
    src, src_lengths = pad([[4, 5, 6, 7], [8, 9]])
    tgt_in = torch.tensor([[BOS, 4, 5, 6], [BOS, 8, 9, 0]])
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p):
        logits, _ = torch.func.functional_call(model, p, (src, src_lengths, tgt_in))
        return logits.square().mean()

    eager = loss(dict(model.named_parameters()))
    eager.backward()
    grads = torch.func.grad(loss)(params)
    for name, param in model.named_parameters():
        torch.testing.assert_close(grads[name], param.grad, rtol=1e-10, atol=1e-12)
    torch.manual_seed(3)
    tangents = {k: torch.randn_like(v) for k, v in params.items()}
    for name in ("encoder.embedding.weight", "decoder.embedding.weight"):
        tangents[name][PAD] = 0  # padding_idx: backward leaves that row's gradient 0
    slope = sum((grads[k] * tangents[k]).sum() for k in params)
    value, jvp = torch.func.jvp(loss, (params,), (tangents,))
    torch.testing.assert_close(value, eager.detach(), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(jvp, slope, rtol=1e-10, atol=1e-12)
    with fwAD.dual_level():
        dual = {k: fwAD.make_dual(v, tangents[k]) for k, v in params.items()}
        torch.testing.assert_close(fwAD.unpack_dual(loss(dual)).tangent, slope)


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_torch_export_of_encode_with_a_dynamic_batch_runs_other_batches(rnn):
    # The GRU branched on the lengths' values and ran an autograd Function writing into
    # buffers, the LSTM packed its input by the lengths: export stopped with
    # GuardOnDataDependentSymNode (Eq(u0, 1)), then "addmm(): functions with out=...".
    model = tiny_model(rnn=rnn, encoder_layers=2)

    src, src_lengths = pad([[4, 5, 6, 7], [8, 9, 10]])
    batch = torch.export.Dim("B", min=1, max=32)  # the source length is fixed: an unrolled loop
    exported = torch.export.export(
        Encode(model), (src, src_lengths), dynamic_shapes=({0: batch}, {0: batch})
    )
    other, other_lengths = pad([[4, 5, 6, 7], [8, 9], [5], [6, 7, 8]])
    got, want = exported.module()(other, other_lengths), model.encode(other, other_lengths)
    for name in ("states", "keys", "prepared_keys", "mask", "lengths"):
        torch.testing.assert_close(getattr(got, name), getattr(want, name), msg=name)
    torch.testing.assert_close(got.initial.hidden, want.initial.hidden)


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_per_sentence_gradients_with_vmap_of_grad(rnn):
    # torch.func's per-sample gradients: the input checks, the padding mask and the GRU
    # read the lengths' values on the host, which vmap cannot give (RuntimeError: vmap:
    # It looks like you're ... calling .item() on a Tensor).
    assert_per_sentence_gradients(tiny_model(rnn=rnn).double(), rtol=1e-10)
