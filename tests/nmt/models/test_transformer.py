"""Transformer translator: layer parity with torch.nn, cached step == teacher-forced pass,
masks (causal zeros, padded keys), per-source projection once, config errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnkit import MultiHeadAttention, invert_mask, padding_mask
from attnkit.nmt.config import RunConfig
from attnkit.nmt.models.transformer import TransformerConfig, TransformerTranslator
from attnkit.nmt.models.transformer.embedding import sinusoids
from attnkit.nmt.models.transformer.layers import DecoderLayer, EncoderLayer
from attnkit.nmt.vocab_ids import BOS, PAD
from conftest_nmt import (
    TOY_VOCAB,
    Encode,
    assert_per_sentence_gradients,
    pad,
    random_sequences,
    step_by_step,
    tiny_model,
    tiny_transformer,
    toy_batch,
)

D, H, F = 16, 4, 32


def _copy_from_torch(mine: nn.Module, theirs: nn.Module) -> None:
    """Load a torch.nn.Transformer{Encoder,Decoder}Layer's weights into ours."""
    for name in ("self_attn", "multihead_attn"):
        if hasattr(theirs, name):
            converted = MultiHeadAttention.from_torch(getattr(theirs, name))
            getattr(mine, name).load_state_dict(converted.state_dict())
    mine.ff.linear1.load_state_dict(theirs.linear1.state_dict())
    mine.ff.linear2.load_state_dict(theirs.linear2.state_dict())
    for name in ("norm1", "norm2", "norm3"):
        if hasattr(theirs, name):
            getattr(mine, name).load_state_dict(getattr(theirs, name).state_dict())


def _layer_kwargs(norm_first: bool) -> dict:
    return {"dropout": 0.1, "attention_dropout": 0.1, "norm_first": norm_first}


def _torch_kwargs(norm_first: bool) -> dict:
    return {"dim_feedforward": F, "dropout": 0.1, "batch_first": True, "norm_first": norm_first}


@pytest.mark.parametrize("norm_first", [True, False])
def test_encoder_layer_equals_torch_encoder_layer_with_copied_weights(norm_first):
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(D, H, **_torch_kwargs(norm_first)).eval()
    mine = EncoderLayer(D, H, F, **_layer_kwargs(norm_first)).eval()
    _copy_from_torch(mine, theirs)
    x = torch.randn(3, 7, D)
    lengths = torch.tensor([7, 4, 1])
    mask = padding_mask(lengths, 7)  # (B, S), True = real
    with torch.no_grad():
        expected = theirs(x, src_key_padding_mask=invert_mask(mask))
        got, _ = mine(x, mask)
    real = mask[..., None].expand_as(got)
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_layer_equals_torch_decoder_layer_with_copied_weights(norm_first):
    torch.manual_seed(1)
    theirs = nn.TransformerDecoderLayer(D, H, **_torch_kwargs(norm_first)).eval()
    mine = DecoderLayer(D, H, F, **_layer_kwargs(norm_first)).eval()
    _copy_from_torch(mine, theirs)
    y, memory = torch.randn(3, 5, D), torch.randn(3, 6, D)
    src_mask = padding_mask(torch.tensor([6, 2, 4]), 6)
    causal = nn.Transformer.generate_square_subsequent_mask(5)  # float, -inf above diagonal
    with torch.no_grad():
        expected = theirs(y, memory, tgt_mask=causal, memory_key_padding_mask=invert_mask(src_mask))
        got, _ = mine(y, memory, src_mask)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


VARIANTS = [
    {},
    {"norm_first": False, "positions": "learned"},
    {"decoder_layers": 3, "alignment_layer": 0},
]


def _batch(seed: int = 0):
    return toy_batch("reverse", 5, torch.Generator().manual_seed(seed), min_len=1, max_len=7)


