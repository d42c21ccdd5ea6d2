"""MultiHeadAttention: incremental decoding with KVCache, grouped-query attention."""

import pytest
import torch

from attnkit import KVCache, MultiHeadAttention, padding_mask

B, T, E, H = 2, 6, 8, 4
KV_HEADS = pytest.mark.parametrize("kv_heads", [4, 2, 1], ids=["mha", "gqa", "mqa"])


def make(kv_heads=H, **kwargs):
    """A seeded module with random (not the initial zero) biases, in eval mode."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(E, H, num_kv_heads=kv_heads, **kwargs).eval()
    with torch.no_grad():
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            proj.bias.normal_()
    return mha


def left_padded(lengths, t):
    """(B, T) True at the last ``length`` positions: early queries of a short
    sentence see no real key under the causal mask, so their rows are empty."""
    return padding_mask(lengths, t).flip(1)


@KV_HEADS
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_step_by_step_with_cache_equals_the_full_causal_pass(kv_heads, need_weights):
    mha = make(kv_heads)
    x = torch.randn(B, T, E)
    kpm = left_padded([6, 4], T)
    full, full_weights = mha(x, key_padding_mask=kpm, is_causal=True, need_weights=True)
    cache = KVCache()
    for t in range(T):
        out, weights = mha(x[:, t], key_padding_mask=kpm[:, : t + 1], cache=cache,
                           need_weights=need_weights)  # fmt: skip
        assert torch.allclose(out, full[:, t], atol=1e-6), t
        if need_weights:
            assert torch.allclose(weights, full_weights[:, t, : t + 1], atol=1e-6)
    assert torch.equal(full[1, :2], torch.zeros(2, E))  # rows with no real key yet
    assert cache.steps == T and cache.length == T and cache.cross is False
    assert cache.key.shape == cache.value.shape == (B, kv_heads, T, E // H)


def test_prefill_chunk_then_steps_equals_the_full_causal_pass():
    mha = make(2)
    x = torch.randn(B, T, E)
    full, _ = mha(x, is_causal=True)
    cache = KVCache()
    first, _ = mha(x[:, :4], is_causal=True, cache=cache)  # Tq = Tk = 4
    second, _ = mha(x[:, 4:], is_causal=True, cache=cache)  # Tq = 2, Tk = 6: bottom-right
    assert torch.allclose(torch.cat([first, second], 1), full, atol=1e-6)
    assert cache.steps == 6


def test_cross_attention_cache_projects_the_encoder_states_once():
    mha = make(2)
    target, source = torch.randn(B, T, E), torch.randn(B, 5, E)
    kpm = padding_mask([5, 3])
    full, _ = mha(target, source, key_padding_mask=kpm)
    calls = []
    mha.k_proj.register_forward_hook(lambda *_: calls.append("k"))
    mha.v_proj.register_forward_hook(lambda *_: calls.append("v"))
    cache = KVCache()
    for t in range(T):
        memory = source if t == 0 else None  # later steps may leave the source out
        out, _ = mha(target[:, t : t + 1], memory, key_padding_mask=kpm, cache=cache)
        assert torch.allclose(out[:, 0], full[:, t], atol=1e-6), t
    assert calls == ["k", "v"]
    assert cache.cross is True and cache.length == 5 and cache.steps == T


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_cross_attention_cache_zeroes_the_padding_once_and_nan_there_reaches_nothing(
    need_weights,
):
    mha = make(2)
    target, source = torch.randn(B, T, E), torch.randn(B, 5, E)
    source[1, 3:] = float("nan")  # padding of the second sentence
    kpm = padding_mask([5, 3])
    clean = source.nan_to_num(0.0)
    full, _ = mha(target, clean, key_padding_mask=kpm)
    cache = KVCache()
    for t in range(T):
        out, _ = mha(target[:, t : t + 1], source if t == 0 else None, key_padding_mask=kpm,
                     cache=cache, need_weights=need_weights)  # fmt: skip
        assert torch.isfinite(out).all() and torch.allclose(out[:, 0], full[:, t], atol=1e-6)
    assert cache.zeroed and torch.equal(cache.key[1, :, 3:], torch.zeros(2, 2, E // H))
    assert torch.equal(cache.value[1, :, 3:], torch.zeros(2, 2, E // H))
    assert cache.index_select(torch.tensor([1, 0])).zeroed
    self_cache = KVCache()
    mha(target[:, :1], key_padding_mask=kpm[:, :1], cache=self_cache)
    assert not self_cache.zeroed  # self-attention: keys change at every step


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_cross_cache_refuses_a_later_mask_that_allows_a_key_it_zeroed(need_weights):
    mha = make(2)
    target, source = torch.randn(B, 3, E), torch.randn(B, 5, E)
    first = padding_mask([5, 3])
    cache = KVCache()
    mha(target[:, :1], source, key_padding_mask=first, cache=cache)
    key, steps = cache.key, cache.steps
    wider = padding_mask([5, 4])  # allows key 3 of row 1, zeroed by the first call
    message = r"key_padding_mask lets batch row 1 attend to key 3, but this cross-attention cache"
    with pytest.raises(ValueError, match=message):
        mha(target[:, 1:2], key_padding_mask=wider, cache=cache, need_weights=need_weights)
    with pytest.raises(ValueError, match=r"key_padding_mask \(None: every key\) lets batch row 1"):
        mha(target[:, 1:2], cache=cache, need_weights=need_weights)
    assert cache.key is key and cache.steps == steps  # refused without touching the cache
    reordered = cache.index_select(torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="lets batch row 0 attend to key 3"):
        mha(target[:, 1:2], key_padding_mask=wider, cache=reordered)


def test_cross_cache_serves_a_later_mask_that_masks_more_and_stays_zeroed():
    mha = make(2)
    target, source = torch.randn(B, 3, E), torch.randn(B, 5, E)
    first, narrower = padding_mask([5, 3]), padding_mask([2, 0], 5)
    cache = KVCache()
    mha(target[:, :1], source, key_padding_mask=first, cache=cache)
    out, _ = mha(target[:, 1:2], key_padding_mask=narrower, cache=cache)
    want, _ = mha(target[:, 1:2], source, key_padding_mask=narrower)
    assert torch.allclose(out, want, atol=1e-6) and torch.equal(out[1], torch.zeros(1, E))
    causal = torch.ones(1, 5, dtype=torch.bool)  # an attn_mask: not padding-only
    mha(target[:, 2:], key_padding_mask=first, attn_mask=causal, cache=cache)
    assert cache.zeroed and cache.kept is first  # zeroed stays true: the keys are still zero
    with pytest.raises(ValueError, match="lets batch row 1 attend to key 3"):
        mha(target[:, 2:], key_padding_mask=padding_mask([5, 5]), cache=cache)


def test_index_select_reorders_the_cache_like_the_batch():
    mha = make(2)
    x = torch.randn(3, 4, E)
    order = torch.tensor([2, 0, 0])
    cache = KVCache()
    for t in range(3):
        mha(x[:, t], cache=cache)
    reordered = cache.index_select(order)
    step, _ = mha(x[order, 3], cache=reordered)
    full, _ = mha(x[order], is_causal=True)
    assert torch.allclose(step, full[:, 3], atol=1e-6)
    assert reordered.steps == 4 and reordered.length == 4
    assert cache.steps == 3 and cache.length == 3  # the original is left as it was


def test_cache_misuse_is_refused_without_touching_the_cache():
    mha = make()
    cache = KVCache()
    mha(torch.randn(B, 1, E), cache=cache)
    key, steps = cache.key, cache.steps
    with pytest.raises(ValueError, match="cache has batch size 2 but query has B=3"):
        mha(torch.randn(3, 1, E), cache=cache)
    with pytest.raises(ValueError, match="self-attention keys; pass key=None"):
        mha(torch.randn(B, 1, E), torch.randn(B, 3, E), cache=cache)
    with pytest.raises(ValueError, match=r"key_padding_mask has shape \(2, 1\), expected \(2, 2\)"):
        mha(torch.randn(B, 1, E), key_padding_mask=padding_mask([1, 1]), cache=cache)
    with pytest.raises(TypeError, match="cache must be a KVCache"):
        mha(torch.randn(B, 1, E), cache={})
    assert cache.key is key and cache.steps == steps
    with pytest.raises(ValueError, match="cross-attention cache with no keys yet"):
        mha(torch.randn(B, 1, E), cache=KVCache(cross=True))


@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_a_cache_filled_by_another_head_layout_is_refused(cross):
    cache = KVCache()
    make(2)(torch.randn(B, 1, E), torch.randn(B, 5, E) if cross else None, cache=cache)
    key = cache.key  # (B, Hkv=2, Tk, Dh=2)
    step = torch.randn(B, 1, E)
    layout = r"cache holds keys of 2 key/value heads of size 2 \(shape \(2, 2, \d, 2\)\), "
    with pytest.raises(ValueError, match=layout + "but this module has num_kv_heads=4"):
        make(4)(step, cache=cache)
    with pytest.raises(ValueError, match=layout + "but this module has num_kv_heads=1"):
        make(1)(step, cache=cache)
    assert cache.key is key  # left as it was


def repeated_kv_heads(gqa):
    """The same function as ``gqa`` with Hkv = H: each K/V head copied G times."""
    full = make(H)
    group = H // gqa.num_kv_heads
    with torch.no_grad():
        for name in ("q_proj", "out_proj"):
            getattr(full, name).load_state_dict(getattr(gqa, name).state_dict())
        for name in ("k_proj", "v_proj"):
            src, dst = getattr(gqa, name), getattr(full, name)
            weight = src.weight.unflatten(0, (gqa.num_kv_heads, -1))  # (Hkv, Dh, E)
            dst.weight.copy_(weight.repeat_interleave(group, 0).flatten(0, 1))  # (H*Dh, E)
            bias = src.bias.unflatten(0, (gqa.num_kv_heads, -1))  # (Hkv, Dh)
            dst.bias.copy_(bias.repeat_interleave(group, 0).flatten())  # (H*Dh,)
    return full


@pytest.mark.parametrize("kv_heads", [2, 1], ids=["gqa", "mqa"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_grouped_query_attention_equals_repeating_the_kv_heads(kv_heads, need_weights):
    gqa = make(kv_heads)
    assert gqa.k_proj.weight.shape == (kv_heads * E // H, E)
    full = repeated_kv_heads(gqa)
    query, memory = torch.randn(B, 3, E), torch.randn(B, 5, E)
    kw = dict(key_padding_mask=padding_mask([5, 2]), need_weights=need_weights,
              average_weights=False, is_causal=True)  # fmt: skip
    out, weights = gqa(query, memory, **kw)
    expected, expected_weights = full(query, memory, **kw)
    assert torch.allclose(out, expected, atol=1e-6)
    if need_weights:
        assert torch.allclose(weights, expected_weights, atol=1e-6)
        # heads sharing a K/V head differ only through their queries
        assert not torch.allclose(weights[:, 0], weights[:, 1])


def test_gqa_gradients_are_finite_and_reach_every_projection():
    mha = make(2)
    x = torch.randn(B, T, E, requires_grad=True)
    out, _ = mha(x, key_padding_mask=left_padded([6, 3], T), is_causal=True)
    out.sum().backward()
    for name, p in mha.named_parameters():
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_a_cross_attention_step_checks_its_mask_in_plain_python():
    # torch.broadcast_shapes (torch._refs, symbolic-shape guards) cost some 50-100 us
    # per attention call of every decoder step, for a single mask that has nothing
    # to broadcast against
    from count_helpers import python_calls

    mha, pad = make(), padding_mask([T, 3])
    memory, cache = torch.randn(B, T, E), KVCache()
    with torch.no_grad():
        mha(torch.randn(B, 1, E), memory, memory, key_padding_mask=pad, cache=cache)
        calls = python_calls(
            lambda: mha(torch.randn(B, 1, E), memory, memory, key_padding_mask=pad, cache=cache)
        )
    assert {where: n for where, n in calls.items() if "torch/_refs" in where[0]} == {}
    assert sum(calls.values()) < 150  # 180 with torch.broadcast_shapes


def test_a_cache_is_compared_as_itself_and_can_be_a_dict_key():
    # a dataclass's value '==' raised "Boolean value of Tensor with more than one value is
    # ambiguous" between two filled caches, and hash() raised: no cache could key a dict
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 1, 8)
    first, second = KVCache(), KVCache()
    for cache in (first, second):
        mha(x, cache=cache)
    assert first == first and first != second
    assert {first: 1, second: 2}[second] == 2
