"""Property test: MultiHeadAttention fed through a KVCache, in random chunks and
after a beam-search reorder, gives the full (non-incremental) pass's outputs.

Self-attention (causal, key padding) and cross-attention (key padding), every
head layout (MHA, GQA, MQA), float32 and float64; rows with no allowed key are
exactly 0 on both sides.
"""

from itertools import pairwise

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit import KVCache, MultiHeadAttention

TOLERANCE = {torch.float32: 2e-5, torch.float64: 1e-10}


@st.composite
def decoding_case(draw):
    heads = draw(st.sampled_from([1, 2, 4]))
    t = draw(st.integers(1, 6))
    cuts = draw(st.lists(st.integers(1, t), max_size=3))
    return dict(
        heads=heads,
        kv_heads=draw(st.sampled_from([h for h in (1, 2, 4) if heads % h == 0])),
        head_dim=draw(st.integers(1, 3)),
        b=draw(st.integers(1, 3)),
        t=t,
        s=draw(st.integers(1, 5)),
        chunks=sorted({0, t, *cuts}),  # chunk boundaries, Tq >= 1 each
        cross=draw(st.booleans()),
        need_weights=draw(st.booleans()),
        dtype=draw(st.sampled_from(sorted(TOLERANCE, key=str))),
        seed=draw(st.integers(0, 2**16)),
    )


def module(case):
    torch.manual_seed(case["seed"])
    embed = case["heads"] * case["head_dim"]
    mha = MultiHeadAttention(embed, case["heads"], num_kv_heads=case["kv_heads"])
    mha = mha.to(case["dtype"]).eval()
    with torch.no_grad():  # nonzero biases, so that a zero output is not a given
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            proj.bias.normal_()
    return mha


def incremental(mha, case, x, memory, padding, cache):
    """The output of feeding ``x`` chunk by chunk; ``padding`` (B, Tk) as the full pass's."""
    outputs = []
    for start, end in pairwise(case["chunks"]):
        kw = dict(cache=cache, need_weights=case["need_weights"])
        if case["cross"]:
            kw.update(key_padding_mask=padding, key=memory if start == 0 else None)
        else:
            kw.update(key_padding_mask=padding[:, :end], is_causal=True)
        outputs.append(mha(x[:, start:end], **kw)[0])
    return torch.cat(outputs, dim=1)  # (B, T, E)


@settings(max_examples=60, deadline=None)
@given(decoding_case())
def test_cached_decoding_in_chunks_equals_the_full_pass(case):
    mha, dtype, tol = module(case), case["dtype"], TOLERANCE[case["dtype"]]
    gen = torch.Generator().manual_seed(case["seed"])
    b, t, embed = case["b"], case["t"], mha.embed_dim
    x = torch.randn(b, t, embed, generator=gen).to(dtype)
    memory = torch.randn(b, case["s"], embed, generator=gen).to(dtype) if case["cross"] else None
    tk = case["s"] if case["cross"] else t
    padding = torch.rand(b, tk, generator=gen) < 0.6  # (B, Tk), some rows fully padded
    full, _ = mha(x, memory, key_padding_mask=padding, is_causal=not case["cross"])
    cache = KVCache()
    steps = incremental(mha, case, x, memory, padding, cache)
    torch.testing.assert_close(steps, full, atol=tol, rtol=tol)
    allowed = padding[:, None, :].expand(b, t, tk)
    if not case["cross"]:
        allowed = allowed & torch.ones(t, t, dtype=torch.bool).tril()
    dead = ~allowed.any(-1)  # (B, T)
    assert torch.all(steps[dead] == 0) and torch.all(full[dead] == 0)
    # beam search: reorder the rows, then one more step of the last query
    order = torch.randint(0, b, (b,), generator=gen)
    reordered, last = cache.index_select(order), x[order, -1:]
    if case["cross"]:
        got, _ = mha(last, key_padding_mask=padding[order], cache=reordered)
        want, _ = mha(last, memory[order], key_padding_mask=padding[order])
    else:
        grown = torch.cat([padding[order], padding[order, -1:]], dim=1)  # (B, T + 1)
        got, _ = mha(last, key_padding_mask=grown, is_causal=True, cache=reordered)
        history = torch.cat([x[order], last], dim=1)  # (B, T + 1, E)
        want = mha(history, key_padding_mask=grown, is_causal=True)[0][:, -1:]
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
