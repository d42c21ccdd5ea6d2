"""Shared inputs and readers for the attnkit.plot tests."""

from matplotlib.image import imread

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
WEIGHTS = [[0.7, 0.2, 0.1], [0.1, 0.8, 0.1]]
CAUSAL_WEIGHTS = [[1.0, 0.0, 0.0], [0.3, 0.7, 0.0], [0.2, 0.0, 0.8]]  # (2, 1) is a real 0
TEX_LABELS = ["$x^$", "a_b", "c^d", "e\\f"]  # "$x^$" is invalid mathtext


def png_pixels(path):
    """(width, height) of a PNG, read from its header and checked against the decoded image."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert imread(path).shape[:2] == (height, width)
    return width, height
