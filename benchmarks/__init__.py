"""attnkit's benchmarks: each times attnkit against a baseline in the same run.

Run them with ``attnkit bench`` (``--quick`` for a one-minute pass,
``--json FILE`` to keep the figures). Results are ratios, never pass/fail
timings; benchmarks/RESULTS.md records a full run.
"""
