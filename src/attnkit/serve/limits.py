"""What one request to the explorer may ask for (light: no web stack, for the CLI's options)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limits"]


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; beyond it the answer is an error that says the limit."""

    max_chars: int = 2000  # characters of text per /translate request
    max_lines: int = 16  # non-blank lines per /translate request
    max_body_bytes: int = 256_000  # any request body
    max_pending: int = 8  # /translate requests running or waiting for a run before 503
    max_explain: int = 32  # rows and columns of each /explain matrix
