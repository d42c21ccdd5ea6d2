"""attnkit's benchmarks: each times attnkit against a baseline in the same run.

Run them from the root of a clone with ``python -m benchmarks.run`` or
``attnkit bench`` (``--quick`` for a short pass, ``--json FILE`` to keep
the figures); they are not installed with the package. Results are ratios, never pass/fail
timings; benchmarks/RESULTS.md records a full run.
"""
