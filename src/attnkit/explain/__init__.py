"""Step-by-step traces of one attention computation, for learners and teachers.

``explain(query, keys, values)`` returns an :class:`AttentionTrace` holding
every intermediate; ``str(trace)``, ``trace.to_markdown()`` and
``trace.to_dict()`` render it. Note that ``attnkit.explain`` (the package
attribute) is the function; import the trace type with
``from attnkit.explain import AttentionTrace``.
"""

from .trace import AttentionTrace, explain

__all__ = ["AttentionTrace", "explain"]
