"""Property tests: random shapes, dtypes and masks, including fully masked rows."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit import masked_softmax, scaled_dot_product_attention

DTYPES = st.sampled_from([torch.float32, torch.float64, torch.bfloat16])


@st.composite
def attention_case(draw):
    b = draw(st.integers(0, 3))
    tq, tk = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    d, dv = draw(st.integers(1, 8)), draw(st.integers(1, 5))
    dtype = draw(DTYPES)
    magnitude = draw(st.sampled_from([1.0, 30.0, 1e3]))
    seed = draw(st.integers(0, 2**16))
    gen = torch.Generator().manual_seed(seed)
    q = (torch.randn(b, tq, d, generator=gen) * magnitude).to(dtype)
    k = torch.randn(b, tk, d, generator=gen).to(dtype)
    v = torch.randn(b, tk, dv, generator=gen).to(dtype)
    keep = draw(st.floats(0.0, 1.0))
    mask = torch.rand(b, tq, tk, generator=gen) < keep
    return q, k, v, mask, draw(st.booleans())


def allowed_keys(mask, causal):
    """The oracle: which keys each query may attend to, from the mask and the causal flag.

    The causal mask is bottom-right aligned: query i of Tq may see key j of Tk
    when j <= i + (Tk - Tq).
    """
    tq, tk = mask.shape[-2:]
    if not causal:
        return mask
    i, j = torch.arange(tq)[:, None], torch.arange(tk)[None, :]
    return mask & (j <= i + (tk - tq))


@settings(max_examples=60, deadline=None)
@given(attention_case())
def test_weights_are_valid_and_outputs_finite(case):
    q, k, v, mask, causal = case
    out, weights = scaled_dot_product_attention(
        q, k, v, mask, is_causal=causal, return_weights=True
    )
    fused = scaled_dot_product_attention(q, k, v, mask, is_causal=causal)
    w = weights.float()
    assert torch.isfinite(out).all() and torch.isfinite(fused).all()
    assert torch.all((w >= 0) & (w <= 1))
    allowed = allowed_keys(mask, causal)
    assert torch.all(w[~allowed] == 0)
    sums = w.sum(-1)
    has_key = allowed.any(-1)  # from the inputs, never from the weights under test
    tol = 2e-2 if q.dtype == torch.bfloat16 else 1e-5
    assert torch.all((sums - 1).abs()[has_key] <= tol)
    assert torch.all(sums[~has_key] == 0)
    assert torch.all(out[~has_key] == 0) and torch.all(fused[~has_key] == 0)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 5),
    st.integers(1, 9),
    st.sampled_from([1.0, 1e2, 1e4]),
    st.integers(0, 2**16),
)
def test_masked_softmax_rows_sum_to_one_or_zero(rows, cols, magnitude, seed):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(rows, cols, generator=gen) * magnitude
    mask = torch.rand(rows, cols, generator=gen) < 0.5
    weights = masked_softmax(scores, mask)
    assert torch.isfinite(weights).all()
    assert torch.all(weights[~mask] == 0)
    sums = weights.sum(-1)
    full = mask.any(-1)
    torch.testing.assert_close(sums[full], torch.ones_like(sums[full]))
    assert torch.all(sums[~full] == 0)
