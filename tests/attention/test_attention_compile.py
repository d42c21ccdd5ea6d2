"""The attention core compiles into one graph: no graph break, no host sync.

``torch.compile(fullgraph=True)`` raises on any graph break, and a host
synchronisation (``bool(tensor)``, ``.item()``) in forward is one. Each case
compiles a tiny instance and compares it with eager within 1e-5: masked softmax,
the functional SDPA (both paths), every score module inside ``Attention``,
and ``MultiHeadAttention`` (self/cross, causal with Tq = Tk and Tq != Tk,
the KV-cache path), in eval and training mode. Training mode runs with
dropout p = 0 for the comparison with eager; with p > 0 the compiled outputs
are checked against the weights they return.

Most cases use the ``aot_eager`` backend: it runs the full Dynamo capture and
AOT autograd, which is where graph breaks and host syncs show, without the
C++ compile of Inductor (about 25 s cold on 2 cores); one ``slow`` case runs
the default Inductor backend, forward only.
"""

import pytest
import torch

from attnkit import Attention, KVCache, MultiHeadAttention, make_score, masked_softmax
from attnkit import scaled_dot_product_attention as sdpa
from attnkit.attention.scores import SCORES


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()  # each test compiles afresh: no cached graph hides a break
    yield
    torch._dynamo.reset()


def compiled(fn, backend="aot_eager"):
    return torch.compile(fn, fullgraph=True, backend=backend)


def assert_same(got, want):
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def masks(tq, tk):
    """A bool keep-mask with a fully masked row and its float (-inf) form."""
    torch.manual_seed(1)
    keep = torch.rand(2, 1, tq, tk) > 0.4
    keep[:, :, 0] = False  # a fully masked query row
    keep[:, :, 1, 0] = True
    bias = torch.randn(2, 1, tq, tk).masked_fill(~keep, float("-inf"))
    return {"none": None, "bool": keep, "float": bias}


def test_masked_softmax_compiles_without_breaks():
    scores, keep = torch.randn(2, 3, 4), masks(3, 4)["bool"][:, 0]
    fn = lambda s, m: (masked_softmax(s, m),)  # noqa: E731
    assert_same(compiled(fn)(scores, keep), fn(scores, keep))


@pytest.mark.parametrize("tq", [4, 3])  # Tq = Tk and Tq != Tk
@pytest.mark.parametrize("mask", ["none", "bool", "float"])
def test_sdpa_compiles_with_masks_and_causal(tq, mask):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 2, tq, 4), torch.randn(2, 2, 4, 4), torch.randn(2, 2, 4, 3)
    m = masks(tq, 4)[mask]

    def fn(q, k, v, m):  # the fused and the weights path in one graph
        fused = sdpa(q, k, v, m, is_causal=True)
        return fused, *sdpa(q, k, v, m, is_causal=True, return_weights=True)

    assert_same(compiled(fn)(q, k, v, m), fn(q, k, v, m))


def test_sdpa_with_dropout_compiles_and_returns_the_weights_it_used():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 3)
    keep = masks(5, 6)["bool"][:1]
    fn = compiled(lambda q, k, v, m: sdpa(q, k, v, m, dropout_p=0.5, return_weights=True))
    out, weights = fn(q, k, v, keep)
    torch.testing.assert_close(out, weights @ v)
    assert torch.all(weights[~keep.expand_as(weights)] == 0) and (weights > 1).any()


@pytest.mark.parametrize("name", sorted(SCORES))
@pytest.mark.parametrize("training", [False, True])
def test_attention_with_every_score_compiles(name, training):
    torch.manual_seed(0)
    attend = Attention(make_score(name, 4), dropout=0.0).train(training)
    query, keys, keep = torch.randn(2, 3, 4), torch.randn(2, 5, 4), masks(3, 5)["bool"][:, 0]

    def fn(query, keys, keep):  # all steps (B, Tq, Dq) and one decoder step (B, Dq)
        return *attend(query, keys, mask=keep), *attend(query[:, 0], keys, mask=keep[:, 1])

    assert_same(compiled(fn)(query, keys, keep), fn(query, keys, keep))


def test_attention_with_dropout_compiles_and_returns_the_weights_it_used():
    attend = Attention(make_score("general", 4), dropout=0.5).train()
    query, keys = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    context, weights = compiled(attend)(query, keys)
    torch.testing.assert_close(context, weights @ keys)


