"""Worked examples for learners and teachers: the arithmetic of attention, step by step.

- :func:`explain` (``trace.py``) runs one attention computation and returns an
  :class:`AttentionTrace` holding every intermediate; ``str(trace)``,
  ``trace.to_markdown()`` and ``trace.to_dict()`` render it (``render.py``).
- :func:`saturation` (``saturation.py``) measures why scores are divided by
  ``sqrt(d_k)`` (Vaswani et al. 2017, sec. 3.2.1).

``attnkit.explain`` is the function :func:`explain`, re-exported at the top
level; the classes and the experiment are imported from here, e.g.
``from attnkit.lessons import AttentionTrace, saturation``.
"""

from .saturation import DEFAULT_DIMS, SaturationResult, saturation
from .trace import AttentionTrace, explain

__all__ = ["DEFAULT_DIMS", "AttentionTrace", "SaturationResult", "explain", "saturation"]