@pytest.mark.parametrize("variant", VARIANTS)
def test_cached_step_by_step_decoding_equals_the_teacher_forced_pass(variant):
    model = tiny_transformer(**variant)
    src, src_lengths, tgt_in, _ = _batch()
    with torch.no_grad():
        logits, weights = model(src, src_lengths, tgt_in)
        step_logits, step_weights, state = step_by_step(model, src, src_lengths, tgt_in)
    torch.testing.assert_close(step_logits, logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(step_weights, weights, atol=1e-5, rtol=0)
    assert state.steps == tgt_in.shape[1]
    assert all(cache.length == tgt_in.shape[1] for cache in state.caches)


def test_k_rows_per_sentence_read_one_memory_row_as_if_it_were_repeated():
    # Beam search hands the Transformer one memory row per sentence for its k
    # beams (rows r read sentence r // k); each row must decode exactly as it
    # would against its own copy of the memory.
    model, k = tiny_transformer(), 3
    src, src_lengths, tgt_in, _ = _batch()
    rows = torch.arange(src.shape[0]).repeat_interleave(k)
    beam = (torch.arange(rows.numel()) % k)[:, None]
    # the beams of one sentence feed different tokens
    tgt_rows = torch.where(beam > 0, (tgt_in[rows] + beam) % TOY_VOCAB, tgt_in[rows])
    with torch.no_grad():
        memory = model.encode(src, src_lengths)
        shared, repeated = model.initial_state(memory), model.initial_state(memory)
        for t in range(tgt_rows.shape[1]):
            logits, weights, shared = model.step(tgt_rows[:, t], shared, memory)
            want_logits, want_weights, repeated = model.step(
                tgt_rows[:, t], repeated, memory.index_select(rows)
            )
            torch.testing.assert_close(logits, want_logits, atol=1e-5, rtol=0)
            torch.testing.assert_close(weights, want_weights, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"prev_tokens .*B=5 or a multiple of it"):
        model.step(tgt_rows[:7, 0], model.initial_state(memory), memory)


def test_each_step_attends_over_the_cache_and_projects_one_new_position(monkeypatch):
    model = tiny_transformer()
    src, src_lengths, tgt_in, _ = _batch()
    widths = []
    attn = model.decoder_layers[0].self_attn
    original = attn.k_proj.forward
    monkeypatch.setattr(attn.k_proj, "forward", lambda x: widths.append(x.shape[1]) or original(x))
    with torch.no_grad():
        step_by_step(model, src, src_lengths, tgt_in)
    assert widths == [1] * tgt_in.shape[1]  # O(t) per step: no recomputation of the prefix


def test_cross_attention_keys_are_projected_once_per_source(monkeypatch):
    model = tiny_transformer()
    src, src_lengths, tgt_in, _ = _batch()
    calls = []
    for layer in model.decoder_layers:
        original = layer.multihead_attn.k_proj.forward
        monkeypatch.setattr(
            layer.multihead_attn.k_proj,
            "forward",
            lambda x, original=original: calls.append(x.shape) or original(x),
        )
    with torch.no_grad():
        step_by_step(model, src, src_lengths, tgt_in)
    assert len(calls) == len(model.decoder_layers)  # in encode(), none per step


def test_decoding_passes_the_mask_its_cross_caches_were_zeroed_with(monkeypatch):
    # Each step hands the cross-attention the very mask that zeroed its cached
    # padding (KVCache.kept), so the check for a mask allowing more keys is skipped.
    from attnkit.attention import multihead

    model = tiny_transformer()
    src, src_lengths, tgt_in, _ = _batch()
    same = []
    original = multihead._check_zeroed_keys

    def spy(cache, key_padding_mask, resolved):
        same.append(cache.kept is not None and key_padding_mask is cache.kept)
        original(cache, key_padding_mask, resolved)

    monkeypatch.setattr(multihead, "_check_zeroed_keys", spy)
    with torch.no_grad():
        step_by_step(model, src, src_lengths, tgt_in)
    assert len(same) == tgt_in.shape[1] * len(model.decoder_layers) and all(same)


def test_attention_maps_hold_every_layer_and_head_with_exact_zeros():
    model = tiny_transformer(decoder_layers=3)
    src, src_lengths, tgt_in, _ = _batch(seed=3)
    with torch.no_grad():
        maps = model.attention_maps(src, src_lengths, tgt_in)
        _, weights = model(src, src_lengths, tgt_in)
    b, s, t = src.shape[0], src.shape[1], tgt_in.shape[1]
    assert maps.cross.shape == (b, 3, H, t, s)
    assert maps.encoder.shape == (b, 2, H, s, s)
    assert maps.decoder.shape == (b, 3, H, t, t)
    torch.testing.assert_close(maps.cross[:, -1].mean(1), weights, atol=1e-6, rtol=0)
    above = torch.ones(t, t, dtype=torch.bool).triu(1)
    assert (maps.decoder[..., above] == 0).all()
    padded = ~padding_mask(src_lengths, s)  # (B, S)
    assert (maps.cross.permute(0, 4, 1, 2, 3)[padded] == 0).all()
    assert (maps.encoder.permute(0, 4, 1, 2, 3)[padded] == 0).all()
    real_rows = maps.cross.sum(-1)
    torch.testing.assert_close(real_rows, torch.ones_like(real_rows), atol=1e-5, rtol=0)


def _full_context_cross(model, src, src_lengths, tgt_in, layer: int = 0):
    with torch.no_grad():
        return model.attention_maps(src, src_lengths, tgt_in, full_context=True).cross[:, layer]


def test_full_context_reads_later_target_tokens_and_never_padding():
    model = tiny_transformer(decoder_layers=2).eval()
    src, src_lengths, tgt_in, _ = _batch(seed=4)
    row = int((tgt_in != 0).sum(1).argmax())  # the longest target: no padding in it
    src, src_lengths, tgt_in = src[row : row + 1], src_lengths[row : row + 1], tgt_in[row : row + 1]
    changed = tgt_in.clone()
    changed[0, -1] = changed[0, -1] % (TOY_VOCAB - 4) + 4  # another real token, last position
    assert not torch.equal(changed, tgt_in)
    with torch.no_grad():
        causal = [model.attention_maps(src, src_lengths, t).cross[:, 1] for t in (tgt_in, changed)]
    full = [_full_context_cross(model, src, src_lengths, t, layer=1) for t in (tgt_in, changed)]
    torch.testing.assert_close(causal[0][..., :-1, :], causal[1][..., :-1, :], atol=0, rtol=0)
    assert (full[0][..., 0, :] - full[1][..., 0, :]).abs().max() > 1e-4  # row 0 saw the change
    maps = model.attention_maps(src, src_lengths, tgt_in, full_context=True)
    assert (maps.decoder[..., 0, 1:] > 0).all()  # self-attention past the diagonal
    # padding a target changes nothing: PAD positions are masked as keys
    padded = torch.cat([tgt_in, torch.zeros(1, 3, dtype=tgt_in.dtype)], dim=1)
    torch.testing.assert_close(
        _full_context_cross(model, src, src_lengths, padded)[..., : tgt_in.shape[1], :],
        _full_context_cross(model, src, src_lengths, tgt_in),
        atol=1e-6,
        rtol=0,
    )


def test_the_supervised_full_context_weights_are_the_full_context_maps():
    model = tiny_transformer(decoder_layers=3).eval()
    src, src_lengths, tgt_in, _ = _batch(seed=5)
    with torch.no_grad():
        logits, weights = model(src, src_lengths, tgt_in, supervised_layer=1, full_context=True)
        causal_logits, _ = model(src, src_lengths, tgt_in)
    torch.testing.assert_close(weights, _full_context_cross(model, src, src_lengths, tgt_in, 1))
    torch.testing.assert_close(logits, causal_logits)  # the translation keeps the causal pass
    with pytest.raises(ValueError, match="full_context needs supervised_layer"):
        model(src, src_lengths, tgt_in, full_context=True)


def test_full_context_needs_decoder_self_attention():
    model = tiny_model()  # an RNN
    src, src_lengths, tgt_in, _ = _batch()
    with pytest.raises(ValueError, match="full_context needs a decoder with self-attention"):
        model.attention_maps(src, src_lengths, tgt_in, full_context=True)


def test_shared_embeddings_are_one_matrix_for_source_target_and_output():
    config = TransformerConfig(d_model=D, heads=H, share_embeddings=True)
    model = TransformerTranslator(config, TOY_VOCAB, TOY_VOCAB)
    assert model.src_embedding is None
    names = [name for name, _ in model.named_parameters() if "embedding" in name]
    assert names == ["tgt_embedding.weight"]


def test_sinusoids_match_the_paper_formula():
    table = sinusoids(50, 8)
    pos, i = 17, 3
    assert table[pos, 2 * i].item() == pytest.approx(torch.tensor(pos / 10000 ** (2 * i / 8)).sin())
    assert table[pos, 2 * i + 1].item() == pytest.approx(
        torch.tensor(pos / 10000 ** (2 * i / 8)).cos()
    )


def test_embeddings_are_scaled_by_sqrt_d_model():
    model = tiny_transformer()
    tokens = torch.tensor([[5, 6]])
    with torch.no_grad():
        got = model._embed(model.tgt_embedding, model.tgt_positions, tokens, 3)
    expected = model.tgt_embedding(tokens) * D**0.5 + sinusoids(5, D)[3:5]
    torch.testing.assert_close(got, expected)


def test_a_model_built_on_meta_then_to_empty_and_loaded_has_the_sinusoid_table():
    # The table is a buffer no checkpoint holds: to_empty used to leave it uninitialised
    # memory that load_state_dict never filled, and the translations were garbage or NaN.
    model = tiny_transformer()
    src, src_lengths, tgt_in, _ = _batch()
    expected, _ = model(src, src_lengths, tgt_in)
    with torch.device("meta"):
        empty = TransformerTranslator(model.config, model.src_vocab_size, model.tgt_vocab_size)
    empty.to_empty(device="cpu").load_state_dict(model.state_dict())
    assert torch.equal(empty.tgt_positions.table, sinusoids(model.config.max_positions, D))
    torch.testing.assert_close(empty.eval()(src, src_lengths, tgt_in)[0], expected)


def test_a_half_then_float_model_has_the_float32_sinusoids_again():
    model = tiny_transformer().half().float()
    assert torch.equal(model.src_positions.table, sinusoids(model.config.max_positions, D))
    with torch.inference_mode():  # a table made in inference mode is rebuilt, not written to
        model = tiny_transformer()
    assert model.float().to("cpu").src_positions.table.dtype == torch.float32
    assert model.share_memory().src_positions.table.is_shared()  # kept, not rebuilt


def test_a_position_beyond_max_positions_is_a_clear_error():
    model = tiny_transformer(max_positions=8)
    src, src_lengths = pad(random_sequences(2, 9, 9, torch.Generator().manual_seed(0)))
    with pytest.raises(ValueError, match="max_positions=8"):
        model.encode(src, src_lengths)


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"d_model": 10, "heads": 4}, "not divisible by heads"),
        ({"alignment_layer": 3}, "alignment_layer=3"),
        ({"dropout": 1.0}, "dropout"),
    ],
)
def test_config_rejects_bad_values(fields, needle):
    with pytest.raises(ValueError, match=needle):
        TransformerConfig(**fields)


