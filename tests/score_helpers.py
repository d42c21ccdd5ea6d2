"""Shared fixtures for the score and Attention tests (imported explicitly)."""

import torch

from attnkit import make_score

# dot products need equal widths; the learned scores may mix them
WIDTHS = {
    "dot": (6, 6),
    "scaled_dot": (6, 6),
    "general": (6, 4),
    "concat": (6, 4),
    "additive": (6, 4),
}


def build_score(name: str, dq: int, dk: int, dtype: torch.dtype = torch.float32):
    """A score of ``name`` for widths Dq, Dk, with hidden width A = 5 where it has one."""
    return make_score(name, query_dim=dq, key_dim=dk, hidden_dim=5).to(dtype)
