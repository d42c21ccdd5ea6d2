"""Pictures of attention: weight heatmaps, masks and the saturation curves.

This package draws what it is given and never computes attention. It uses
matplotlib's object API with the Agg renderer (no pyplot, no global backend
switch, no window), so it is safe on headless machines and in threads. Every
function returns the :class:`~matplotlib.figure.Figure`; with ``path=`` it also
saves it, as PNG, SVG or PDF chosen by the file extension (written atomically).
All pictures share one palette, font size and resolution (:data:`DPI`).

Conventions: in a weights or mask picture, rows are queries (target tokens)
and columns are keys (source tokens), as in Bahdanau et al. 2015, fig. 3.

Text is drawn as given: every label, axis title and title is escaped here
(``style._escape_text``), so a token such as ``$x^$`` never reaches matplotlib's
mathtext parser, and title lines longer than :data:`TITLE_MAX` characters are cut
with "...". Callers pass raw tokens and never escape them themselves.

Modules: ``heatmap`` (weights), ``masks``, ``curves`` (saturation, learning
curve, coverage), ``weights_file`` (reading saved weights), and the shared
``style`` (palette, sizes, text), ``matrix`` (input checks, axes) and ``saving``.
"""

from .curves import coverage_histogram, learning_curve, saturation_plot
from .heatmap import heatmap, heatmap_grid
from .masks import mask_plot
from .saving import FORMATS, check_path, image_size, save
from .style import DPI, TITLE_MAX
from .weights_file import SavedWeights, read_weights

__all__ = [
    "DPI",
    "FORMATS",
    "TITLE_MAX",
    "SavedWeights",
    "check_path",
    "coverage_histogram",
    "heatmap",
    "heatmap_grid",
    "image_size",
    "learning_curve",
    "mask_plot",
    "read_weights",
    "saturation_plot",
    "save",
]