def test_shared_embeddings_need_one_vocabulary():
    with pytest.raises(ValueError, match="share_embeddings"):
        TransformerTranslator(TransformerConfig(share_embeddings=True), 10, 11)
    raw = {
        "data": {"toy": {"task": "copy"}},
        "tokenizer": {"joint": False},
        "model": {"arch": "transformer"},
    }
    with pytest.raises(ValueError, match="tokenizer.joint"):
        RunConfig.from_dict(raw)
    raw["model"]["share_embeddings"] = False
    assert RunConfig.from_dict(raw).model.arch == "transformer"


def test_unknown_architecture_names_the_choices():
    with pytest.raises(ValueError, match=r"model.arch: must be rnn \| transformer, got 'lstm'"):
        RunConfig.from_dict({"data": {"toy": {"task": "copy"}}, "model": {"arch": "lstm"}})


def test_gradients_reach_every_parameter():
    model = tiny_transformer(dropout=0.1, positions="learned").train()
    src, src_lengths, tgt_in, tgt_out = _batch()
    logits, _ = model(src, src_lengths, tgt_in, need_weights=False)
    nn.functional.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=0).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()]
    assert missing == []


def test_cached_decoder_step_compiles_without_graph_breaks():
    # aot_eager: the same graph capture as Inductor without its C++ compile time
    model = tiny_transformer()
    src, src_lengths, tgt_in, _ = _batch()
    with torch.no_grad():
        memory = model.encode(src, src_lengths)
        state = model.initial_state(memory)
        compiled = torch.compile(model.step, fullgraph=True, backend="aot_eager")
        for t in range(3):
            got = compiled(tgt_in[:, t], state, memory)
            want = model.step(tgt_in[:, t], state, memory)
            torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=0)
            torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=0)
            state = want[2]