def mha_inputs(tq, tk, mask):
    torch.manual_seed(0)
    x, memory = torch.randn(2, tq, 8), torch.randn(2, tk, 8)
    padding = torch.tensor([[True] * tk, [True] * (tk - 2) + [False] * 2])  # (B, Tk)
    attn_mask = None if mask == "none" else masks(tq, tk)[mask][0, 0]  # (Tq, Tk)
    return x, memory, dict(key_padding_mask=padding, attn_mask=attn_mask, is_causal=True)


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("mask", ["none", "bool", "float"])
def test_mha_cross_attention_compiles_with_masks_and_causal(training, mask):
    mha = MultiHeadAttention(8, 2, num_kv_heads=1, dropout=0.0).train(training)
    x, memory, kwargs = mha_inputs(3, 5, mask)  # Tq != Tk

    def fn(x, memory):  # the fused and the weights path in one graph
        fused, _ = mha(x, memory, **kwargs)
        return fused, *mha(x, memory, need_weights=True, **kwargs)

    assert_same(compiled(fn)(x, memory), fn(x, memory))


@pytest.mark.parametrize("training", [False, True])
def test_mha_self_attention_compiles_with_padding_and_causal(training):
    mha = MultiHeadAttention(8, 2).train(training)
    x, _, kwargs = mha_inputs(4, 4, "none")  # Tq = Tk
    assert_same(compiled(mha)(x, **kwargs), mha(x, **kwargs))


def test_mha_with_dropout_compiles_and_returns_the_weights_it_used():
    mha = MultiHeadAttention(8, 1, bias=False, dropout=0.5).train()
    x, memory, kwargs = mha_inputs(3, 5, "bool")
    fn = compiled(lambda x, m: mha(x, m, need_weights=True, **kwargs))
    output, weights = fn(x, memory)
    heads = weights @ mha.v_proj(memory)  # one head: (B, Tq, E)
    torch.testing.assert_close(output, mha.out_proj(heads))


@pytest.mark.parametrize("cross", [False, True])
def test_mha_cached_decoding_compiles(cross):
    mha = MultiHeadAttention(8, 2).eval()
    x, memory, _ = mha_inputs(3, 5, "none")
    padding = torch.ones(2, 5 if cross else 1, dtype=torch.bool)

    def step(x, cache, padding):
        key = memory if cross else None
        return mha(x, key, key_padding_mask=padding, cache=cache, need_weights=True)

    compiled_step, eager_cache, compiled_cache = compiled(step), KVCache(), KVCache()
    for t in range(3):
        if not cross:
            padding = torch.ones(2, t + 1, dtype=torch.bool)  # (B, Tk) grows with the cache
            padding[1, 0] = False
        want = step(x[:, t], eager_cache, padding)
        assert_same(compiled_step(x[:, t], compiled_cache, padding), want)
    assert compiled_cache.steps == eager_cache.steps == 3


@pytest.mark.slow
def test_mha_compiles_with_inductor():
    mha = MultiHeadAttention(8, 2).eval()
    x, memory, kwargs = mha_inputs(3, 5, "bool")

    def fn(x, memory):  # the fused and the weights path in one graph
        fused, _ = mha(x, memory, **kwargs)
        return fused, *mha(x, memory, need_weights=True, **kwargs)

    with torch.no_grad():  # forward only: the C++ compile of Inductor dominates
        assert_same(compiled(fn, "inductor")(x, memory), fn(x, memory))


def test_mha_padding_polarity_check_stays_out_of_the_compiled_graph(monkeypatch):
    from attnkit.attention import multihead

    monkeypatch.setattr(multihead, "_warned_all_padding", False)
    mha = MultiHeadAttention(8, 2).eval()
    x, padding = torch.randn(2, 3, 8), torch.tensor([[False] * 3, [True, True, False]])
    fn = lambda x: mha(x, key_padding_mask=padding)  # noqa: E731  row 0 masks every key
    out, _ = compiled(fn)(x)  # fullgraph: the eager-only check (a host sync) must not run
    assert torch.equal(out[0], torch.zeros(3, 8)) and not multihead._warned_all_padding
