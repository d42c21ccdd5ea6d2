"""Shared fixtures for the MultiHeadAttention tests (imported explicitly)."""

import torch

from attnkit import MultiHeadAttention


def seeded_mha(embed_dim: int, num_heads: int, **kwargs) -> MultiHeadAttention:
    """A seeded module with random (not the initial zero) biases, in eval mode.

    PyTorch's biases start at zero, so copying them between modules would go
    untested without this.
    """
    torch.manual_seed(0)
    mha = MultiHeadAttention(embed_dim, num_heads, **kwargs).eval()
    with torch.no_grad():
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            proj.bias.normal_()
    return mha


def identity_mha(
    embed_dim: int, *, dropout: float = 0.0, dtype: torch.dtype | None = None
) -> MultiHeadAttention:
    """One head, no biases, identity projections: the module is bare SDPA on its inputs."""
    mha = MultiHeadAttention(embed_dim, 1, bias=False, dropout=dropout, dtype=dtype)
    with torch.no_grad():
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            proj.weight.copy_(torch.eye(embed_dim))
    return mha