def test_the_inner_encoder_compiles_into_one_graph_as_documented():
    # docs/architecture.md: compile _encode if you need one graph. padding_mask read the
    # lengths on the host (min and max) even with max_len given: fullgraph=True refused it.
    torch._dynamo.reset()
    model = tiny_transformer()
    src, src_lengths, _, _ = _batch()
    with torch.no_grad():
        got = torch.compile(model._encode, fullgraph=True, backend="aot_eager")(src, src_lengths)
        want = model._encode(src, src_lengths)
    torch.testing.assert_close(got.states, want.states, atol=1e-5, rtol=0)
    assert torch.equal(got.mask, want.mask)


def test_the_sinusoid_positions_repr_gives_their_sizes():
    model = tiny_transformer(max_positions=8)
    assert repr(model.src_positions) == f"Positions(sinusoidal, max_positions=8, dim={D})"


def test_a_model_built_on_meta_and_loaded_with_assign_gets_its_sinusoid_tables():
    # assign=True gives a meta model every tensor of the checkpoint, and the tables are in
    # none: the forward pass stopped with "Tensor on device meta is not on the expected device"
    model = tiny_transformer()
    src, src_lengths, tgt_in, _ = _batch()
    with torch.device("meta"):
        empty = TransformerTranslator(model.config, model.src_vocab_size, model.tgt_vocab_size)
    empty.load_state_dict(model.state_dict(), assign=True)
    assert torch.equal(empty.src_positions.table, sinusoids(model.config.max_positions, D))
    torch.testing.assert_close(
        empty.eval()(src, src_lengths, tgt_in)[0], model(src, src_lengths, tgt_in)[0]
    )


def test_torch_func_jvp_of_the_translator_agrees_with_backward():
    # The encoder's and decoder's attention went to PyTorch's fused CPU kernel, which has
    # no forward-mode derivative: torch.func.jvp stopped with NotImplementedError.
    model = tiny_transformer().double()
    src, src_lengths = pad([[4, 5, 6, 7], [8, 9]])
    tgt_in = torch.tensor([[BOS, 4, 5, 6], [BOS, 8, 9, PAD]])
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p):
        logits, _ = torch.func.functional_call(model, p, (src, src_lengths, tgt_in))
        return logits.square().mean()

    loss(dict(model.named_parameters())).backward()
    torch.manual_seed(3)
    tangents = {k: torch.randn_like(v) for k, v in params.items()}
    for name in ("src_embedding.weight", "tgt_embedding.weight"):
        tangents[name][PAD] = 0  # padding_idx: backward leaves that row's gradient 0
    slope = sum((model.get_parameter(k).grad * tangents[k]).sum() for k in params)
    _, jvp = torch.func.jvp(loss, (params,), (tangents,))
    torch.testing.assert_close(jvp, slope, rtol=1e-10, atol=1e-12)


def test_torch_export_of_encode_with_dynamic_batch_and_length_runs_other_shapes():
    # The input checks read the lengths' and ids' values (aminmax(...).tolist()): export
    # stopped with GuardOnDataDependentSymNode: Could not guard on data-dependent
    # expression u0 < 1 (in check_source).
    model = tiny_transformer()

    src, src_lengths = pad([[4, 5, 6, 7], [8, 9, 10]])
    batch, length = torch.export.Dim("B", min=1, max=32), torch.export.Dim("S", min=2, max=32)
    shapes = ({0: batch, 1: length}, {0: batch})
    exported = torch.export.export(Encode(model), (src, src_lengths), dynamic_shapes=shapes)
    other, other_lengths = pad([[4, 5], [8, 9, 6, 7, 8], [5, 6, 7]])
    got = exported.module()(other, other_lengths)
    want = model.encode(other, other_lengths)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_per_sentence_gradients_with_vmap_of_grad():
    # The input checks and the padding mask read the lengths' values on the host, which
    # vmap cannot give (RuntimeError: vmap: It looks like you're ... calling .item()).
    assert_per_sentence_gradients(tiny_transformer().double(), rtol=1e-9)
